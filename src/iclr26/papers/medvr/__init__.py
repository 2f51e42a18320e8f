"""Card 02: MedVR, Annotation-Free Medical Visual Reasoning via Agentic Reinforcement Learning
(ICLR 2026, arXiv 2604.08203, OpenReview cK35kNVm5r). No official code was found (card section 1);
EVR and CCA follow the card's reading of the abstract (section 2), not the paper's equations.
Tiny: agent.py (MLP zoom-and-answer agent, seed-batched GRPO); full: vlm.py (Qwen2.5-VL + LoRA)."""
from iclr26.core.paper import Paper

PAPER = Paper(
    slug="medvr",
    title="MedVR: Annotation-Free Medical Visual Reasoning via Agentic Reinforcement Learning",
    arxiv="2604.08203",
    openreview="cK35kNVm5r",
    code=None,               # none found (card section 1)
    methods=("global_only", "base_random_zoom", "outcome_grpo", "outcome_grpo_matched", "evr", "cca", "medvr",
             "oracle_crop"),  # table rows
    datasets=("vqa_rad",),   # VQA-RAD-schema synthetic scans at tiny/smoke, VQA-RAD's parquets at full
    metrics=("accuracy", "grounding_hit", "rollouts_per_question", "entropy_sd"),
    figures=("accuracy.png",),
    stage_module="iclr26.papers.medvr.stages",
    gpu_stages=("train", "evaluate"),   # full scale: the VLM's GRPO (vlm.py) and its greedy evaluation
    data_reads=("agent", "model"),   # prepare: the views (pool), the base perception; acquire (full): the VLM snapshot
    training_free=("oracle_crop", "base_random_zoom"),
)
