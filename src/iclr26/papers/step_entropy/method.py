"""Step entropy and the [SKIP] compression rule (card 07, sections 2.1-2.3). numpy only.

A step's score, from per-token statistics of the model that wrote the trace:
    sum_entropy           H(S_i | S_<i) = sum_j H(t_ij | c_ij)   (the paper's step entropy)
    mean_entropy          the same, averaged over the step's tokens
    mean_sampled_neglogp  mean over tokens of -p log p of the sampled token (what the official
                          code computes from vLLM's sampled-token log-probs)
The rule replaces floor(kappa * n) steps by [SKIP], kept in place: the lowest-scoring steps
(`low_entropy`, the method), the highest (`high_entropy`) or a random set (`random`).
"""
from __future__ import annotations

import math

import numpy as np

from iclr26.core.lm.tokenizer import SKIP

RULES = ("low_entropy", "random", "high_entropy")


def step_score(entropy: list[float], logprob: list[float], kind: str) -> float:
    entropy, logprob = np.asarray(entropy, float), np.asarray(logprob, float)
    if kind == "sum_entropy":
        return float(entropy.sum())
    if kind == "mean_entropy":
        return float(entropy.mean())
    if kind == "mean_sampled_neglogp":
        p = np.exp(logprob)
        return float((-p * logprob).mean())
    raise ValueError(f"step_score must be sum_entropy, mean_entropy or mean_sampled_neglogp, got {kind!r}")


def masked_steps(scores: list[float], kappa: float, rule: str, rng: np.random.Generator) -> set[int]:
    """Indices of the floor(kappa * n) steps the rule replaces by [SKIP]; ties broken by position."""
    n = len(scores)
    k = int(math.floor(kappa * n + 1e-9))
    if k == 0:
        return set()
    order = np.argsort(np.asarray(scores, float), kind="stable")
    if rule == "low_entropy":
        return set(order[:k].tolist())
    if rule == "high_entropy":
        return set(order[::-1][:k].tolist())
    if rule == "random":
        return set(rng.choice(n, size=k, replace=False).tolist())
    raise ValueError(f"rule must be one of {RULES}, got {rule!r}")


def compress(steps: list[str], masked: set[int], skip: str = SKIP) -> list[str]:
    return [skip if i in masked else step for i, step in enumerate(steps)]


def skip_ratio(steps: list[str], skip: str) -> float:
    """Share of [SKIP] steps among the thinking steps (the official reward counts [SKIP] against
    blank lines + [SKIP]; with the separator kept around [SKIP] this is the same share)."""
    return sum(s == skip for s in steps) / len(steps) if steps else 0.0


def grpo_reward(correct: bool, ratio: float, n_skip: int, length: int, cfg: dict) -> float:
    """The official GRPO reward (stage2 grpo_train.py), summed as TRL sums reward functions:
    +2 if correct; +1 if skip ratio >= 0.8, +0.5 if >= 0.5; -2 past a [SKIP] flood; -1 past a length cap.
    Not trained at tiny scale (see the config's note); kept so the terms are tested and ready."""
    reward = cfg["correct"] if correct else 0.0
    reward += cfg["ratio_high"] if ratio >= 0.8 else cfg["ratio_mid"] if ratio >= 0.5 else 0.0
    reward -= cfg["flood_penalty"] if n_skip > cfg["max_skips"] else 0.0
    reward -= cfg["length_penalty"] if length > cfg["max_length"] else 0.0
    return float(reward)
