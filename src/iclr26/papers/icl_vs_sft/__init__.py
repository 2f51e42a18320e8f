"""Card 04: Comparing the learning dynamics of in-context learning and fine-tuning in language
models (ICLR 2026, OpenReview cJAtzOcAnd). No arXiv id; the code (basile6/ICLvsSFT, per a
third-party summary) was not accessible, so the recipe is the card's (shared/papers/04, section 6).
"""
from iclr26.core.paper import Paper

PAPER = Paper(
    slug="icl_vs_sft",
    title="Comparing the learning dynamics of in-context learning and fine-tuning in language models",
    openreview="cJAtzOcAnd",
    methods=("icl", "sft"),   # the two learning algorithms, on the same k shots of each task
    datasets=("tasks",),      # the 2-D linear classification tasks (synthetic at every scale)
    metrics=("acc", "acc_pro", "acc_anti", "prior_gap", "confidence", "overconfidence", "label_var_frac",
             "label_var_frac_mid", "label_var_frac_mid_pred", "label_var_frac_last_flat",
             "r2_irrelevant_last", "r2_relevant_last", "r2_irrelevant_mid", "r2_relevant_mid",
             "r2_selectivity_last", "r2_selectivity_mid"),
    figures=("learning_curves.png", "probes_by_layer.png"),
    stage_module="iclr26.papers.icl_vs_sft.stages",
    gpu_stages=("train",),    # both learners run in train; evaluate averages their JSON results
    data_reads=("model", "pretrain", "format"),   # prepare pretrains the tiny model (tiny, smoke)
    seed_list_stages=("acquire", "prepare"),  # they draw or train something for every seed of the list
)
