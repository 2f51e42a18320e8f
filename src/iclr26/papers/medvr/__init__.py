"""Card 02: MedVR, Annotation-Free Medical Visual Reasoning via Agentic Reinforcement Learning
(ICLR 2026, arXiv 2604.08203, OpenReview cK35kNVm5r). No official code was found (card section 1);
EVR and CCA follow the card's reading of the abstract (section 2), not the paper's equations."""
from iclr26.core.paper import Paper

PAPER = Paper(
    slug="medvr",
    title="MedVR: Annotation-Free Medical Visual Reasoning via Agentic Reinforcement Learning",
    arxiv="2604.08203",
    openreview="cK35kNVm5r",
    code=None,               # none found (card section 1)
    methods=("global_only", "outcome_grpo", "evr", "cca", "medvr", "oracle_crop"),  # table rows
    datasets=("vqa_rad",),   # VQA-RAD-schema synthetic scans at tiny/smoke, VQA-RAD's parquet at full
    metrics=("accuracy", "grounding_hit", "rollouts_per_question", "entropy_sd"),
    figures=("accuracy.png",),
    stage_module="iclr26.papers.medvr.stages",
    gpu_stages=(),           # the full-scale VLM RL is not implemented (the config's deviations)
    data_reads=("agent",),   # prepare: the views (pool) and the base perception
    training_free=("oracle_crop",),
)
