"""Coverage of 08 scorer's claim tests on a pool of real tiny-scale runs (issue 10).

Why: simulated null effects (tests/core/test_calibration.py) are kinder than real RL returns, where
some runs learn and some collapse. This script trains a pool of seeds of every tiny arm with the
paper's own training loop and config, then resamples n-seed sets from the pool and measures how
often each candidate test's 95% interval covers the pool's effect (the effect over all pooled seeds),
and how often two disjoint seed sets give opposite verdicts (holds vs not reproduced).

Design, fixed before the pool was run (2026-11-30):
    pool    tiny config as shipped (config/hydra/paper_scale/scorer/tiny.yaml), all four methods,
            the two environment slots that carry claims; seed blocks as the pipeline runs them, [0..7] (the
            headline seeds) and [100..107] (the disjoint check set), plus seeds 8..39 trained as one
            block of 32 (same code; a seed's RNG streams depend on its block, so these are fresh,
            exchangeable draws; one block of 32 costs ~1.7 blocks of 8). 48 seeds in all.
    tests   bootstrap_iqm, bootstrap_mean (expanded percentile, stratified), welch_t, paired_t,
            exactly as core.stats computes them; the estimand of an IQM test is the pool's IQM
            difference, of a mean test the pool's mean difference.
    n       8 (the paper's seed count) and 16; R random n-seed subsets of the pool (without
            replacement; both arms on the same seeds, as in the pipeline). Sampling without
            replacement from a finite pool makes sets less variable than fresh seeds (finite-pool
            factor sqrt((48 - n) / 47): 0.92 at n = 8, 0.82 at n = 16), so coverage here is an
            upper bound, optimistic at n = 16.
    flips   R pairs of disjoint n-seed sets: the fraction whose verdicts are holds vs not reproduced.
    rule    (fixed with the design) a test holds its level at n when its coverage is >= 0.93 (95% less
            two standard errors at R = 400) on every comparison of the slots that carry claims.
            The claims use bootstrap_iqm (the paper's statistic) at n = 8 if it holds; otherwise the
            first of welch_t, paired_t, bootstrap_mean that holds at n = 8; a comparison on which
            no test holds at n = 8 is too unstable at this budget to support a verdict, and the
            table says so.

Amendments, recorded (2026-11-30, after the pool had run):
    - The slot list changed mid-pool: SLOTS still held `third` (Acrobot-v1) when the pool started,
      so pool.log shows DQN's Acrobot block for seeds 0..7 being trained; `third` was then removed
      from SLOTS and the rest of the pool ran on `headline` and `second` only. The pool therefore has
      no Acrobot comparison, and the design above was not entirely fixed before the pool ran.
    - The AUC comparison of SCORER against the per-layer-lr DQN was added to COMPARISONS after the
      independent audit of 08 (finding 1); it is computed from the pool's recorded AUCs (no new run).
    - The 0.93 rule never bound: bootstrap_iqm covered >= 0.975 on every comparison at n = 8.
    - The summary that the config's claim notes cite is kept under version control next to this
      script (scripts/coverage_scorer_summary.md, written by `summary`); results/ is not tracked.

Amendment (2026-12-01): the training loop was made faster (tanh in numpy, one flat Adam/clip
tensor per network, packed replay rows; same design, same 40,000 steps). The pool was trained
with the code before that change: float rounding differs, so single RL runs (chaotic) differ from
what the pipeline now gives for the same seed, while the design and its statistics do not. The
pool's seeds 0-7 and 100-107 columns are therefore not the pipeline's current numbers for those
seeds (the smoke records did not change).

Usage (nice it: it is CPU-heavy; the pool took 31 minutes of wall time on one core of a loaded 2-core machine):
    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python scripts/coverage_scorer.py pool  --out results/coverage_scorer
    .venv/bin/python scripts/coverage_scorer.py table --out results/coverage_scorer
    .venv/bin/python scripts/coverage_scorer.py verdicts --out results/coverage_scorer   # the claims' verdicts
    .venv/bin/python scripts/coverage_scorer.py summary --out results/coverage_scorer  # -> coverage_scorer_summary.md
The pool is saved per (method, block, slot) in <out>/pool.jsonl, so an interrupted run resumes.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

BLOCKS = [list(range(0, 8)), list(range(100, 108)), list(range(8, 40))]
METHODS = ("dqn", "dqn_per_layer_lr", "scorer_msbe", "scorer")
SLOTS = ("headline", "second")  # held "third" too when the pool started (see Amendments above)
TESTS = ("bootstrap_iqm", "bootstrap_mean", "welch_t", "paired_t")
NS = (8, 16)
R = 400


# ----------------------------------------------------------------------------- the pool
class _Ckpt:  # no checkpoints inside a pool run: each (method, block, slot) is one saved line
    def load(self):
        return None

    def maybe_save(self, it, fn):
        return False


class _Job:  # the fields train_on_env reads
    def __init__(self, cfg, method, seeds):
        self.cfg, self.method, self.seeds = cfg, method, seeds

    def log(self, *args, **kwargs):
        pass


def build_pool(out: Path, overrides: list[str]) -> None:
    import torch

    from iclr26.core.config import compose_job_config
    from iclr26.papers.scorer import PAPER
    from iclr26.papers.scorer.training import episode_metrics, train_on_env

    torch.set_num_threads(1)
    torch.set_flush_denormal(True)
    cfg = compose_job_config("scorer", "tiny", overrides)
    path = out / "pool.jsonl"
    done = set()
    if path.exists():
        for line in path.read_text().splitlines():
            row = json.loads(line)
            done.add((row["method"], tuple(row["block"]), row["slot"]))
    out.mkdir(parents=True, exist_ok=True)
    for block in BLOCKS:
        for method in METHODS:
            for slot in SLOTS:
                if (method, tuple(block), slot) in done:
                    continue
                t0 = time.time()
                episodes, info = train_on_env(_Job(cfg, method, block), slot, PAPER.datasets.index(slot), _Ckpt())
                per_seed = episode_metrics(episodes, len(block), info["steps_per_seed"], cfg["train"])
                row = {"method": method, "block": block, "slot": slot, "wall_s": round(time.time() - t0, 1),
                       "overrides": overrides, "total_steps": cfg["train"]["total_steps"],
                       "records": [{"seed": s, "final_return": m["final_return"], "auc": m["auc"]}
                                   for s, m in zip(block, per_seed)]}
                with path.open("a") as fh:
                    fh.write(json.dumps(row) + "\n")
                print(f"{method:17s} {slot:8s} seeds {block[0]}..{block[-1]}: {row['wall_s']} s", flush=True)


def load_pool(out: Path) -> dict:
    """{(method, slot, metric): {seed: value}}"""
    pool: dict = {}
    for line in (out / "pool.jsonl").read_text().splitlines():
        row = json.loads(line)
        for rec in row["records"]:
            for metric in ("final_return", "auc"):
                pool.setdefault((row["method"], row["slot"], metric), {})[rec["seed"]] = rec[metric]
    return pool


# ----------------------------------------------------------------------------- the tests
def intervals(test: str, m: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Effect and 95% interval of method - baseline per row (rows: seed sets), as core.stats."""
    from iclr26.core import stats

    if test == "paired_t":
        d = m - b
        lo, hi = stats.t_bounds(d)
        return d.mean(1), lo, hi
    if test == "welch_t":
        lo, hi = stats.welch_bounds(m, b)
        return m.mean(1) - b.mean(1), lo, hi
    stat = "iqm" if test == "bootstrap_iqm" else "mean"
    lo, hi = stats.bootstrap_bounds(stat, [m, b], difference=True)
    return stats.STATS[stat](m, axis=1) - stats.STATS[stat](b, axis=1), lo, hi


def verdicts(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """+1 holds (effect > 0), -1 not reproduced, 0 inconclusive (direction: higher)."""
    return np.where(lo > 0, 1, np.where(hi < 0, -1, 0))


def pool_effect(test: str, m: np.ndarray, b: np.ndarray) -> float:
    from iclr26.core import stats

    return float(stats.iqm(m) - stats.iqm(b)) if test == "bootstrap_iqm" else float(m.mean() - b.mean())


COMPARISONS = [  # (method, baseline, metric): every claim of the paper config, on every slot
    ("scorer", "dqn", "final_return"),
    ("scorer", "dqn", "auc"),
    ("scorer", "scorer_msbe", "final_return"),
    ("dqn_per_layer_lr", "dqn", "final_return"),
    ("scorer", "dqn_per_layer_lr", "final_return"),
    ("scorer", "dqn_per_layer_lr", "auc"),  # added after the audit (finding 1), from the recorded AUCs
    ("dqn_per_layer_lr", "dqn", "auc"),     # (same)
]
SUMMARY = Path(__file__).with_name("coverage_scorer_summary.md")


def coverage_table(out: Path) -> list[dict]:
    pool = load_pool(out)
    rng = np.random.default_rng(2026)
    rows = []
    for slot in SLOTS:
        for method, baseline, metric in COMPARISONS:
            mv, bv = pool.get((method, slot, metric)), pool.get((baseline, slot, metric))
            if not mv or not bv:
                continue
            seeds = sorted(s for s in set(mv) & set(bv) if mv[s] is not None and bv[s] is not None)
            m_all = np.array([mv[s] for s in seeds], dtype=float)
            b_all = np.array([bv[s] for s in seeds], dtype=float)
            n_pool = len(seeds)
            fixed = {name: ([seeds.index(s) for s in block if s in seeds]) for name, block in
                     (("0-7", BLOCKS[0]), ("100-107", BLOCKS[1]))}
            for n in NS:
                if 2 * n > n_pool:
                    continue
                perm = np.array([rng.permutation(n_pool)[:2 * n] for _ in range(R)])
                sets_a, sets_b = perm[:, :n], perm[:, n:]  # disjoint pairs
                for test in TESTS:
                    theta = pool_effect(test, m_all, b_all)
                    eff_a, lo_a, hi_a = intervals(test, m_all[sets_a], b_all[sets_a])
                    _, lo_b, hi_b = intervals(test, m_all[sets_b], b_all[sets_b])
                    va, vb = verdicts(lo_a, hi_a), verdicts(lo_b, hi_b)
                    row = {"slot": slot, "metric": metric, "method": method, "baseline": baseline,
                           "test": test, "n": n, "n_pool": n_pool, "pool_effect": round(theta, 2),
                           "coverage": round(float(np.mean((lo_a <= theta) & (theta <= hi_a))), 3),
                           "holds": round(float(np.mean(va == 1)), 3),
                           "not_reproduced": round(float(np.mean(va == -1)), 3),
                           "flip": round(float(np.mean(va * vb == -1)), 3),
                           "median_width": round(float(np.median(hi_a - lo_a)), 1)}
                    if n == 8:  # the two fixed seed sets of the issue
                        for name, idx in fixed.items():
                            e, lo, hi = intervals(test, m_all[idx][None], b_all[idx][None])
                            row[f"seeds_{name}"] = f"{e[0]:+.1f} [{lo[0]:.1f}, {hi[0]:.1f}]"
                    rows.append(row)
    return rows


def to_markdown(rows: list[dict]) -> str:
    cols = ["slot", "metric", "method", "baseline", "test", "n", "n_pool", "pool_effect", "coverage", "holds",
            "not_reproduced", "flip", "median_width", "seeds_0-7", "seeds_100-107"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r.get(c, "")) for c in cols) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def pool_records(out: Path, seeds):
    """The pool's records of the given seeds, shaped like the pipeline's (method, env, seed, metrics)."""
    import pandas as pd

    rows = []
    for line in (out / "pool.jsonl").read_text().splitlines():
        row = json.loads(line)
        rows += [{"method": row["method"], "env": row["slot"], **rec} for rec in row["records"] if rec["seed"] in seeds]
    return pd.DataFrame(rows)


def verdict_table(out: Path, claims: list[dict]) -> list[dict]:
    """Every claim's effect, interval and verdict on seeds 0-7, on seeds 100-107, and on the whole pool."""
    from iclr26.core.claims import check_claims

    sets = {"0-7": BLOCKS[0], "100-107": BLOCKS[1], "pool": [s for b in BLOCKS for s in b]}
    claims = [c for c in claims if c.get("where", {}).get("env") in SLOTS]  # the pool covers these slots only
    table = {c["id"]: {"id": c["id"], "test": c["test"]} for c in claims}
    for name, seeds in sets.items():
        for c in check_claims(claims, pool_records(out, set(seeds))):
            e = c["estimate"]
            table[c["id"]][name] = f"{e['value']:+.1f} [{e['lo']:.1f}, {e['hi']:.1f}] n={e['n']}: {c['verdict']}"
    return list(table.values())


def summary_markdown(out: Path) -> str:
    """Claims' verdicts on the two fixed seed sets and the pool, and the coverage of bootstrap_iqm at n = 8."""
    from iclr26.core.config import compose_job_config

    rows = verdict_table(out, compose_job_config("scorer", "tiny")["claims"])
    cov = [r for r in coverage_table(out) if r["n"] == 8 and r["test"] == "bootstrap_iqm"]
    pool = load_pool(out)
    n_pool = len(pool[("scorer", "headline", "auc")])
    lines = ["# 08 scorer: coverage pool summary (scripts/coverage_scorer.py; tiny scale)", "",
             f"Written by `coverage_scorer.py summary` from results/coverage_scorer/pool.jsonl ({n_pool} seeds per",
             "arm on the two claim-carrying slots: blocks 0-7, 100-107 and 8-39, tiny config as shipped on",
             "2026-11-30). The claim notes of config/hydra/paper/scorer.yaml cite this file. Effects are the",
             "IQM difference with the expanded percentile bootstrap 95% interval, as the pipeline computes them.",
             "The pool holds no Acrobot-v1 (third slot) comparison: see the script's Amendments.",
             "The pool was trained before the loop was made faster on 2026-12-01 (same design and steps,",
             "different float rounding): its seeds 0-7 and 100-107 runs are not the pipeline's current",
             "runs of those seeds, only draws from the same design (see the script's Amendments).", "",
             "## Verdicts of the tiny config's claims", "",
             "| claim | test | seeds 0-7 | seeds 100-107 | pool |", "|---|---|---|---|---|"]
    lines += [f"| {r['id']} | {r['test']} | {r.get('0-7', '')} | {r.get('100-107', '')} | {r.get('pool', '')} |"
              for r in rows]
    lines += ["", "## Coverage of bootstrap_iqm at n = 8 (400 random seed sets from the pool)", "",
              "| slot | metric | method - baseline | pool effect | coverage | holds | not reproduced | flip "
              "| median width |",
              "|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['slot']} | {r['metric']} | {r['method']} - {r['baseline']} | {r['pool_effect']} | {r['coverage']} "
              f"| {r['holds']} | {r['not_reproduced']} | {r['flip']} | {r['median_width']} |" for r in cov]
    lines += ["", "## Every comparison on the whole pool (bootstrap_iqm)", "",
              "| slot | metric | method - baseline | effect [95% interval] | n |", "|---|---|---|---|---|"]
    for slot in SLOTS:
        for method, baseline, metric in COMPARISONS:
            mv, bv = pool[(method, slot, metric)], pool[(baseline, slot, metric)]
            seeds = sorted(set(mv) & set(bv))
            e, lo, hi = intervals("bootstrap_iqm", np.array([[mv[s] for s in seeds]], float),
                                  np.array([[bv[s] for s in seeds]], float))
            lines.append(f"| {slot} | {metric} | {method} - {baseline} | {e[0]:+.1f} [{lo[0]:.1f}, {hi[0]:.1f}] "
                         f"| {len(seeds)} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("pool", "table", "verdicts", "summary"))
    ap.add_argument("--out", type=Path, default=Path("results/coverage_scorer"))
    ap.add_argument("overrides", nargs="*", help="config overrides for the pool (default: the tiny config)")
    args = ap.parse_args(argv)
    if args.what == "pool":
        build_pool(args.out, args.overrides)
        return 0
    if args.what == "verdicts":  # the paper config's claims (tiny) on the two seed sets and the pool
        from iclr26.core.config import compose_job_config

        rows = verdict_table(args.out, compose_job_config("scorer", "tiny")["claims"])
        (args.out / "verdicts.json").write_text(json.dumps(rows, indent=1))
        for r in rows:
            sys.stdout.write(" | ".join(str(r.get(k, "")) for k in ("id", "test", "0-7", "100-107", "pool")) + "\n")
        return 0
    if args.what == "summary":  # the version-controlled summary the claim notes cite
        SUMMARY.write_text(summary_markdown(args.out))
        sys.stdout.write(SUMMARY.read_text())
        return 0
    rows = coverage_table(args.out)
    (args.out / "coverage.json").write_text(json.dumps(rows, indent=1))
    (args.out / "coverage.md").write_text(to_markdown(rows))
    sys.stdout.write(to_markdown(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
