"""Card 11: Efficient Agent Training for Computer Use (PC Agent-E; ICLR 2026, arXiv 2505.13909).

Official code: GAIR-NLP/PC-Agent-E (read at commit 9b1b00b: postprocess/prepare.py for the boost
filters, the 12-action space and the "thought, blank line, Action:" response format; re-implemented).
"""
from iclr26.core.paper import Paper

PAPER = Paper(
    slug="pc_agent_e",
    title="Efficient Agent Training for Computer Use (PC Agent-E)",
    arxiv="2505.13909",
    code="https://github.com/GAIR-NLP/PC-Agent-E",
    methods=("base", "teacher", "human_only", "human_only_eq_steps", "distill", "distill_1rollout", "boost"),
    datasets=("minidesk",),  # MiniDesk tasks and trajectories at tiny/smoke; the released trajectories at full
    # boost_coverage: the Boost claims' coverage check; train_fit: every compared arm's fit precondition
    # (student.fit), train_acc: its plain training action accuracy
    metrics=("success", "n_train", "boost_coverage", "train_fit", "train_acc"),
    figures=("success_by_app.png",),
    stage_module="iclr26.papers.pc_agent_e.stages",
    gpu_stages=("train",),  # evaluate at full reads the WAA-V2 host's results (full.py)
    data_reads=("env", "human", "teacher", "boost", "distill", "model"),  # model: full acquire fetches it
    training_free=("base", "teacher"),
    data_parallel=True,  # full scale: train() shards each step over `accelerate launch` processes (full.py)
    seed_list_stages=("prepare",),  # they draw or train something for every seed of the list
)
