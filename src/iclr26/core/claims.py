"""Claims as data, verdicts as computation.

A paper's config lists its headline claims (see papers/README.md). Each is checked on the
records of every seed: the effect (method - baseline, or the method's estimate against a number)
gets a 95% interval, and the verdict follows from where that interval lies:
    holds           the whole interval is on the claimed side
    not reproduced  the whole interval is on the other side
    inconclusive    the interval straddles the line (or there are too few seeds for one)
"""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from .errors import ConfigError
from .io import atomic_write, read_json
from .stats import Estimate, aggregate, effect

HOLDS, NOT_REPRODUCED, INCONCLUSIVE = "holds", "not reproduced", "inconclusive"
TEST_TO_AGG = {"paired_t": "mean", "welch_t": "mean", "bootstrap_mean": "mean", "bootstrap_iqm": "iqm", "fit": "fit"}
REQUIRED = ("id", "claim", "metric", "method", "direction", "test")


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


def check_claim(spec: dict, records: pd.DataFrame) -> dict:
    missing = [key for key in REQUIRED if key not in spec]
    if missing:
        raise ConfigError(f"claim {spec.get('id', '?')!r} lacks key '{missing[0]}'")
    if ("baseline" in spec) == ("value" in spec):
        raise ConfigError(f"claim {spec['id']!r} needs exactly one of 'baseline' or 'value'")
    metric, test = spec["metric"], spec["test"]
    if test not in TEST_TO_AGG:
        raise ConfigError(f"claim {spec['id']!r}: test {test!r} is not one of {', '.join(TEST_TO_AGG)}")
    if metric not in records.columns:
        raise ConfigError(f"claim {spec['id']!r}: metric {metric!r} is not in the records")
    rows = select(records, spec["method"], spec.get("where"))
    if "baseline" in spec:
        base = select(records, spec["baseline"], spec.get("where"))
        if test == "paired_t":
            shared = sorted(set(rows["seed"]) & set(base["seed"]))
            rows, base = rows[rows["seed"].isin(shared)], base[base["seed"].isin(shared)]
        est = effect(rows[metric].to_numpy(), base[metric].to_numpy(), test,
                     _column(rows, f"{metric}_lo"), _column(rows, f"{metric}_hi"),
                     _column(base, f"{metric}_lo"), _column(base, f"{metric}_hi"))
        reference, against = 0.0, f"{spec['method']} - {spec['baseline']}"
    else:
        est = aggregate(rows[metric].to_numpy(), TEST_TO_AGG[test], _column(rows, f"{metric}_lo"),
                        _column(rows, f"{metric}_hi"))
        reference, against = float(spec["value"]), f"{spec['method']} vs {spec['value']}"
    return {
        **{k: v for k, v in spec.items()},
        "estimate": est.as_dict(),
        "compared": against,
        "verdict": verdict(est, spec["direction"], reference, spec.get("tolerance")),
    }


def check_claims(specs: list[dict], records: pd.DataFrame) -> list[dict]:
    return [check_claim(spec, records) for spec in specs]


# ----------------------------------------------------------------------------- summary across papers
def _fmt(x: float) -> str:
    if x is None or not math.isfinite(x):
        return "n/a"
    return f"{x:.3g}"


def claims_markdown(payloads: list[dict]) -> str:
    lines = [
        "# Claims: every headline claim, checked on our runs",
        "",
        "Verdicts are computed by `tabulate` from the seeds' records: **holds** when the 95% interval of",
        "the effect lies on the claimed side, **not reproduced** when it lies on the other side,",
        "**inconclusive** when it straddles the line. The scale says how far our setting is from the paper's.",
        "",
    ]
    counts: dict[str, int] = {}
    rows = ["| paper | scale | claim | paper reports | ours: effect [95% CI] | test (n) | verdict |",
            "|---|---|---|---|---|---|---|"]
    for payload in payloads:
        for c in payload["claims"]:
            est = c["estimate"]
            counts[c["verdict"]] = counts.get(c["verdict"], 0) + 1
            ours = f"{c['compared']}: {_fmt(est['value'])} [{_fmt(est['lo'])}, {_fmt(est['hi'])}]"
            cell = lambda s: str(s).replace("|", "\\|").replace("\n", " ")  # noqa: E731
            rows.append(
                f"| {payload['paper']} | {payload['scale']} | {cell(c['claim'])} | {cell(c.get('paper', ''))} | "
                f"{cell(ours)} | {c['test']} ({est['n']}) | **{c['verdict']}** |"
            )
    total = ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))
    lines += [f"Totals: {total or 'no claims'}.", "", *rows, ""]
    return "\n".join(lines)


VERDICT_SCORE = {HOLDS: 1, INCONCLUSIVE: 0, NOT_REPRODUCED: -1}


def claims_metrics(payloads: list[dict]) -> dict:
    """Every claim's effect, interval and verdict (holds 1, inconclusive 0, not reproduced -1) as
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


def write_claims_summary(inputs, out, metrics: str | None = None, plot: str | None = None) -> Path:
    from .io import write_json

    payloads = sorted((read_json(p) for p in inputs), key=lambda p: p["paper"])
    if metrics:
        write_json(metrics, claims_metrics(payloads))
    if plot:
        atomic_write(plot, claims_table(payloads))
    return atomic_write(out, claims_markdown(payloads))
