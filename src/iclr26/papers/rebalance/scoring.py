"""The evaluation record of one arm and seed: accuracy, thinking length, reflections, and on the tiny
task the accuracy on hard problems and on traces that made an arithmetic error. numpy only."""
from __future__ import annotations

import re

import numpy as np

from iclr26.core.lm.traces import audit_thinking, step_kind


def score(cfg: dict, dataset: str, fmt, rows: list[dict], tokens: list[list[int]]) -> dict:
    """The record of the sampled traces `tokens` (one per row of the test set)."""
    keywords = [k.lower() for k in cfg["method"]["keywords"]]
    parsed = [fmt.parse(t) for t in tokens]
    correct = np.array([fmt.is_correct(p["answer"], r["answer"]) for p, r in zip(parsed, rows)])
    length = np.array([p["thinking_tokens"] for p in parsed], dtype=float)
    kept = np.array(boundary_behaviour(cfg, dataset, fmt, parsed, each=True)["format_ok"], dtype=bool)
    record = {
        "accuracy": float(correct.mean()), "thinking_tokens": float(length.mean()),
        "len_correct": float(length[correct].mean()) if correct.any() else float("nan"),
        "len_incorrect": float(length[~correct].mean()) if (~correct).any() else float("nan"),
        "reflections": float(np.mean([sum(p["thinking"].lower().count(k) for k in keywords) for p in parsed])),
        "format_ok": float(kept.mean()),
        # accuracy on the traces that kept the format (audit 03, M2): how much of an arm's accuracy loss
        # is the trace derailing (e.g. keyword suppression's one banned cue token) rather than wrong sums
        "acc_format_ok": float(correct[kept].mean()) if kept.any() else float("nan"),
        "n": len(rows),
        # per problem, in the test set's order: what the seed x problem cluster bootstrap resamples
        "accuracy_items": correct.astype(int).tolist(), "thinking_tokens_items": length.tolist()}
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


def boundary_behaviour(cfg: dict, dataset: str, fmt, parsed: list[dict], each: bool = False) -> dict:
    """What the model does at its step boundaries, for the steering precondition:
    format_ok     share of traces that close the thinking span with an answer and (tiny task) write
                  only well-formed steps (core.lm.traces.step_kind is not "other")
    reflect_rate  share of the steps after a boundary that are reflections (a cue word) or break the
                  format (a malformed step; a trace with no answer counts as one more such step):
                  steering that lowers reflection by derailing the trace does not lower it
    each=True: format_ok is the per-trace list instead of its mean"""
    cue = re.compile(r"\b(?:" + "|".join(re.escape(w.lower()) for w in cfg["method"]["cue_words"]) + r")\b")
    tiny = cfg["data"][dataset]["source"] == "chains"
    ok, bad, total = [], 0, 0
    for p in parsed:
        steps = fmt.split_steps(p["thinking"])
        malformed = [tiny and step_kind(step) == "other" for step in steps]
        answered = p["answer"] != ""
        ok.append(answered and not any(malformed))
        bad += sum(bool(cue.search(step.lower())) or broken for step, broken in zip(steps[1:], malformed[1:]))
        bad += int(not answered)
        total += max(len(steps) - 1, 0) + int(not answered)
    if each:
        return {"format_ok": ok, "reflect_rate": bad / total if total else float("nan")}
    return {"format_ok": float(np.mean(ok)) if ok else float("nan"),
            "reflect_rate": bad / total if total else float("nan")}
