"""Card 13: EvolProver: Advancing Automated Theorem Proving by Evolving Formalized Problems via
Symmetry and Difficulty (arXiv 2510.00732). No official code or weights were found (card 13, §1):
the pipeline is rebuilt from the paper's description (EvolAST, EvolDomain, EvolDifficulty).
"""
from iclr26.core.paper import Paper

PAPER = Paper(
    slug="evolprover",
    title="EvolProver: Evolving Formalized Problems via Symmetry and Difficulty",
    arxiv="2510.00732",
    methods=("seed_only", "evol_ast", "evol_domain", "evol_difficulty", "evol_all", "data_matched"),
    datasets=("seeds", "minif2f", "formalmath_lite", "ineq_comp"),
    metrics=("pass_at_1", "pass_at_8", "pass_at_n", "robustness_gap"),   # pass_at_n: pass@k at k = n samples
    figures=("pass_at_k.png",),
    stage_module="iclr26.papers.evolprover.stages",
    gpu_stages=("prepare", "train", "evaluate"),   # prepare: the full scale's LLM evolutions (llm_evol) on the seeds
    data_reads=("evolve", "model", "lean"),   # lean: the checker's home and header (MiniF2F's acquire installs Lean)
)
