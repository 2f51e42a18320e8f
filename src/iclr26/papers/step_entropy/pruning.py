"""Stage A of card 07 (Fig. 1): prune the model's own traces and let it answer after them.

For every mask ratio kappa, the method's rule replaces floor(kappa n) steps of each own test trace
by [SKIP]; the compressed thinking is prefilled, closed with `</think>`, and the answer decoded as
the trace was (the official code samples the answer with the trace's settings). Besides accuracy,
two diagnostics of the tiny task say why a rule wins or loses: the share of computed values it
keeps visible (a computation step or its restatement), and the mean score of computation vs
redundant steps; and a check of the model itself (oracle_drop): its accuracy when exactly the
redundant steps are replaced by [SKIP] (every computation step kept), the best any rule can do. It
gates only the absolute "keeps accuracy" claims: every rule faces the same reader.
"""
from __future__ import annotations

import numpy as np

from iclr26.core.lm import generate as generation
from iclr26.core.lm.traces import step_kind

from . import method
from .own_traces import sampling

NEEDED = ("comp", "reflect")   # the step kinds the answer needs


def compress(trace: dict, kappa: float, rule: str, rng) -> tuple[list[str], set[int]]:
    """(the trace's steps with the masked ones replaced by [SKIP], the masked indices)."""
    masked = method.masked_steps(trace["scores"], kappa, rule, rng)
    return method.compress(trace["steps"], masked), masked


def prune_records(model, fmt, traces: list[dict], rule: str, kappas, cfg: dict, seed: int, dataset: str) -> list[dict]:
    """One record per kappa: answer accuracy after the compressed thinking, its drop from kappa 0,
    thinking tokens, and the diagnostics. `cfg` is the config's `method` block."""
    tokenizer = fmt.tokenizer
    by_kind, needed, groups = score_by_kind(traces), needed_steps(traces), value_groups(traces)

    def accuracy(thinking: list[str]) -> float:
        out = generation.generate(model, fmt.prefill_ids_many([t["problem"] for t in traces], thinking),
                                  tokenizer.pad_token_id, tokenizer.eos_token_id, max_new_tokens=fmt.answer_tokens,
                                  seed=seed, **sampling(cfg))
        answers = [fmt.answer_after_prefill(g) for g in out.tokens]
        return float(np.mean([fmt.is_correct(a, t["answer"]) for a, t in zip(answers, traces)]))

    oracle = float("nan")
    if any(needed):   # tiny task: every step but the needed ones replaced by [SKIP]
        oracle = accuracy([fmt.join_steps(only_needed(t, keep)) for t, keep in zip(traces, needed)])
    records, base_acc = [], None
    for kappa in kappas:
        rng = np.random.default_rng([seed, int(round(kappa * 100))])
        compressed = [compress(t, kappa, rule, rng) for t in traces]
        thinking = [fmt.join_steps(steps) for steps, _ in compressed]
        acc = accuracy(thinking)
        base_acc = acc if kappa == 0 else base_acc
        records.append({"seed": seed, "dataset": dataset, "stage": "prune", "kappa": float(kappa),
                        "accuracy": acc, "acc_drop": acc - base_acc if base_acc is not None else float("nan"),
                        "thinking_tokens": float(np.mean([len(ids) for ids in fmt.encode_many(thinking)])),
                        "necessary_kept": necessary_kept(groups, [m for _, m in compressed]),
                        "oracle_drop": oracle - base_acc if base_acc is not None else float("nan"),
                        **by_kind, "n": len(traces),
                        "steps_per_trace": float(np.mean([len(t["steps"]) for t in traces]))})
    return records


def only_needed(trace: dict, needed: list[int]) -> list[str]:
    """The trace with every step but the needed ones replaced by [SKIP] (the oracle compression)."""
    return method.compress(trace["steps"], set(range(len(trace["steps"]))) - set(needed))


def needed_steps(traces: list[dict]) -> list[list[int]]:
    """Tiny task only: the indices of each trace's computation (and reflection) steps, the steps
    the answer needs (none at full scale, where steps are free text)."""
    return [[i for i, step in enumerate(trace["steps"]) if step_kind(step) in NEEDED] for trace in traces]


def value_groups(traces: list[dict]) -> list[list[set[int]]]:
    """Tiny task only: per trace, one group per computed value: its computation step and every
    restatement ("so v") of the same value before the next computation step. Under the paper's
    theory a computation step and its restatement are mutually redundant (audit finding 3): the
    value stays visible while any member of its group is kept."""
    groups = []
    for trace in traces:
        mine, value = [], None
        for i, step in enumerate(trace["steps"]):
            parts = step.split()
            if step_kind(step) in NEEDED:
                mine.append({i})
                value = parts[-1]
            elif mine and len(parts) == 2 and parts[0] == "so" and parts[1] == value:
                mine[-1].add(i)
        groups.append(mine)
    return groups


def necessary_kept(needed: list[list], masks: list[set[int]]) -> float:
    """The share of the needed steps (ints) or value groups (sets of indices: value_groups) that
    survive the masking (a group survives while any member is kept), averaged over the traces that
    have any (nan when none has: full scale)."""
    def kept(item, masked):
        return any(i not in masked for i in item) if isinstance(item, set) else item not in masked

    shares = [np.mean([kept(item, masked) for item in items]) for items, masked in zip(needed, masks) if items]
    return float(np.mean(shares)) if shares else float("nan")


def score_by_kind(traces: list[dict]) -> dict:
    """Tiny task only: mean step score of computation steps and of redundant steps (nan if none)."""
    group = {"comp": "comp", "reflect": "comp", "redundant": "redundant"}
    by_kind = {"comp": [], "redundant": []}
    for trace in traces:
        for step, score in zip(trace["steps"], trace["scores"]):
            if step_kind(step) in group:
                by_kind[group[step_kind(step)]].append(score)
    return {f"score_{k}": float(np.mean(v)) if v else float("nan") for k, v in by_kind.items()}
