"""Card 09: Beyond Instance-Level Alignment: Dual-Level Optimal Transport for Audio-Text Retrieval
(DART; ICLR 2026, OpenReview cFhcd4WGjO). No official code found; the baseline m-LTM's code
(v-manhlt3/m-LTM-Audio-Text-Retrieval, tools/loss.py) was read for the instance-level loss.
"""
from iclr26.core.paper import Paper

PAPER = Paper(
    slug="dart",
    title="Beyond Instance-Level Alignment: Dual-Level Optimal Transport for Audio-Text Retrieval (DART)",
    openreview="cFhcd4WGjO",
    methods=("iot", "dart_no_ram", "dart"),
    datasets=("clotho",),
    metrics=("r1_a2t", "r5_a2t", "r10_a2t", "r1_t2a", "r5_t2a", "r10_t2a", "r1_mean", "ram_ratio", "ram_nuis_corr"),
    figures=("recall_grid.png",),
    stage_module="iclr26.papers.dart.stages",
    gpu_stages=("train",),   # full scale only (ResNet38 + BERT); tiny and smoke train on the CPU
    data_reads=("model", "text_encoder"),   # full scale: prepare cuts waves for ResNet38 and tokenises for BERT
)
