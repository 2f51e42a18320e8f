"""Claims as data, verdicts as computation.

A paper's config lists its headline claims (see papers/README.md). Each is checked on the
records of every seed: the effect (method - baseline, or the method's estimate against a number)
gets a 95% interval, and the verdict follows from where that interval lies:
    holds           the whole interval is on the claimed side
    not reproduced  the whole interval is on the other side
    not reproduced (no effect)
                    the claim declares a `margin` (the smallest effect that would matter, fixed before
                    the arms run) and both one-sided tests at 5% put the effect inside it (the
                    NO_EFFECT_LEVEL interval lies within (-margin, +margin) of the line)
    inconclusive    the interval straddles the line; the claim then says how many seeds would decide
                    it at the observed effect and spread (`seeds_needed`), and the command to run them
and one outcome that is not a test of the claim:
    untestable here the claim's precondition (a check of the setup evaluated first, same shape as a
                    claim) does not hold; or there are fewer seeds than the test is valid at
                    (stats.MIN_N); or the data have no spread across seeds (a zero-width interval,
                    e.g. every seed at the metric's ceiling); or a tolerance claim has no headroom (its
                    reference sits within the tolerance of the metric's ceiling or floor). The reason
                    is measured and printed.
A claim of `kind: check` (a consistency check that holds by construction) is computed and shown
with its number, but is not counted among the verdict totals. A precondition or a check may use the
gate `every_seed` (holds when every seed is on the claimed side; its interval is the seeds' range, so
it never decides a claim's verdict).
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from .errors import ConfigError
from .io import atomic_write, read_json
from .stats import GATES, LEVEL, MIN_N, SEEDS_CAP, VALUE_REFUSED, Estimate, effect, one_sample, seeds_needed

HOLDS, NOT_REPRODUCED, INCONCLUSIVE, UNTESTABLE = "holds", "not reproduced", "inconclusive", "untestable here"
NO_EFFECT = "not reproduced (no effect)"   # the TOST interval lies inside the claim's margin
VERDICTS = (HOLDS, NOT_REPRODUCED, NO_EFFECT, INCONCLUSIVE, UNTESTABLE)
# "No effect" is two one-sided tests at 5%: the textbook 90% interval inside the margin. On the bimodal
# per-seed differences of RL runs (learn or collapse) a t interval's one-sided tail at 90% misses 5.2-5.3%
# at 6-12 seeds (tests/core/test_calibration.py); at 91% it stays at or under 4.9% at every n measured.
NO_EFFECT_LEVEL = 0.91
PAIRED = ("paired_t", "cluster_bootstrap", "every_seed")   # tests that pair method and baseline by seed
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


def _arms(spec: dict, records: pd.DataFrame, name: str) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """The method's rows and the baseline's (None against a value); paired tests keep the shared seeds."""
    if spec["metric"] not in records.columns:
        raise ConfigError(f"{name}: metric {spec['metric']!r} is not in the records")
    rows = select(records, spec["method"], spec.get("where"))
    if "baseline" not in spec:
        return rows, None
    base = select(records, spec["baseline"], spec.get("where"))
    if spec["test"] in PAIRED:
        shared = sorted(set(rows["seed"]) & set(base["seed"]))
        rows, base = rows[rows["seed"].isin(shared)], base[base["seed"].isin(shared)]
    return rows, base


def _estimate(spec: dict, rows: pd.DataFrame, base: pd.DataFrame | None, name: str,
              level: float = LEVEL) -> Estimate:
    metric, test = spec["metric"], spec["test"]
    if test == "fit" and not {f"{metric}_lo", f"{metric}_hi"} <= set(rows.columns):
        raise ConfigError(f"{name}: test 'fit' needs the records' own interval ({metric}_lo and {metric}_hi); "
                          "without it a fit would read as a point estimate with no uncertainty")
    if base is None:
        return one_sample(rows[metric].to_numpy(), test, _column(rows, f"{metric}_lo"),
                          _column(rows, f"{metric}_hi"), level=level)
    items = {}
    if test == "cluster_bootstrap":   # per-problem outcomes: the records' `<metric>_items` lists
        if f"{metric}_items" not in rows.columns:
            raise ConfigError(f"{name}: cluster_bootstrap needs per-problem lists {metric}_items in the records")
        items = {"method_items": [list(v) for v in rows[f"{metric}_items"]],
                 "base_items": [list(v) for v in base[f"{metric}_items"]]}
    return effect(rows[metric].to_numpy(), base[metric].to_numpy(), test,
                  _column(rows, f"{metric}_lo"), _column(rows, f"{metric}_hi"),
                  _column(base, f"{metric}_lo"), _column(base, f"{metric}_hi"), level=level, **items)


def _reference(spec: dict) -> float:
    return float(spec["value"]) if "baseline" not in spec else 0.0


def _compared(spec: dict) -> str:
    return f"{spec['method']} - {spec['baseline']}" if "baseline" in spec else f"{spec['method']} vs {spec['value']}"


def _evaluate(spec: dict, records: pd.DataFrame, name: str) -> tuple[Estimate, str, str]:
    """The estimate, what was compared, and the verdict of one claim-shaped spec."""
    rows, base = _arms(spec, records, name)
    est = _estimate(spec, rows, base, name)
    return est, _compared(spec), verdict(est, spec["direction"], _reference(spec), spec.get("tolerance"))


def _too_few(est: Estimate, test: str) -> str | None:
    if est.n < MIN_N[test]:
        return f"{est.n} seeds; {test} is valid from {MIN_N[test]}"
    return None


# ----------------------------------------------------------------------------- degenerate data
def metric_range(cfg: dict | None, metric: str) -> tuple[float | None, float | None]:
    """The metric's floor and ceiling from the config (`metric_range`, or 0 and 1 for an `indicators`
    metric); None where unbounded or undeclared."""
    cfg = cfg or {}
    if metric in (cfg.get("indicators") or []):
        return 0.0, 1.0
    floor, ceiling = ((cfg.get("metric_range") or {}).get(metric) or (None, None))
    return (None if floor is None else float(floor)), (None if ceiling is None else float(ceiling))


def _at_bound(value: float, bounds) -> str:
    floor, ceiling = bounds
    if ceiling is not None and value == ceiling:
        return " (at the ceiling)"
    if floor is not None and value == floor:
        return " (at the floor)"
    return ""


def _zero_width(est: Estimate) -> bool:
    return math.isfinite(est.lo) and math.isfinite(est.hi) and est.hi - est.lo <= 1e-12 * max(1.0, abs(est.value))


def _no_spread(spec: dict, rows: pd.DataFrame, base: pd.DataFrame | None, est: Estimate, bounds) -> str | None:
    """'every seed gives m = 1 (at the ceiling) and b = 1 (at the ceiling)': the reason a test on data
    with no spread across seeds is not evidence (its interval has zero width: no inference is possible)."""
    if spec["test"] in GATES or not _zero_width(est):
        return None
    metric = spec["metric"]

    def constant(method: str, frame: pd.DataFrame) -> str | None:
        values = frame[metric].astype(float).to_numpy()
        values = values[np.isfinite(values)]
        if values.size and np.ptp(values) == 0:
            return f"{method} = {_fmt(values[0])}{_at_bound(values[0], bounds)}"
        return None

    arms = [constant(spec["method"], rows)] + ([constant(spec["baseline"], base)] if base is not None else [])
    if all(arms):
        text = " and ".join(arms)
    else:
        text = f"{_compared(spec)} = {_fmt(est.value)}"
    what = "the interval has zero width" if spec["test"] == "fit" else "no spread across seeds"
    return f"{what}: every seed gives {text}"


def _no_headroom(spec: dict, base: pd.DataFrame | None, bounds) -> str | None:
    """A tolerance claim ('within 0.05 of the baseline') is only a test when the reference sits at least
    the tolerance away from the metric's ceiling and floor: at the ceiling a method cannot do better
    and 'keeps accuracy' holds by construction."""
    if spec["direction"] != "within":
        return None
    tol, (floor, ceiling) = float(spec["tolerance"]), bounds
    if base is not None:
        ref, what = float(base[spec["metric"]].astype(float).mean()), f"{spec['baseline']} ({spec['metric']})"
    else:
        ref, what = float(spec["value"]), f"the claimed value of {spec['metric']}"
    if ceiling is not None and ceiling - ref < tol:
        return f"no headroom: {what} = {_fmt(ref)} is within the tolerance {_fmt(tol)} of the ceiling {_fmt(ceiling)}"
    if floor is not None and ref - floor < tol:
        return f"no headroom: {what} = {_fmt(ref)} is within the tolerance {_fmt(tol)} of the floor {_fmt(floor)}"
    return None


# ----------------------------------------------------------------------------- no effect, seeds needed
def _inside_margin(est_tost: Estimate, reference: float, margin: float) -> bool:
    """Both one-sided tests at 5% (TOST) put the effect inside (-margin, +margin): the interval at
    NO_EFFECT_LEVEL is."""
    return reference - margin < est_tost.lo and est_tost.hi < reference + margin


def _seeds_needed(spec: dict, est: Estimate, cfg: dict | None) -> dict | None:
    """How many seeds would decide an inconclusive claim at the observed effect and spread (and, with a
    margin, show no effect), capped at SEEDS_CAP, with the command that reruns the paper on them."""
    if spec["test"] == "fit":
        return {"decide": None, "no_effect": None, "capped": False,
                "text": "more seeds would not decide it: a fit's interval comes from its own data (more points "
                        "or samples in the fit narrow it), not from seeds"}
    if spec["test"] in GATES or est.n < 2:
        return None
    half, gap = (est.hi - est.lo) / 2, abs(est.value - _reference(spec))
    if spec["direction"] == "within":
        tol = float(spec["tolerance"])
        decide = seeds_needed(half, est.n, lambda h: gap + h <= tol or gap - h > tol)
    else:
        decide = seeds_needed(half, est.n, lambda h: h < gap)
    margin = (spec.get("margin") or {}).get("value")
    no_effect = None
    if margin is not None:
        no_effect = seeds_needed(half, est.n, lambda h: gap + h < float(margin), level=NO_EFFECT_LEVEL)
    parts = [f"~{decide} seeds would decide it" if decide else f"more than {SEEDS_CAP} seeds would be needed to "
             "decide it"]
    if margin is not None:
        parts.append(f"~{no_effect} would show no effect" if no_effect else
                     "no number of seeds would show no effect (the effect is at least the margin)"
                     if gap >= float(margin) else f"more than {SEEDS_CAP} would be needed to show no effect")
    text = "; ".join(parts) + " (at this effect and spread)"
    out = {"decide": decide, "no_effect": no_effect, "capped": decide is None, "text": text}
    target = max(k for k in (decide, no_effect, 0) if k is not None)
    if target and cfg and cfg.get("seeds"):
        out["command"] = rerun_command(cfg, target)
    return out


def rerun_command(cfg: dict, n: int) -> str:
    """The command that reruns the paper on n seeds: its own seeds, then the next ones."""
    seeds = list(cfg["seeds"])
    nxt = max(seeds) + 1
    while len(seeds) < n:
        seeds.append(nxt)
        nxt += 1
    scale = "" if cfg.get("scale", "tiny") == "tiny" else f" scale={cfg['scale']}"
    return (f"snakemake --cores 2 all --config 'papers=[{cfg.get('slug', '?')}]' "
            f"'seeds=[{','.join(map(str, seeds))}]'{scale}")


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


def _precondition(spec: dict, records: pd.DataFrame, name: str, cfg: dict | None) -> tuple[dict, str | None]:
    """The precondition's result (for claims.json) and, unless it holds, the measured reason."""
    pre, pname = spec["precondition"], f"{name} precondition"
    if not isinstance(pre, dict):
        raise ConfigError(f"{pname} must be a mapping shaped like a claim")
    _validate(pre, pname, PRECONDITION_REQUIRED)
    rows, base = _arms(pre, records, pname)
    est = _estimate(pre, rows, base, pname)
    p_verdict = verdict(est, pre["direction"], _reference(pre), pre.get("tolerance"))
    p_reason = _too_few(est, pre["test"]) or _no_spread(pre, rows, base, est, metric_range(cfg, pre["metric"]))
    result = {**pre, "estimate": est.as_dict(), "compared": _compared(pre),
              "verdict": UNTESTABLE if p_reason else p_verdict}
    if not p_reason and p_verdict == HOLDS:
        return result, None
    what = pre.get("claim") or f"{pre['metric']} {pre['direction']}"
    if pre["test"] in GATES and not p_reason:   # a gate: name the seeds that fail it
        return result, f"precondition not met ({what}): {_compared(pre)} fails on {_failing_seeds(pre, records, pname)}"
    measured = f"{_compared(pre)} = {_fmt(est.value)} [{_fmt(est.lo)}, {_fmt(est.hi)}]"
    return result, f"precondition not met ({what}): {measured}, {p_reason or p_verdict}"


def check_claim(spec: dict, records: pd.DataFrame, cfg: dict | None = None) -> dict:
    """One claim's verdict on the records. `cfg` (the paper's job config) gives the metrics' ranges
    (`metric_range`, `indicators`), and the slug, scale and seeds of the seeds-needed command."""
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
    if spec.get("precondition") is not None:
        out["precondition"], reason = _precondition(spec, records, name, cfg)
    rows, base = _arms(spec, records, name)
    est = _estimate(spec, rows, base, name)
    result = verdict(est, spec["direction"], _reference(spec), spec.get("tolerance"))
    bounds = metric_range(cfg, spec["metric"])
    reason = (reason or _too_few(est, spec["test"]) or _no_headroom(spec, base, bounds)
              or _no_spread(spec, rows, base, est, bounds))
    margin = (spec.get("margin") or {}).get("value")
    if not reason and margin is not None:
        est_tost = _estimate(spec, rows, base, name, level=NO_EFFECT_LEVEL)
        out["estimate_tost"] = est_tost.as_dict()
        if _inside_margin(est_tost, _reference(spec), float(margin)):
            result = NO_EFFECT
    out.update({"kind": kind, "estimate": est.as_dict(), "compared": _compared(spec),
                "verdict": UNTESTABLE if reason else result})
    if reason:
        out["reason"] = reason
    if out["verdict"] == INCONCLUSIVE:
        needed = _seeds_needed(spec, est, cfg)
        if needed:
            out["seeds_needed"] = needed
    return out


def check_claims(specs: list[dict], records: pd.DataFrame, cfg: dict | None = None) -> list[dict]:
    return [check_claim(spec, records, cfg) for spec in specs]


# ----------------------------------------------------------------------------- summary across papers
def _fmt(x: float) -> str:
    if x is None or not math.isfinite(x):
        return "n/a"
    return f"{x:.3g}"


def outcome_text(c: dict) -> str:
    """The verdict cell: the verdict in bold, with the measured reason when it is untestable here, how
    many seeds would decide it when it is inconclusive, and the claim's `note` (e.g. how stable the
    setting was across a larger pool of seeds) when it has one."""
    text = f"**{c['verdict']}**" + (f": {c['reason']}" if c.get("reason") else "")
    if c.get("seeds_needed"):
        text += f": {c['seeds_needed']['text']}"
    if c["verdict"] == NO_EFFECT and c.get("margin"):
        tost = c.get("estimate_tost") or {}
        text += (f": the {NO_EFFECT_LEVEL:.0%} interval [{_fmt(tost.get('lo'))}, {_fmt(tost.get('hi'))}] lies within "
                 f"±{_fmt(float(c['margin']['value']))} (the margin: {c['margin']['why']})")
    return f"{text} ({c['note'].rstrip('.')})" if c.get("note") else text


def rerun_lines(claims: list[dict], paper: str | None = None) -> list[str]:
    """One bullet per inconclusive claim with the command that reruns its paper on the seeds that
    would decide it: what to run next (the seeds are still fixed before that run, not grown until a
    verdict appears)."""
    out = []
    for c in claims:
        needed = c.get("seeds_needed") or {}
        if needed.get("command"):
            where = f"{paper}: " if paper else ""
            out.append(f"- {where}`{c['id']}`: {needed['text']}: `{needed['command']}`")
    return out


def claims_markdown(payloads: list[dict]) -> str:
    lines = [
        "# Claims: every headline claim, checked on our runs",
        "",
        "Verdicts are computed by `tabulate` from the seeds' records: **holds** when the 95% interval of",
        "the effect lies on the claimed side, **not reproduced** when it lies on the other side,",
        "**not reproduced (no effect)** when the claim has a margin (the smallest effect that matters) and",
        "the 91% interval (two one-sided tests at 5%) lies inside it, **inconclusive** when it straddles",
        "the line (with the seeds that would decide it), **untestable here** when the claim's precondition",
        "fails, there are too few seeds for its test, the seeds show no spread (e.g. all at the ceiling) or",
        "a tolerance claim has no headroom (the measured reason is given). Checks (consistency",
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
    rerun = [line for p in payloads if not p.get("stale")
             for line in rerun_lines([c for c in p["claims"] if c.get("kind", "claim") != "check"], p["paper"])]
    if rerun:
        lines += ["## What would decide the inconclusive claims", "",
                  "Seeds needed at the observed effect and spread (a t approximation); a rerun on them is a new "
                  "experiment with its seeds fixed before it runs:", "", *rerun, ""]
    if len(checks) > len(head):
        lines += ["## Checks and probes (not the paper's claims; not counted in the totals)", "", *checks, ""]
    return "\n".join(lines)


VERDICT_SCORE = {HOLDS: 1, INCONCLUSIVE: 0, UNTESTABLE: 0, NOT_REPRODUCED: -1, NO_EFFECT: -1}


def claims_metrics(payloads: list[dict]) -> dict:
    """Every claim's effect, interval and verdict (holds 1, inconclusive or untestable 0, not reproduced or
    no effect -1) as numbers per paper and claim: what `dvc metrics diff` compares between two commits."""
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
