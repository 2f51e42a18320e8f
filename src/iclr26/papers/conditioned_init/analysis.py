"""From one trained run's saved outputs to its record: numpy only (evaluate never imports torch).

A run (training.py) saves its per-step train losses, its test-set logits and kappa(J) at init.
Its record carries kappa, the loss AUC (mean train loss over the steps), the steps until the
running-mean train loss falls below a target, the test accuracy and a coarse loss curve (figures).
"""
from __future__ import annotations

import numpy as np


def run_file(key: str) -> str:
    """The file (in the job's folder) holding one run's losses, test logits and kappa."""
    return f"run_{key}.npz"


def steps_to_target(losses: np.ndarray, target: float, window: int) -> int:
    """First step (1-based) whose trailing running mean of `window` train losses is below `target`.

    Never reached: len(losses) + 1, a censored value (the record's reached_target says which).
    """
    cumulative = np.concatenate([[0.0], np.cumsum(losses)])
    steps = np.arange(1, len(losses) + 1)
    lo = np.maximum(steps - window, 0)
    running = (cumulative[steps] - cumulative[lo]) / (steps - lo)
    below = np.flatnonzero(running < target)
    return int(below[0]) + 1 if below.size else len(losses) + 1


def coarse_curve(losses: np.ndarray, points: int) -> tuple[list[float], list[float]]:
    """Mean train loss in `points` consecutive bins of steps, and each bin's mean step (1-based)."""
    bins = np.array_split(np.arange(len(losses)), min(points, len(losses)))
    return ([round(float(losses[b].mean()), 5) for b in bins], [float(b.mean() + 1) for b in bins])


def run_record(run: dict[str, np.ndarray], y_test: np.ndarray, eval_cfg: dict) -> dict:
    """The metrics of one run from its saved arrays (losses, test_logits, kappa, qkv_head_kappa).

    reached_target is 1.0 or 0.0 (a number, so that a claim can average it over seeds)."""
    losses, kappa = run["losses"], float(run["kappa"])
    reached = steps_to_target(losses, eval_cfg["target_loss"], eval_cfg["target_window"])
    curve, curve_steps = coarse_curve(losses, eval_cfg["curve_points"])
    return {
        "kappa_J_init": kappa, "log10_kappa_J_init": float(np.log10(kappa)),
        "loss_auc": float(losses.mean()),
        "steps_to_target": reached, "reached_target": float(reached <= len(losses)),
        "qkv_head_kappa_init": float(run["qkv_head_kappa"]) if "qkv_head_kappa" in run else float("nan"),
        "test_acc": float((run["test_logits"].argmax(axis=1) == y_test).mean()),
        "final_train_loss": float(losses[-10:].mean()),
        "loss_curve": curve, "loss_curve_step": curve_steps,
    }
