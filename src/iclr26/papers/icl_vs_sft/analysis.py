"""Measurements of one learner on one task (card 04, section 6), from the label probabilities and
the query tokens' hidden states, and the per-(seed, k) record built from them.

- accuracy: argmax over the two label tokens against the true label;
- confidence: mean max-probability over the two labels (renormalised over them); over-confidence:
  confidence minus accuracy (a learner trained to zero loss on its shots is confident by
  construction; being more confident than it is right is the claim that can fail: audit finding 3);
- label-axis variance fraction: between-class over total variance of the query states, at every
  layer, after projecting out the label readout direction (the difference of the two labels'
  output embeddings: the last layer feeds the tied unembedding, so its label axis is the output,
  not a representation; audit finding 4), with the true labels (the claim) and the predicted ones;
  1 = every state sits on its class mean, i.e. collapsed onto the label axis. The raw last-layer
  fraction (the card's trial metric) is kept for the table;
- probes: ridge regression (scikit-learn RidgeCV, alpha by leave-one-out on the fitting half) of the
  relevant coordinate (w.x) and the irrelevant one (along the boundary) from each layer's query
  states, fit on one half of the task's queries and scored (R^2) on the other half.
"""
from __future__ import annotations

import numpy as np

from . import data


def label_var_fraction(h: np.ndarray, y: np.ndarray) -> float:
    """Between-class / total variance of states h (n, d) with classes y (n,)."""
    mu = h.mean(axis=0)
    total = float(((h - mu) ** 2).sum())
    if total <= 0:
        return float("nan")
    between = sum(float((y == c).sum()) * float(((h[y == c].mean(axis=0) - mu) ** 2).sum()) for c in np.unique(y))
    return between / total


def without_direction(h: np.ndarray, u: np.ndarray) -> np.ndarray:
    """States h (n, d) with their component along the unit vector u (d,) removed."""
    return h - np.outer(h @ u, u)


def probe_r2(h: np.ndarray, targets: np.ndarray, alphas) -> np.ndarray:
    """Split-half R^2 of ridge probes, one per column of targets (n, t), each with its own alpha:
    fit on the first half of the queries, score the second."""
    from sklearn.linear_model import RidgeCV
    from sklearn.metrics import r2_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    half = len(targets) // 2
    probe = make_pipeline(StandardScaler(), RidgeCV(alphas=alphas, alpha_per_target=True))
    probe.fit(h[:half], targets[:half])
    return r2_score(targets[half:], probe.predict(h[half:]).reshape(len(targets) - half, -1),
                    multioutput="raw_values")


def task_measures(task: dict, probs: np.ndarray, hidden: np.ndarray, readout: np.ndarray, alphas) -> dict:
    """probs (n, 2) over the labels; hidden (layers + 1, n, d) at the query token; readout (d,): the
    unit direction E_A - E_B of the labels' output embeddings (the learner's own weights)."""
    relevant, irrelevant, y = data.coordinates(task)
    pred = probs.argmax(axis=1)
    r2s = [probe_r2(h, np.c_[relevant, irrelevant], alphas) for h in hidden]
    flat = [without_direction(h, readout) for h in hidden]
    acc, confidence = float((pred == y).mean()), float(probs.max(axis=1).mean())
    return {
        "side": task["side"],
        "acc": acc,
        "confidence": confidence,
        "overconfidence": confidence - acc,
        "label_var_raw_last": label_var_fraction(hidden[-1], y),
        "label_var": [label_var_fraction(h, y) for h in flat],
        "label_var_pred": [label_var_fraction(h, pred) for h in flat],
        "r2_relevant": [float(r2[0]) for r2 in r2s],
        "r2_irrelevant": [float(r2[1]) for r2 in r2s],
    }


def record(seed: int, k: int, tasks: list[dict]) -> dict:
    """One record per (seed, k): task means, pro and anti tasks apart for the prior."""
    side = np.array([t["side"] for t in tasks])
    acc = np.array([t["acc"] for t in tasks])
    r2_rel = np.array([t["r2_relevant"] for t in tasks]).mean(axis=0)
    r2_irr = np.array([t["r2_irrelevant"] for t in tasks]).mean(axis=0)
    var = np.nanmean(np.array([t["label_var"] for t in tasks], dtype=float), axis=0)
    var_pred = np.nanmean(np.array([t["label_var_pred"] for t in tasks], dtype=float), axis=0)
    mid = len(r2_rel) // 2   # hidden_states index: 0 = embeddings, len - 1 = last layer
    acc_pro, acc_anti = float(acc[side == "pro"].mean()), float(acc[side == "anti"].mean())
    return {
        "seed": int(seed), "k": int(k),
        "acc": float(acc.mean()), "acc_pro": acc_pro, "acc_anti": acc_anti, "prior_gap": acc_pro - acc_anti,
        "confidence": float(np.mean([t["confidence"] for t in tasks])),
        "overconfidence": float(np.mean([t["overconfidence"] for t in tasks])),
        "label_var_frac": float(np.nanmean([t["label_var_raw_last"] for t in tasks])),
        "label_var_frac_mid": float(var[mid]), "label_var_frac_mid_pred": float(var_pred[mid]),
        "label_var_frac_last_flat": float(var[-1]),
        "r2_irrelevant_last": float(r2_irr[-1]), "r2_relevant_last": float(r2_rel[-1]),
        "r2_irrelevant_mid": float(r2_irr[mid]), "r2_relevant_mid": float(r2_rel[mid]),
        "r2_selectivity_last": float(r2_rel[-1] - r2_irr[-1]), "r2_selectivity_mid": float(r2_rel[mid] - r2_irr[mid]),
        "r2_irrelevant_layers": [float(v) for v in r2_irr], "r2_relevant_layers": [float(v) for v in r2_rel],
        "label_var_frac_layers": [float(v) for v in var],
    }
