"""Card 19: Zebra-CoT: A Dataset for Interleaved Vision-Language Reasoning (ICLR 2026, arXiv
2507.16746, OpenReview c6XIVI3TiQ). Dataset multimodal-reasoning-lab/Zebra-CoT (HF); code
multimodal-reasoning-lab/Bagel-Zebra-CoT (a BAGEL fork; its README is upstream's). The tiny design is
the card's section 6, shrunk after the audit so that the task is learnt within the CPU budget: a
synthetic Multi-Hop Objects Counting subset in the real schema, a discrete image tokenizer, one
small decoder trained per arm, a learnability gate on the interleaved arm (per-step image accuracy
with the gold steps fed, and its own-chain accuracy above the question-only lookup), and the majority
and question-only lookup baselines.
"""
from iclr26.core.paper import Paper

PAPER = Paper(
    slug="zebra_cot",
    title="Zebra-CoT: A Dataset for Interleaved Vision-Language Reasoning",
    arxiv="2507.16746",
    openreview="c6XIVI3TiQ",
    code="https://github.com/multimodal-reasoning-lab/Bagel-Zebra-CoT",
    methods=("majority", "lookup", "answer_only", "text_trace", "text_cot", "interleaved"),   # table rows in order
    datasets=("counting",),   # Multi-Hop Objects Counting: synthetic (tiny, smoke), the hub configs (full)
    metrics=("accuracy", "image_step_acc", "gain_over_k0", "fed_image_acc", "fed_token_acc", "copy_token_acc",
             "malformed", "gate_margin", "tokens_per_example", "supervised_tokens", "n_dropped"),
    figures=("scaffolding.png",),
    stage_module="iclr26.papers.zebra_cot.stages",
    gpu_stages=("train",),
    data_reads=("image_tokenizer", "model"),   # model: full-scale acquire snapshots the pinned Anole
    training_free=("majority", "lookup"),   # answer baselines computed in prepare (stages.baselines)
)
