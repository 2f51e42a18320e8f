"""Card 17: Beyond RAG vs. Long-Context: Learning Distraction-Aware Retrieval for Efficient
Knowledge Grounding (LDAR; ICLR 2026, arXiv 2509.21865, OpenReview c8CZWLy4T4).

Official code: ku-dmlab/LDAR (read for the policy, action space, loss and data; re-implemented).
"""
from iclr26.core.paper import Paper

RATIOS = ("ratio_005", "ratio_01", "ratio_02", "ratio_04", "ratio_06", "ratio_08")

PAPER = Paper(
    slug="ldar",
    title="Beyond RAG vs. Long-Context: Learning Distraction-Aware Retrieval (LDAR)",
    arxiv="2509.21865",
    openreview="c8CZWLy4T4",
    code="https://github.com/ku-dmlab/LDAR",
    methods=("lc", "rag", *RATIOS, "best_ratio", "adaptive_k", "ldar", "oracle"),  # table rows, in order
    datasets=("lara",),  # LaRA-schema synthetic at tiny/smoke, the LaRA files of the official repo at full
    metrics=("accuracy", "usage_ratio", "n_passages"),
    figures=("accuracy_vs_usage.png",),
    stage_module="iclr26.papers.ldar.stages",
    gpu_stages=("prepare", "train", "evaluate"),  # full: bge-large embeddings, the LLM reader and judge
    data_reads=("reader", "retriever", "embedder", "model"),
    training_free=("lc", "rag", *RATIOS, "best_ratio", "adaptive_k", "oracle"),
)
