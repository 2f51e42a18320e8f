"""Sharp KL convergence of diffusion sampling (Jain & Zhang, arXiv 2508.16306): card 16.

A theory paper: the rates are checked with exact scores and exactly propagated sampler laws.
Methods are the three Exponential-Integrator schemes; datasets are the target laws.
"""
from iclr26.core.paper import Paper

PAPER = Paper(
    slug="diffusion_convergence",
    title="A Sharp KL-Convergence Analysis for Diffusion Models under Minimal Assumptions",
    arxiv="2508.16306",
    code=None,  # theory paper, no official code
    methods=("ei_sde", "ei_ode", "ei_ode_noise"),  # Benton et al.'s scheme, ablation, the paper's scheme
    datasets=("atoms_1d", "triangle_2d"),          # 1-D Dirac mixture; non-product 2-D triangle of atoms
    metrics=("kl_fwd", "slope", "eps_exponent", "slope_rev", "eps_exponent_rev", "d_exponent", "path_kl"),
    figures=("kl_vs_n.png", "delta_sweep.png", "d_sweep.png", "c_sweep.png", "path_kl.png"),
    stage_module="iclr26.papers.diffusion_convergence.stages",
    gpu_stages=(),  # numpy on CPU at every scale
    data_reads=("train",),  # prepare builds the grids the sweeps (train.sweeps, train.refine) use
)
