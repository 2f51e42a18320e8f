"""Card 06: PrismAudio: Decomposed Chain-of-Thoughts and Multi-dimensional Rewards for Video-to-Audio
Generation (ICLR 2026, arXiv 2511.18833, OpenReview cIfDKEbAky).

Official code: FunAudioLLM/ThinkSound, branch prismaudio (grpo/fast_grpo: the Fast-GRPO sampler,
loss, reward weights; read, re-implemented at toy size).
"""
from iclr26.core.paper import Paper

PAPER = Paper(
    slug="prismaudio",
    title="PrismAudio: Decomposed Chain-of-Thoughts and Multi-dimensional Rewards for Video-to-Audio Generation",
    arxiv="2511.18833",
    openreview="cIfDKEbAky",
    code="https://github.com/FunAudioLLM/ThinkSound/tree/prismaudio",
    methods=("base", "grpo_semantic", "flow_grpo", "fast_grpo"),   # table rows, in order
    datasets=("vggsound",),   # VGGSound-layout synthetic clips at tiny/smoke, the hub mirror's clips at full
    metrics=("semantic", "onset_err", "pan_err", "aesthetic", "reward", "heldout_acc", "fd", "grad_steps",
             "nfe_fwd", "nfe_bwd", "max_reward_corr", "min_group_spread", "headroom_semantic",
             "headroom_temporal", "headroom_spatial", "headroom_aesthetic", "headroom_reward", "reward_gain",
             "gain_frac"),
    figures=("reward_dimensions.png",),
    stage_module="iclr26.papers.prismaudio.stages",
    gpu_stages=(),            # the toy generator runs on CPU at every scale (deviations)
    data_reads=("pretrain", "model", "grpo", "eval", "arms"),
    training_free=("base",),
    seed_list_stages=("prepare",),  # they draw or train something for every seed of the list
)
