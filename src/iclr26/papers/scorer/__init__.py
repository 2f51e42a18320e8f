"""SCORER: Stackelberg Coupling of Online Representation Learning and Reinforcement Learning.

Martinez, Li, Lu, Chen (ICLR 2026), arXiv 2508.07452. The Q-network is split into a perception
network (the follower, z = f_phi(s)) and a control network (the leader, Q_theta(z, a)). The leader
minimises the mean squared Bellman error; the follower minimises the *variance* of the TD errors
with the leader frozen, on a faster timescale (larger learning rate). Compared here with monolithic
DQN, DQN with per-layer learning rates at SCORER's ratio, and SCORER with an MSBE follower.

Tiny scale: CartPole-v1, CartPole with 28 i.i.d. N(0,1) distractor dimensions, Acrobot-v1
(gymnasium). Full scale maps the three dataset slots onto MinAtar games (see config).
"""
from iclr26.core.paper import Paper

PAPER = Paper(
    slug="scorer",
    title="Stackelberg Coupling of Online Representation Learning and Reinforcement Learning",
    arxiv="2508.07452",
    code="https://github.com/fernando-ml/SCORER",
    methods=("dqn", "dqn_per_layer_lr", "scorer_msbe", "scorer"),
    datasets=("cartpole", "cartpole_distractor", "acrobot"),
    metrics=("final_return", "auc"),
    stage_module="iclr26.papers.scorer.experiment",
)
