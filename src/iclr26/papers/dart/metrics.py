"""Clotho retrieval recall@k: the score evaluate() reports and full.fit() selects epochs by."""
from __future__ import annotations

import numpy as np


def recalls(audio: np.ndarray, text: np.ndarray, ks=(1, 5, 10)) -> dict[str, float]:
    """audio (N, d), text (N, 5, d), unit norm. A->T: rank of the best of the clip's 5 captions
    among all 5N; T->A: rank of the caption's clip among the N clips."""
    n = len(audio)
    flat = text.reshape(n * 5, -1)
    sim = audio @ flat.T                                   # (N, 5N)
    owner = np.repeat(np.arange(n), 5)
    best_true = np.where(owner[None] == np.arange(n)[:, None], sim, -np.inf).max(1)
    rank_a2t = (sim > best_true[:, None]).sum(1)
    sim_t = flat @ audio.T                                 # (5N, N)
    rank_t2a = (sim_t > sim_t[np.arange(5 * n), owner][:, None]).sum(1)
    out = {}
    for k in ks:
        out[f"r{k}_a2t"] = float((rank_a2t < k).mean() * 100)
        out[f"r{k}_t2a"] = float((rank_t2a < k).mean() * 100)
    out["r1_mean"] = (out["r1_a2t"] + out["r1_t2a"]) / 2
    return out
