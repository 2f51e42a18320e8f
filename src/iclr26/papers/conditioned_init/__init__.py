"""Card 01: Conditioned Initialization for Attention (ICLR 2026 submission, OpenReview cKNOCYPo2W).

No arXiv id and no official code were found; the recipe is from the card (shared/papers/01).
"""
from iclr26.core.paper import Paper

PAPER = Paper(
    slug="conditioned_init",
    title="Conditioned Initialization for Attention",
    openreview="cKNOCYPo2W",
    methods=("random", "xavier", "mimetic", "weight_selection", "conditioned"),  # table rows, in order
    datasets=("images",),  # motif pairs at tiny/smoke, CIFAR-10 at full (config data.images.source)
    metrics=("kappa_J_init", "log10_kappa_J_init", "qkv_head_kappa_init", "loss_auc", "steps_to_target",
             "reached_target", "test_acc"),
    figures=("loss_curves.png", "kappa_vs_accuracy.png"),
    stage_module="iclr26.papers.conditioned_init.stages",
    data_parallel=True,  # training.py shards each batch over `accelerate launch` processes
    gpu_stages=("train",),  # evaluate reads the saved test logits with numpy
    seed_list_stages=("acquire", "prepare"),  # they draw or train something for every seed of the list
)
