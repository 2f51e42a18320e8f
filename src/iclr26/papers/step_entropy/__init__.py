"""Card 07: Compressing LLM Chain-of-Thought via Step Entropy (arXiv 2508.03346, ICLR 2026)."""
from iclr26.core.paper import Paper

PAPER = Paper(
    slug="step_entropy",
    title="Making Slow Thinking Faster: Compressing LLM Chain-of-Thought via Step Entropy",
    arxiv="2508.03346", openreview="cGLqQfS5wH",
    code="https://github.com/staymylove/COT_Compresstion_via_Step_entropy",
    methods=("full_cot", "low_entropy", "random", "high_entropy"),  # table rows, in order
    datasets=("reasoning", "filler_weakness", "restate_value"),  # the headline task, the card's weakness row,
                                                                 # and restatements that carry the computed value
    metrics=("accuracy", "acc_drop", "thinking_tokens", "necessary_kept", "score_comp", "score_redundant",
             "skip_ratio", "comp_steps", "oracle_drop"),
    figures=("accuracy_vs_mask_ratio.png",),
    stage_module="iclr26.papers.step_entropy.stages",
    training_free=("high_entropy",),  # not in train.sft_methods: a Stage A baseline only (stages.train)
    gpu_stages=("prepare", "train", "evaluate"),   # prepare writes the model's own traces (one pass, shared)
    data_reads=("model", "base", "format", "method", "train"),  # prepare writes the model's own traces
    seed_list_stages=("prepare",),  # they draw or train something for every seed of the list
)
