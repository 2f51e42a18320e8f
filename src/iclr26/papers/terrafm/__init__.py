"""Card 12: TerraFM: A Scalable Foundation Model for Unified Multisensor Earth Observation
(ICLR 2026 submission, arXiv 2506.06281, OpenReview cBxuzdUDNx).

Official code: mbzuai-oryx/TerraFM (inference model `terrafm.py` only; read for the encoder,
re-implemented at small width; no training code is public).
"""
from iclr26.core.paper import Paper

PAPER = Paper(
    slug="terrafm",
    title="TerraFM: A Scalable Foundation Model for Unified Multisensor Earth Observation",
    arxiv="2506.06281",
    openreview="cBxuzdUDNx",
    code="https://github.com/mbzuai-oryx/TerraFM",
    methods=("random", "raw_stats", "s2_dino", "modality_aug", "dual_center"),   # table rows, in order
    datasets=("majortom",),   # mini-Major-TOM (tiny, smoke) / Major-TOM Core parts (full)
    metrics=("oa", "balanced_acc", "tail_acc", "collapsed", "mean_h_norm", "first_loss", "last_loss", "trained",
             "center_gap", "dual_kl", "dual_active", "micro_f1"),   # micro_f1: m-bigearthnet (full); = oa elsewhere
    figures=("knn_accuracy.png",),
    stage_module="iclr26.papers.terrafm.stages",
    gpu_stages=("train",),   # evaluate: frozen features and kNN on the CPU node
    data_reads=("eval",),    # prepare's pre-arm checks use the kNN settings
    training_free=("random", "raw_stats"),
)
