"""Card 05: a compositional AND-OR template for art and design (ICLR 2026 submission; the paper itself
was not found publicly: no arXiv or OpenReview id). Mechanics from the AND-OR Template framework of
Si & Zhu (TPAMI 2013) and Jin et al., "Learning AND-OR Templates for Professional Photograph Parsing
and Guidance" (arXiv 2410.06124). No official code.
"""
from iclr26.core.paper import Paper

PAPER = Paper(
    slug="andor_template",
    title="A Compositional AND-OR Template for Art and Design",
    arxiv=None,
    code=None,
    # rows: the template without / with structural expansion; the pool in EM without a new branch
    # (separates branch discovery from extra data); the deep baseline (an MLP on the same part-geometry
    # features) on the labelled set and with the same pool (equal data access, pseudo-labelled); the
    # structure baseline (k-means on the raw part positions); the guidance controls (a random move of
    # the prescribed part, a random term of the same block, the learning-free thirds rule); and the
    # representability check (the template learned from a labelled set holding every paradigm)
    # the sensitivity row template_expansion_card_bins uses the card trial's grid (audit 05 M1)
    methods=("template", "template_expansion", "template_pool_em", "mlp", "mlp_pool", "kmeans_geometry",
             "random_move", "random_bin", "thirds_rule", "template_all_paradigms", "template_expansion_card_bins"),
    datasets=("layouts",),   # AVA-format rated layouts: synthetic at tiny/smoke, AVA + part boxes at full
    metrics=("srcc", "plcc", "srcc_new", "frac_new", "purity", "nmi", "n_params", "n_branches", "guidance_delta"),
    figures=("srcc_budget.png",),
    stage_module="iclr26.papers.andor_template.stages",
    gpu_stages=(),           # CPU only at every scale: closed-form pursuit, EM and a small MLP
    # the templates are fit in evaluate (closed form + EM, seconds); the MLPs train (one unit per seed and budget)
    training_free=("template", "template_expansion", "template_pool_em", "kmeans_geometry", "random_move",
                   "random_bin", "thirds_rule", "template_all_paradigms", "template_expansion_card_bins"),
)
