"""Which passages each row of the table gives the reader (card 17, sections 2.3 and 3).

Every selector takes one query's question-passage similarities (document order) and returns the
passage indices to read, in the order the reader sees them: the official code gives retrieved
chunks in descending similarity, and long context in document order.
"""
from __future__ import annotations

import re

import numpy as np

from .policy import band_positions

RATIO = re.compile(r"^ratio_(\d+)$")


def ratio_of(method: str) -> float | None:
    """ratio_005 -> 0.05, ratio_02 -> 0.2 (the digits after a leading 0 are the decimals)."""
    m = RATIO.match(method)
    return float("0." + m.group(1)[1:]) if m else None


def descending(sims: np.ndarray) -> np.ndarray:
    return np.argsort(-sims, kind="stable")


def long_context(sims: np.ndarray) -> np.ndarray:
    return np.arange(len(sims))


def top_k(sims: np.ndarray, k: int) -> np.ndarray:
    return descending(sims)[: max(1, min(k, len(sims)))]


def fixed_ratio(sims: np.ndarray, ratio: float) -> np.ndarray:
    """The Figure-1 curve: the most similar passages, a fixed fraction of the document."""
    return top_k(sims, int(round(ratio * len(sims))))


def adaptive_k(sims: np.ndarray, max_fraction: float = 1.0) -> np.ndarray:
    """Adaptive-k (Taguchi et al. 2025, arXiv 2506.08479; ours, an extra row): cut the descending
    similarities at their largest gap, within the first max_fraction of the passages."""
    s = np.sort(sims)[::-1]
    limit = max(2, int(round(max_fraction * len(s))))
    gaps = s[: limit - 1] - s[1:limit]
    return top_k(sims, int(np.argmax(gaps)) + 1)


def ldar_band(sims: np.ndarray, q_low: float, q_delta: float) -> np.ndarray:
    """The policy's quantile band of the ascending-sorted similarities, read in descending order."""
    ascending = np.argsort(sims, kind="stable")
    return ascending[band_positions(len(sims), q_low, q_delta)][::-1]
