"""SCORER: Stackelberg Coupling of Online Representation Learning and Reinforcement Learning.

Martinez, Li, Lu, Chen (ICLR 2026), arXiv 2508.07452. The Q-network is split into a perception
network (the follower, z = f_phi(s)) and a control network (the leader, Q_theta(z, a)). The leader
minimises the mean squared Bellman error; the follower minimises the *variance* of the TD errors
with the leader frozen, on a faster timescale (larger learning rate). Compared here with monolithic
DQN, DQN with per-layer learning rates at SCORER's ratio, and SCORER with an MSBE follower.

Three environment slots, named by their role at every scale (each has a per-scale `label`):
    headline  first environment (every claim)            tiny: CartPole-v1         full: MinAtar Breakout
    second    second environment (every claim)           tiny: CartPole + 28 N(0,1) distractor dims
                                                                                   full: MinAtar SpaceInvaders
    third     third environment (AUC claims only)        tiny: Acrobot-v1          full: MinAtar Asterix
Modules: envs (gymnasium envs and their check), networks, replay, agents (the four methods),
training (the loop and its metrics), plots, stages (the pipeline's stage functions).
"""
from iclr26.core.paper import Paper

PAPER = Paper(
    slug="scorer",
    title="Stackelberg Coupling of Online Representation Learning and Reinforcement Learning",
    arxiv="2508.07452",
    code="https://github.com/fernando-ml/SCORER",
    methods=("dqn", "dqn_per_layer_lr", "scorer_msbe", "scorer"),
    datasets=("headline", "second", "third"),
    metrics=("final_return", "auc"),
    figures=("learning_curves.png",),
    stage_module="iclr26.papers.scorer.stages",
    gpu_stages=("train",),  # evaluate reads the online returns train recorded
    data_reads=("check",),  # prepare: how long to step the training env beside gymnasium's
)
