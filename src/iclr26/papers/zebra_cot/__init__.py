"""Card 19: Zebra-CoT: A Dataset for Interleaved Vision-Language Reasoning (ICLR 2026, arXiv
2507.16746, OpenReview c6XIVI3TiQ). Dataset multimodal-reasoning-lab/Zebra-CoT (HF); code
multimodal-reasoning-lab/Bagel-Zebra-CoT (a BAGEL fork; its README is upstream's). The tiny design is
the card's section 6: a synthetic Multi-Hop Objects Counting subset in the real schema, a discrete
image tokenizer and one small decoder trained per arm.
"""
from iclr26.core.paper import Paper

PAPER = Paper(
    slug="zebra_cot",
    title="Zebra-CoT: A Dataset for Interleaved Vision-Language Reasoning",
    arxiv="2507.16746",
    openreview="c6XIVI3TiQ",
    code="https://github.com/multimodal-reasoning-lab/Bagel-Zebra-CoT",
    methods=("answer_only", "text_trace", "interleaved"),   # the arms (card 6.3), table rows in order
    datasets=("counting",),   # Multi-Hop Objects Counting: synthetic (tiny, smoke), the hub configs (full)
    metrics=("accuracy", "image_step_acc", "gain_over_k0", "tokens_per_example"),
    figures=("scaffolding.png",),
    stage_module="iclr26.papers.zebra_cot.stages",
    gpu_stages=("train",),
    data_reads=("image_tokenizer",),
)
