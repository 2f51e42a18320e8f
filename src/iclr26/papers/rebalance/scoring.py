"""The evaluation record of one arm and seed: accuracy, thinking length, reflections, and on the tiny
task the accuracy on hard problems and on traces that made an arithmetic error. numpy only."""
from __future__ import annotations

import numpy as np

from iclr26.core.lm.traces import audit_thinking


def score(cfg: dict, dataset: str, fmt, rows: list[dict], tokens: list[list[int]]) -> dict:
    """The record of the sampled traces `tokens` (one per row of the test set)."""
    keywords = [k.lower() for k in cfg["method"]["keywords"]]
    parsed = [fmt.parse(t) for t in tokens]
    correct = np.array([fmt.is_correct(p["answer"], r["answer"]) for p, r in zip(parsed, rows)])
    length = np.array([p["thinking_tokens"] for p in parsed], dtype=float)
    record = {
        "accuracy": float(correct.mean()), "thinking_tokens": float(length.mean()),
        "len_correct": float(length[correct].mean()) if correct.any() else float("nan"),
        "len_incorrect": float(length[~correct].mean()) if (~correct).any() else float("nan"),
        "reflections": float(np.mean([sum(p["thinking"].lower().count(k) for k in keywords) for p in parsed])),
        "n": len(rows)}
    if cfg["data"][dataset]["source"] == "chains":
        record.update(audit(cfg, dataset, rows, parsed, correct))
    return record


def audit(cfg: dict, dataset: str, rows: list[dict], parsed: list[dict], correct: np.ndarray) -> dict:
    """Tiny task only: accuracy on hard problems and on traces that made an arithmetic error
    (replayed step by step against the problem, core.lm.traces.audit_thinking)."""
    modulus = int(cfg["data"][dataset]["modulus"])
    erred = np.array([audit_thinking(r["problem"], p["thinking"], modulus)["errors"] > 0 for p, r in zip(parsed, rows)])
    is_hard = np.array([r["n_ops"] >= int(cfg["eval"]["hard_min_ops"]) for r in rows])
    return {"acc_hard": float(correct[is_hard].mean()) if is_hard.any() else float("nan"),
            "errors_fixed": float(correct[erred].mean()) if erred.any() else float("nan"),
            "traces_with_error": float(erred.mean())}
