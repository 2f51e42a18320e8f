"""Card 14: Investigating Redundancy in Multimodal Large Language Models with Multiple Vision Encoders
(ICLR 2026, arXiv 2507.03262, OpenReview cAopJVLKvi).

Project page: MaoSong2022/Encoder-Redundancy (the CUR and IG formulas); the authors' masking code: the
`eagle` branch of MaoSong2022/VLMEvalKit (commit 2e56cffc7397bd2cef27724ea8907fa7bb93a78c).
"""
from iclr26.core.paper import Paper

PAPER = Paper(
    slug="encoder_redundancy",
    title="Investigating Redundancy in Multimodal Large Language Models with Multiple Vision Encoders",
    arxiv="2507.03262",
    openreview="cAopJVLKvi",
    code="https://github.com/MaoSong2022/Encoder-Redundancy",
    # one row: the multi-encoder model; its masked passes and its re-trained encoder subsets are
    # evaluated in the same job so that every ratio (CUR, % of full) is paired by seed
    methods=("multi_encoder",),
    datasets=("minimme",),   # MiniMME in VLMEvalKit's TSV layout (tiny, smoke) / VLMEvalKit TSVs (full)
    metrics=("acc", "rel_acc", "train_acc", "cur", "ig", "cur_max", "cur_min", "cur_cap", "best_gain", "ig_drop",
             "params", "macs", "train_macs", "rel_macs", "rel_train_macs"),
    figures=("masking.png",),
    stage_module="iclr26.papers.encoder_redundancy.stages",
    gpu_stages=("evaluate",),   # full: train only checks the snapshots; tiny trains on CPU
    data_reads=("model", "eval"),   # prepare resizes to model.image_size; its pre-arm probe reads eval and model
)
