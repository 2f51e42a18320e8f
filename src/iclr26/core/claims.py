"""Claims as data, verdicts as computation.

A paper's config lists its headline claims (see papers/README.md). Each is checked on the
records of every seed: the effect (method - baseline, or the method's estimate against a number)
gets a 95% interval, and the verdict follows from where that interval lies:
    holds           the whole interval is on the claimed side
    not reproduced  the whole interval is on the other side
    inconclusive    the interval straddles the line
and two outcomes that are not a test of the claim:
    untestable here the claim's precondition (a check evaluated first, same shape as a claim) does
                    not hold, or there are fewer seeds than the test is valid at (stats.MIN_N); the
                    reason is measured and printed
A claim of `kind: check` (a consistency check that holds by construction) is computed and shown
with its number, but is not counted among the verdict totals. A precondition or a check may use the
gate `every_seed` (holds when every seed is on the claimed side; its interval is the seeds' range, so
it never decides a claim's verdict).
"""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from .errors import ConfigError
from .io import atomic_write, read_json
from .stats import GATES, MIN_N, VALUE_REFUSED, Estimate, effect, one_sample

HOLDS, NOT_REPRODUCED, INCONCLUSIVE, UNTESTABLE = "holds", "not reproduced", "inconclusive", "untestable here"
TESTS = tuple(MIN_N)
KINDS = ("claim", "check")
REQUIRED = ("id", "claim", "metric", "method", "direction", "test")
PRECONDITION_REQUIRED = ("metric", "method", "direction", "test")


def select(records: pd.DataFrame, method: str, where: dict | None) -> pd.DataFrame:
    rows = records[records["method"] == method]
    for key, value in (where or {}).items():
        if key not in rows.columns:
            raise ConfigError(f"filter key {key!r} is not in the records (keys: {', '.join(records.columns)})")
        rows = rows[rows[key] == value]
    return rows.sort_values("seed") if "seed" in rows.columns else rows


def verdict(est: Estimate, direction: str, reference: float, tolerance: float | None = None) -> str:
    lo, hi = est.lo, est.hi
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return INCONCLUSIVE
    if direction == "higher":
        return HOLDS if lo > reference else NOT_REPRODUCED if hi < reference else INCONCLUSIVE
    if direction == "lower":
        return HOLDS if hi < reference else NOT_REPRODUCED if lo > reference else INCONCLUSIVE
    if direction == "within":
        if tolerance is None:
            raise ConfigError("a claim with direction 'within' needs a tolerance")
        band = (reference - tolerance, reference + tolerance)
        if band[0] <= lo and hi <= band[1]:
            return HOLDS
        return NOT_REPRODUCED if hi < band[0] or lo > band[1] else INCONCLUSIVE
    raise ConfigError(f"claim direction {direction!r} is not one of higher, lower, within")


def _column(rows: pd.DataFrame, name: str):
    return rows[name].to_numpy() if name in rows.columns else None


def _validate(spec: dict, name: str, required=REQUIRED) -> None:
    missing = [key for key in required if key not in spec]
    if missing:
        raise ConfigError(f"{name} lacks key '{missing[0]}'")
    if ("baseline" in spec) == ("value" in spec):
        raise ConfigError(f"{name} needs exactly one of 'baseline' or 'value'")
    if spec["test"] not in TESTS:
        raise ConfigError(f"{name}: test {spec['test']!r} is not one of {', '.join(TESTS)}")
    if spec["test"] in VALUE_REFUSED and "value" in spec:
        raise ConfigError(f"{name}: test {spec['test']!r} {VALUE_REFUSED[spec['test']]}")
    if spec["test"] == "t" and "baseline" in spec:
        raise ConfigError(f"{name}: test 't' is for a claim against a value; against a baseline use paired_t "
                          f"or welch_t")


def _evaluate(spec: dict, records: pd.DataFrame, name: str) -> tuple[Estimate, str, str]:
    """The estimate, what was compared, and the verdict of one claim-shaped spec."""
    metric, test = spec["metric"], spec["test"]
    if metric not in records.columns:
        raise ConfigError(f"{name}: metric {metric!r} is not in the records")
    rows = select(records, spec["method"], spec.get("where"))
    if "baseline" in spec:
        base = select(records, spec["baseline"], spec.get("where"))
        if test in ("paired_t", "cluster_bootstrap", "every_seed"):
            shared = sorted(set(rows["seed"]) & set(base["seed"]))
            rows, base = rows[rows["seed"].isin(shared)], base[base["seed"].isin(shared)]
        items = {}
        if test == "cluster_bootstrap":   # per-problem outcomes: the records' `<metric>_items` lists
            if f"{metric}_items" not in records.columns:
                raise ConfigError(f"{name}: cluster_bootstrap needs per-problem lists {metric}_items in the records")
            items = {"method_items": [list(v) for v in rows[f"{metric}_items"]],
                     "base_items": [list(v) for v in base[f"{metric}_items"]]}
        est = effect(rows[metric].to_numpy(), base[metric].to_numpy(), test,
                     _column(rows, f"{metric}_lo"), _column(rows, f"{metric}_hi"),
                     _column(base, f"{metric}_lo"), _column(base, f"{metric}_hi"), **items)
        reference, against = 0.0, f"{spec['method']} - {spec['baseline']}"
    else:
        est = one_sample(rows[metric].to_numpy(), test, _column(rows, f"{metric}_lo"), _column(rows, f"{metric}_hi"))
        reference, against = float(spec["value"]), f"{spec['method']} vs {spec['value']}"
    return est, against, verdict(est, spec["direction"], reference, spec.get("tolerance"))


def _too_few(est: Estimate, test: str) -> str | None:
    if est.n < MIN_N[test]:
        return f"{est.n} seeds; {test} is valid from {MIN_N[test]}"
    return None


def _failing_seeds(spec: dict, records: pd.DataFrame, name: str) -> str:
    """'seed 0 (-0.09), seed 3 (no value)': the seeds of an every_seed gate not on the claimed side."""
    metric, line = spec["metric"], float(spec.get("value", 0.0))
    rows = select(records, spec["method"], spec.get("where")).set_index("seed")[metric]
    if "baseline" in spec:
        base = select(records, spec["baseline"], spec.get("where")).set_index("seed")[metric]
        rows = rows.sub(base)
    passes = (lambda v: v > line) if spec["direction"] == "higher" else (lambda v: v < line)
    bad = [f"seed {seed} ({_fmt(v) if math.isfinite(v) else 'no value'})"
           for seed, v in rows.astype(float).items() if not (math.isfinite(v) and passes(v))]
    return ", ".join(bad) + f" (the line: {_fmt(line)})" if bad else "no seed"


def check_claim(spec: dict, records: pd.DataFrame) -> dict:
    name = f"claim {spec.get('id', '?')!r}"
    _validate(spec, name)
    kind = spec.get("kind", "claim")
    if kind not in KINDS:
        raise ConfigError(f"{name}: kind {kind!r} is not one of {', '.join(KINDS)}")
    if kind == "claim" and spec["test"] in GATES:
        raise ConfigError(f"{name}: test {spec['test']!r} is a gate, not inference: use it in a precondition "
                          f"or a claim of kind 'check'")
    out = {k: v for k, v in spec.items()}
    reason = None
    pre = spec.get("precondition")
    if pre is not None:
        pname = f"{name} precondition"
        if not isinstance(pre, dict):
            raise ConfigError(f"{pname} must be a mapping shaped like a claim")
        _validate(pre, pname, PRECONDITION_REQUIRED)
        p_est, p_against, p_verdict = _evaluate(pre, records, pname)
        p_reason = _too_few(p_est, pre["test"])
        out["precondition"] = {**pre, "estimate": p_est.as_dict(), "compared": p_against,
                               "verdict": UNTESTABLE if p_reason else p_verdict}
        if p_reason or p_verdict != HOLDS:
            what = pre.get("claim") or f"{pre['metric']} {pre['direction']}"
            if pre["test"] in GATES and not p_reason:   # a gate: name the seeds that fail it
                measured = f"{p_against} fails on {_failing_seeds(pre, records, pname)}"
                reason = f"precondition not met ({what}): {measured}"
            else:
                measured = f"{p_against} = {_fmt(p_est.value)} [{_fmt(p_est.lo)}, {_fmt(p_est.hi)}]"
                reason = f"precondition not met ({what}): {measured}, {p_reason or p_verdict}"
    est, against, result = _evaluate(spec, records, name)
    reason = reason or _too_few(est, spec["test"])
    out.update({"kind": kind, "estimate": est.as_dict(), "compared": against,
                "verdict": UNTESTABLE if reason else result})
    if reason:
        out["reason"] = reason
    return out


def check_claims(specs: list[dict], records: pd.DataFrame) -> list[dict]:
    return [check_claim(spec, records) for spec in specs]


# ----------------------------------------------------------------------------- summary across papers
def _fmt(x: float) -> str:
    if x is None or not math.isfinite(x):
        return "n/a"
    return f"{x:.3g}"


def outcome_text(c: dict) -> str:
    """The verdict cell: the verdict in bold, with the measured reason when it is untestable here, and
    the claim's `note` (e.g. how stable the setting was across a larger pool of seeds) when it has one."""
    text = f"**{c['verdict']}**" + (f": {c['reason']}" if c.get("reason") else "")
    return f"{text} ({c['note'].rstrip('.')})" if c.get("note") else text


def claims_markdown(payloads: list[dict]) -> str:
    lines = [
        "# Claims: every headline claim, checked on our runs",
        "",
        "Verdicts are computed by `tabulate` from the seeds' records: **holds** when the 95% interval of",
        "the effect lies on the claimed side, **not reproduced** when it lies on the other side,",
        "**inconclusive** when it straddles the line, **untestable here** when the claim's precondition",
        "fails or there are too few seeds for its test (the measured reason is given). Checks (consistency",
        "checks that hold by construction, and our probes beyond the paper's claims) are listed with their",
        "numbers but not counted.",
        "The scale says how far our setting is from the paper's.",
        "",
    ]
    counts: dict[str, int] = {}
    head = ["| paper | scale | claim | paper reports | ours: effect [95% CI] | test (n) | verdict |",
            "|---|---|---|---|---|---|---|"]
    rows, checks = list(head), list(head)
    cell = lambda s: str(s).replace("|", "\\|").replace("\n", " ")  # noqa: E731
    stale = [p for p in payloads if p.get("stale")]
    for payload in payloads:
        paper = payload["paper"] + (" (not rerun)" if payload.get("stale") else "")
        for c in payload["claims"]:
            est = c["estimate"]
            is_check = c.get("kind", "claim") == "check"
            if not is_check:
                counts[c["verdict"]] = counts.get(c["verdict"], 0) + 1
            ours = f"{c['compared']}: {_fmt(est['value'])} [{_fmt(est['lo'])}, {_fmt(est['hi'])}]"
            (checks if is_check else rows).append(
                f"| {paper} | {payload['scale']} | {cell(c['claim'])} | {cell(c.get('paper', ''))} | "
                f"{cell(ours)} | {c['test']} ({est['n']}) | {cell(outcome_text(c))} |"
            )
    total = ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))
    lines += [f"Totals: {total or 'no claims'}.", ""]
    if stale:
        lines += ["Papers marked *(not rerun)* were not part of the run that wrote this page: their results are "
                  "older files found in results/:", "", *(f"- {p['paper']}: {stale_note(p)}" for p in stale), ""]
    lines += [*rows, ""]
    if len(checks) > len(head):
        lines += ["## Checks and probes (not the paper's claims; not counted in the totals)", "", *checks, ""]
    return "\n".join(lines)


VERDICT_SCORE = {HOLDS: 1, INCONCLUSIVE: 0, UNTESTABLE: 0, NOT_REPRODUCED: -1}


def claims_metrics(payloads: list[dict]) -> dict:
    """Every claim's effect, interval and verdict (holds 1, inconclusive or untestable 0, not reproduced -1) as
    numbers per paper and claim: what `dvc metrics diff` compares between two commits."""
    return {p["paper"]: {c["id"]: {"effect": c["estimate"]["value"], "lo": c["estimate"]["lo"],
                                   "hi": c["estimate"]["hi"], "n": c["estimate"]["n"],
                                   "verdict": VERDICT_SCORE.get(c["verdict"], 0)}
                         for c in p["claims"]}
            for p in payloads}


def claims_table(payloads: list[dict]) -> str:
    """One CSV row per claim (paper, claim, effect, lo, hi, verdict): the data of `dvc plots`."""
    rows = [pd.DataFrame([{"paper": p, "claim": f"{p}:{cid}", **m} for cid, m in claims.items()])
            for p, claims in claims_metrics(payloads).items()]
    return pd.concat(rows).to_csv(index=False, float_format="%.6g") if rows else "paper,claim\n"


def earlier_results(results_dir, fresh: list[str]) -> list[Path]:
    """The claims.json of every paper in `results_dir` that this run did not tabulate (`fresh`): a
    run of some papers must not drop the others from the summaries, only say they are older."""
    found = sorted(Path(results_dir).glob("*/claims.json")) if results_dir else []
    return [path for path in found if path.parent.name not in set(fresh)]


def stale_note(payload: dict) -> str:
    meta = payload.get("provenance") or {}
    return (f"not rerun by this run: tabulated {meta.get('created_utc', 'at an unknown time')} at "
            f"{payload.get('scale', '?')} scale (git {str(meta.get('git_commit', 'unknown'))[:12]})")


def write_claims_summary(inputs, out, metrics: str | None = None, plot: str | None = None,
                         results_dir: str | None = None) -> Path:
    """results/claims.md (and the DVC metrics and plot) from this run's claims.json files (`inputs`)
    and, given `results_dir`, every other paper's results found there, each marked as not rerun."""
    from .io import write_json

    payloads = [read_json(p) for p in inputs]
    fresh = [p["paper"] for p in payloads]
    for path in earlier_results(results_dir, fresh):
        payloads.append({**read_json(path), "stale": True})
    payloads.sort(key=lambda p: p["paper"])
    if metrics:
        write_json(metrics, claims_metrics(payloads))
    if plot:
        atomic_write(plot, claims_table(payloads))
    return atomic_write(out, claims_markdown(payloads))
