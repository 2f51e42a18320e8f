"""Card 03: Efficient Reasoning with Balanced Thinking (ReBalance; arXiv 2603.12372, ICLR 2026)."""
from iclr26.core.paper import Paper

PAPER = Paper(
    slug="rebalance",
    title="Efficient Reasoning with Balanced Thinking",
    arxiv="2603.12372", openreview="cJseWJJ5IM", code="https://github.com/yu-lin-li/ReBalance",
    methods=("original", "keyword_suppression", "static_steering", "rebalance"),  # table rows, in order
    datasets=("math",),
    metrics=("accuracy", "acc_hard", "thinking_tokens", "len_correct", "len_incorrect", "errors_fixed", "reflections",
             "format_ok", "acc_format_ok", "reflect_rate", "probe_format_ok", "alpha_neg_share", "alpha_pos_share",
             "alpha_mean", "vector_reflect_change", "vector_format_change"),
    figures=("accuracy_vs_thinking_tokens.png",),
    stage_module="iclr26.papers.rebalance.stages",
    training_free=("original", "keyword_suppression"),  # train() fits nothing for them (stages.train)
    gpu_stages=("prepare", "evaluate"),   # prepare calibrates (one pass, shared by both steering arms); train is numpy
    data_reads=("model", "base", "format", "method", "eval"),  # prepare trains (tiny) or loads the model, calibrates
    seed_list_stages=("prepare",),  # they draw or train something for every seed of the list
)
