"""Card 18: Block-wise Adaptive Caching for Accelerating Diffusion Policy (BAC; ICLR 2026,
arXiv 2506.13456, OpenReview c6ZWfQLOWD).

Code: the README's clone URL github.com/kyji/BAC was not available; its wrapper and BACInfer module
were read by content (card 18, section 1) and re-implemented from the paper's description (cache.py).
The policy is Diffusion Policy's DP-T (real-stanford/diffusion_policy, re-implemented in model.py).
"""
from iclr26.core.paper import Paper

PAPER = Paper(
    slug="bac",
    title="Block-wise Adaptive Caching for Accelerating Diffusion Policy (BAC)",
    arxiv="2506.13456",
    openreview="c6ZWfQLOWD",
    code="https://github.com/kyji/BAC",
    methods=("full", "uniform", "unified_acs", "blockwise_acs", "bac"),  # table rows, in order
    datasets=("pusht",),  # Push-T low-dim schema: synthetic two-mode demos at tiny/smoke, pusht.zip at full
    # (closed loop: the reach-around task at tiny/smoke, the official Push-T simulator gym-pusht at full)
    metrics=("action_l2", "ffn_update_err", "success", "score", "flops_speedup", "gflops_chunk", "block_frac",
             "budget", "wall_speedup", "ms_full", "ms_chunk", "gpu_timing", "adj_sim", "adj_sim_spread",
             "distinct_schedules"),
    figures=("bac_tradeoff.png",),
    stage_module="iclr26.papers.bac.stages",
    gpu_stages=("prepare", "train", "evaluate"),  # full: DP-T training, calibration and timing on the GPU
    data_reads=("model", "train", "noise_scheduler"),  # prepare trains the policy BAC plugs into
    # nothing is trained for any row; bac's train job is its offline schedule calibration, the other
    # calibrated rows run the same cheap pass (one uncached pass on a few windows, the DP) inside
    # their evaluate job, which saves a job each
    training_free=("full", "uniform", "unified_acs", "blockwise_acs"),
)
