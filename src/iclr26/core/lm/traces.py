"""Seeded synthetic reasoning traces: modular chain arithmetic, in the real datasets' row schema.

A problem is a start value and `n_ops` operations `+d` / `-d` modulo `modulus`; the answer is the
final value. The teacher's trace (the thinking text) is a list of steps joined by the step
separator, each step one of:
    comp     "+ 4 = 7"        a computation step: the answer needs it
    restate  "so 7"           redundant: repeats the value just computed (restate: value), or the
                              problem's start value (restate: start: a question copy, so that no
                              redundant step carries a computed value)
    repeat   "that + 4"       redundant: repeats the operation just applied (a question copy)
    filler   "ok check"       redundant: a filler phrase drawn from `filler_vocab_size` words
    fix      "wait + 4 = 7"   reflection after a wrong comp step that corrects it (useful)
    check    "wait + 4 = 7"   reflection after a right comp step that re-derives it (redundant)
Knobs (the `data.<dataset>` config): modulus, max_operand, n_ops [lo, hi] (difficulty), redundancy (share of
redundant steps among the comp+redundant steps), filler_vocab_size (1 = deterministic filler),
error_rate and fix_rate (a comp step is wrong with error_rate; a fix follows with fix_rate, and an
unfixed error carries on to a wrong trace answer), check_rate_easy / check_rate_hard with
easy_max_ops (redundant re-checks of right steps, mostly on easy problems: overthinking),
restate (value | start, default value: what a restatement step repeats), alternate_rate and
alternate_max (default 0: none): a re-check of the final step is, with alternate_rate, a path switch
of 1..alternate_max pairs "wait + 4 = 2" (a wrong candidate, kind `switch`) then "wait + 4 = 7" (back
to the value, kind `check`): the card 03 alternating re-checks, whose step confidences swing.
"""
from __future__ import annotations

import numpy as np

from .tokenizer import SEP

FILLERS = ("ok", "fine", "sure", "right", "yes", "good", "hmm", "well")
WORDS = ("+", "-", "=", "so", "that", "wait", "check", "ans", *FILLERS)
REDUNDANT_CYCLE = ("restate", "repeat", "filler")
REFLECTION = "wait"


def vocabulary(modulus: int) -> list[str]:
    return [str(v) for v in range(modulus)] + list(WORDS)


def _apply(value: int, op: str, d: int, modulus: int) -> int:
    return (value + d) % modulus if op == "+" else (value - d) % modulus


def redundant_per_step(redundancy: float) -> int:
    """Redundant steps after each comp step so that their share of steps is `redundancy`."""
    return int(round(redundancy / (1.0 - redundancy))) if redundancy < 1 else 0


def make_row(rng: np.random.Generator, spec: dict) -> dict:
    """One problem with its teacher trace; keys: problem, answer, trace, trace_answer, kinds, n_ops."""
    m = int(spec["modulus"])
    lo, hi = spec["n_ops"]
    n_ops = int(rng.integers(lo, hi + 1))
    start = int(rng.integers(0, m))
    top = int(spec.get("max_operand", m - 1))
    ops = [(str(rng.choice(["+", "-"])), int(rng.integers(1, top + 1))) for _ in range(n_ops)]
    n_red = redundant_per_step(float(spec.get("redundancy", 0.0)))
    fillers = FILLERS[: int(spec.get("filler_vocab_size", 1))]
    easy = n_ops <= int(spec.get("easy_max_ops", 0))
    check_rate = float(spec.get("check_rate_easy" if easy else "check_rate_hard", 0.0))
    alternate_rate, alternate_max = float(spec.get("alternate_rate", 0.0)), int(spec.get("alternate_max", 1))
    restate = spec.get("restate", "value")
    if restate not in ("value", "start"):
        raise ValueError(f"restate must be value or start, got {restate!r}")
    truth, value = start, start
    steps, kinds = [], []
    for step_no, (op, d) in enumerate(ops):
        truth = _apply(truth, op, d, m)
        right = _apply(value, op, d, m)
        wrong = rng.random() < float(spec.get("error_rate", 0.0))
        value = (right + int(rng.integers(1, m))) % m if wrong else right
        steps.append(f"{op} {d} = {value}"), kinds.append("comp")
        if wrong and rng.random() < float(spec.get("fix_rate", 0.0)):
            value = right
            steps.append(f"{REFLECTION} {op} {d} = {value}"), kinds.append("fix")
        elif not wrong and rng.random() < check_rate:
            # path switching, after the final step only (card 03); no draw when off
            if alternate_rate > 0 and step_no == n_ops - 1 and rng.random() < alternate_rate:
                for _ in range(int(rng.integers(1, alternate_max + 1))):
                    steps.append(f"{REFLECTION} {op} {d} = {(value + int(rng.integers(1, m))) % m}")
                    kinds.append("switch")
                    steps.append(f"{REFLECTION} {op} {d} = {value}"), kinds.append("check")
            else:
                steps.append(f"{REFLECTION} {op} {d} = {value}"), kinds.append("check")
        for j in range(n_red):
            kind = REDUNDANT_CYCLE[j % len(REDUNDANT_CYCLE)]
            text = {"restate": f"so {value if restate == 'value' else start}", "repeat": f"that {op} {d}",
                    "filler": f"{fillers[int(rng.integers(0, len(fillers)))]} check"}[kind]
            steps.append(text), kinds.append(kind)
    problem = " ".join([str(start)] + [f"{op} {d}" for op, d in ops])
    return {"problem": problem, "answer": str(truth), "trace": f" {SEP} ".join(steps),
            "trace_answer": str(value), "kinds": kinds, "n_ops": n_ops}


def generate(spec: dict, n: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [make_row(rng, spec) for _ in range(n)]


# ----------------------------------------------------------------------------- files and steps
def write_splits(spec: dict, out_dir, splits: dict[str, int]) -> dict:
    """Generate each split (name -> rows) from `spec["data_seed"]`, one seed per split, as jsonl."""
    from pathlib import Path

    from iclr26.core.io import write_jsonl

    seed = int(spec["data_seed"])
    for offset, (split, n) in enumerate(splits.items()):
        write_jsonl(Path(out_dir) / f"{split}.jsonl", generate(spec, int(n), seed * 1000 + offset))
    return {"source": "chains", **{f"n_{k}": int(v) for k, v in splits.items()}}


def split_steps(trace: str) -> list[str]:
    return [s.strip() for s in trace.split(SEP) if s.strip()]


def join_steps(steps: list[str]) -> str:
    return f" {SEP} ".join(steps)


def step_kind(step: str) -> str:
    """What a written step is, by its form: comp ("+ 4 = 7"), reflect ("wait + 4 = 7": a fix or a
    check), redundant (a restatement, a repeated operation or filler), or other (malformed, [SKIP])."""
    parts = step.split()
    if parts[:1] == [REFLECTION]:
        return "reflect" if _is_comp(parts[1:]) else "other"
    if _is_comp(parts):
        return "comp"
    if (len(parts) == 2 and parts[0] == "so" and parts[1].isdigit()) or \
            (len(parts) == 3 and parts[0] == "that" and parts[1] in ("+", "-")) or \
            (len(parts) == 2 and parts[0] in FILLERS and parts[1] == "check"):
        return "redundant"
    return "other"


def _is_comp(parts: list[str]) -> bool:
    return len(parts) == 4 and parts[0] in ("+", "-") and parts[2] == "=" and (parts[1] + parts[3]).isdigit()


def audit_thinking(problem: str, thinking: str, modulus: int) -> dict:
    """Replay a (generated) thinking text against the problem. A comp step is an error when its value
    differs from its operation applied to the running value; a reflection step re-derives the last
    comp step from the value before it: a fix when it corrects the running value, a check when it
    repeats it. The running value follows the trace as written."""
    value = before = int(problem.split()[0])
    errors = fixes = checks = 0
    for step in split_steps(thinking):
        parts = step.split()
        reflect = parts[:1] == [REFLECTION]
        parts = parts[1:] if reflect else parts
        if not _is_comp(parts):
            continue
        written = int(parts[3]) % modulus
        if reflect:
            right = _apply(before, parts[0], int(parts[1]), modulus)
            fixes += int(written != value and written == right)
            checks += int(written == value)
        else:
            before = value
            errors += int(written != _apply(before, parts[0], int(parts[1]), modulus))
        value = written
    return {"errors": errors, "fixes": fixes, "checks": checks, "final": value}
