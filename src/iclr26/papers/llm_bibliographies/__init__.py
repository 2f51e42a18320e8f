"""Card 10: Structurally Human, Semantically Biased: Detecting LLM-Generated References with
Embeddings and GNNs (Mobini, Holst, Tori, Algaba, Ginis; ICLR 2026, arXiv 2601.20704).

No official code; the GPT-4o reference lists come from the companion pipeline
AndresAlgaba/LLMs_scientific_literature (read, not copied) and its Zenodo record 15124610.
"""
from iclr26.core.paper import Paper

PAPER = Paper(
    slug="llm_bibliographies",
    title="Structurally Human, Semantically Biased: Detecting LLM-Generated References with Embeddings and GNNs",
    arxiv="2601.20704",
    openreview="cEXEmyW77N",
    code=None,
    # table rows: the paper's four (RF / GCN x structure / embeddings), the structure RF without the
    # focal -- reference star, a metadata RF (popularity and age of the references), the random-vector
    # controls (fixed per PaperID; fresh per node), and the recommender-rank sweep of the RF-embedding
    # row (tiny only: one GPT-4o at full scale)
    methods=("rf_struct", "rf_struct_nostar", "rf_embed", "gcn_struct", "gcn_struct_nostar", "gcn_embed", "rf_meta",
             "rf_random_vec", "rf_random_vec_fresh", "rf_embed_low_rank", "rf_embed_high_rank"),
    datasets=("scisci",),  # SciSciNet-format corpus: synthetic at tiny/smoke, the v1 release at full
    metrics=("accuracy", "f1", "focal_cos", "log_citations", "edge_density", "gt_overlap", "future_share",
             "n_refs"),
    figures=("accuracy.png",),
    stage_module="iclr26.papers.llm_bibliographies.stages",
    gpu_stages=("prepare",),  # full: the embedding model; the classifiers are small (CPU)
    data_reads=("llm", "embed", "graph"),
    # the random forests are fit in evaluate (seconds); the GCN rows train (one unit per seed and task)
    training_free=("rf_struct", "rf_struct_nostar", "rf_embed", "rf_meta", "rf_random_vec", "rf_random_vec_fresh",
                   "rf_embed_low_rank", "rf_embed_high_rank"),
)
