"""Card 15: Video Scene Segmentation with Genre and Duration Signals (Cho, Ha, Jeon; ICLR 2026,
OpenReview c8r3lzyVTS). No official code: built on BaSSL (kakaobrain/bassl), read, re-implemented
small (bassl.py)."""
from iclr26.core.paper import Paper

METHODS = ("bassl", "genre_prior", "genre_shuffled", "duration_anchor", "test_split", "all_three")

PAPER = Paper(
    slug="scene_segmentation",
    title="Video Scene Segmentation with Genre and Duration Signals",
    openreview="c8r3lzyVTS",
    code="https://github.com/kakaobrain/bassl",   # the base it builds on; the paper's own code: none found
    methods=METHODS,
    datasets=("movienet",),   # MovieNet-SSeg layout: synthetic worlds at tiny/smoke, MovieNet at full
    metrics=("ap", "miou", "f1", "miou_shots", "ap_last", "miou_last", "ap_random_half", "ap_genre_mean",
             "pseudo_precision", "dur_ratio", "genre_signal", "split_signal"),
    figures=("ap_by_arm.png",),
    stage_module="iclr26.papers.scene_segmentation.stages",
    gpu_stages=("prepare", "train"),   # prepare extracts key-frame features at full; train pretrains,
                                       # fine-tunes and scores; evaluate is metrics
    data_reads=("split", "genre"),   # prepare: split.tau (the data checks), genre.definitions (full: the vocabulary)
    seed_list_stages=("acquire", "prepare"),  # they draw or train something for every seed of the list
)
