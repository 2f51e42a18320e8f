"""Statistics over seeds: point estimates with 95% intervals, and effects between two methods.

Conventions follow the RL/ML reporting literature: the mean with a Student-t interval for a
handful of seeds, the interquartile mean (IQM) with a percentile bootstrap (Agarwal et al. 2021),
and effects as differences (method - baseline) with an interval from the paired t test, Welch's
t test, or a bootstrap. Bootstrap intervals are expanded percentile intervals (calibrated at small n)
and need at least BOOT_MIN_N seeds; each test's minimum is MIN_N. Bootstrap resampling uses a fixed
seed, so tables are reproducible.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


class _ScipyStatsOnUse:
    """scipy.stats, imported on first use: every job imports this module (core.contract reads
    MIN_N when it composes a config), and scipy.stats costs about a CPU-second to import."""

    def __getattr__(self, name):
        from scipy import stats

        return getattr(stats, name)


sps = _ScipyStatsOnUse()

LEVEL = 0.95
N_BOOT = 4000
BOOT_SEED = 12345


@dataclass(frozen=True)
class Estimate:
    value: float
    lo: float
    hi: float
    n: int
    how: str  # how the interval was computed, for the table's footnote and claims.json

    def as_dict(self) -> dict:
        return {"value": self.value, "lo": self.lo, "hi": self.hi, "n": self.n, "how": self.how}


def _clean(values) -> np.ndarray:
    arr = np.asarray(values, dtype=float).ravel()
    return arr[np.isfinite(arr)]


def iqm(values, axis=None) -> float | np.ndarray:
    """Interquartile mean: the mean of the middle 50% (scipy's 25%-trimmed mean)."""
    if axis is not None:
        return sps.trim_mean(values, 0.25, axis=axis)
    arr = _clean(values)
    return float(sps.trim_mean(arr, 0.25)) if arr.size else float("nan")


# The smallest number of seeds at which each test's 95% interval holds its level (checked by
# tests/core/test_calibration.py on null effects drawn from normal, heavy-tailed and learn-or-collapse
# distributions). t intervals: exact under normality, and at n >= 3 within 5% false verdicts on the
# bimodal returns of RL runs (at n = 2 about 10%). Bootstraps: a percentile bootstrap of 3 seeds is
# little more than their range (about 19% false verdicts); below 8 seeds it is refused.
# cluster_bootstrap (seed x problem, SE with a t_{S-1} quantile): conservative from 3 seeds on.
MIN_N = {"paired_t": 3, "welch_t": 3, "t": 3, "bootstrap_mean": 8, "bootstrap_iqm": 8, "fit": 1,
         "cluster_bootstrap": 3, "every_seed": 1}
# Not inference: `every_seed` is a gate ("every seed passes": the interval is the seeds' range), the
# rule a tune uses to accept a design. It is allowed in preconditions and checks, never in a claim.
GATES = ("every_seed",)
BOOT_MIN_N = MIN_N["bootstrap_iqm"]
# against a number (one sample) the percentile bootstrap, even expanded, misses ~6.6-7% at 8 seeds
_ONE_SAMPLE_BOOT = ("against a value is not calibrated (a one-sample percentile bootstrap misses > 5% "
                    "at 8-16 seeds); use t")
VALUE_REFUSED = {"bootstrap_mean": _ONE_SAMPLE_BOOT, "bootstrap_iqm": _ONE_SAMPLE_BOOT,
                 "cluster_bootstrap": "pairs method and baseline per seed and problem; it needs a baseline"}
TEST_NAMES = {"paired_t": "paired t", "welch_t": "Welch t", "t": "one-sample t",
              "bootstrap_mean": "expanded percentile bootstrap of the mean",
              "bootstrap_iqm": "expanded percentile bootstrap of the IQM", "fit": "the fit's own interval",
              "cluster_bootstrap": "seed x problem cluster bootstrap SE, t interval",
              "every_seed": "every seed passes (the range of the seeds, no inference)"}


def t_bounds(x: np.ndarray, level: float = LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """Student-t interval (95% unless `level` says otherwise) of the mean of each row of x (shape (R, n));
    nan where n < 2."""
    x = np.atleast_2d(np.asarray(x, dtype=float))
    n = x.shape[1]
    if n < 2:
        nan = np.full(x.shape[0], np.nan)
        return nan, nan.copy()
    half = sps.t.ppf(0.5 + level / 2, n - 1) * x.std(axis=1, ddof=1) / np.sqrt(n)
    mean = x.mean(axis=1)
    return mean - half, mean + half


def welch_bounds(m: np.ndarray, b: np.ndarray, level: float = LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """Welch t interval (95% by default) of mean(m) - mean(b), row by row (shapes (R, n_m), (R, n_b))."""
    m, b = np.atleast_2d(np.asarray(m, dtype=float)), np.atleast_2d(np.asarray(b, dtype=float))
    nm, nb = m.shape[1], b.shape[1]
    d = m.mean(axis=1) - b.mean(axis=1)
    if nm < 2 or nb < 2:
        nan = np.full(d.shape, np.nan)
        return nan, nan.copy()
    vm, vb = m.var(axis=1, ddof=1) / nm, b.var(axis=1, ddof=1) / nb
    with np.errstate(divide="ignore", invalid="ignore"):
        dof = np.where(vm + vb > 0, (vm + vb) ** 2 / (vm**2 / (nm - 1) + vb**2 / (nb - 1)), 1.0)
    half = sps.t.ppf(0.5 + level / 2, dof) * np.sqrt(vm + vb)
    return d - half, d + half


def _t_interval(arr: np.ndarray, level: float = LEVEL) -> tuple[float, float]:
    lo, hi = t_bounds(arr[None, :], level)
    return float(lo[0]), float(hi[0])


STATS = {"mean": np.mean, "median": np.median, "iqm": iqm}


def expanded_alpha(n: int, level: float = LEVEL) -> float:
    """Tail probability for an expanded percentile bootstrap interval (Hesterberg 2015, "What
    teachers should know about the bootstrap", sec. 5): the percentile interval is too narrow for
    small n (it uses z and the plug-in variance); taking the quantiles at the level where
    z = sqrt(n / (n - 1)) * t_{n-1} restores the t interval's width for a mean."""
    z = np.sqrt(n / (n - 1)) * sps.t.ppf(0.5 + level / 2, n - 1)
    return float(sps.norm.sf(z))


def bootstrap_bounds(stat: str, samples: list[np.ndarray], difference: bool = False, expanded: bool = True,
                     n_boot: int = N_BOOT, seed: int = BOOT_SEED,
                     level: float = LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap of stat(sample) (or of stat(a) - stat(b)) for each row of the samples
    (shapes (R, n_i)), resampling each sample independently (stratified). `expanded` widens it for
    small n (see expanded_alpha; n is the smallest sample); expanded=False is the plain percentile
    interval, kept to show in the calibration test that it fails at small n."""
    samples = [np.atleast_2d(np.asarray(s, dtype=float)) for s in samples]
    rows, n = samples[0].shape[0], min(s.shape[1] for s in samples)
    if n < 2:
        nan = np.full(rows, np.nan)
        return nan, nan.copy()
    alpha = expanded_alpha(n, level) if expanded else (1 - level) / 2
    rng = np.random.default_rng(seed)
    fn = STATS[stat]
    lo, hi = np.empty(rows), np.empty(rows)
    chunk = max(1, 2_000_000 // (n_boot * max(s.shape[1] for s in samples)))
    for start in range(0, rows, chunk):
        draws = []
        for s in samples:
            part = s[start:start + chunk]
            idx = rng.integers(0, part.shape[1], (part.shape[0], n_boot, part.shape[1]))
            draws.append(fn(np.take_along_axis(part[:, None, :], idx, axis=2), axis=2))
        values = draws[0] - draws[1] if difference else draws[0]
        lo[start:start + chunk] = np.quantile(values, alpha, axis=1)
        hi[start:start + chunk] = np.quantile(values, 1 - alpha, axis=1)
    return lo, hi


def _draw_counts(rng, rows: int, n: int) -> np.ndarray:
    """(rows, n): how often each of n clusters is drawn in each of `rows` resamples of size n."""
    flat = (np.arange(rows)[:, None] * n + rng.integers(0, n, (rows, n))).ravel()
    return np.bincount(flat, minlength=rows * n).reshape(rows, n).astype(float)


def cluster_bounds(d, n_boot: int = N_BOOT, seed: int = BOOT_SEED,
                   level: float = LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """95% interval of the mean of per-(seed, problem) paired differences d (shape (R, S, P): R
    experiments, S seeds, P problems shared by every seed), problems and seeds both treated as
    samples: the two-way (pigeonhole) cluster bootstrap resamples whole problems (a problem's
    outcomes on every seed together) and whole seeds, independently (Owen 2007, "The pigeonhole
    bootstrap"); its SD of the mean, times sqrt(S / (S - 1)), is the standard error, and the
    interval is mean +- t_{S-1} SE. A problem-only bootstrap ignores how much the effect moves
    from seed to seed (a seed's own model and steering vector) and misses far more than 5% when it
    does; in the limit where only seeds vary this interval is the paired t interval, and problem
    and residual variation only widen it (tests/core/test_calibration.py)."""
    d = np.asarray(d, dtype=float)
    if d.ndim == 2:
        d = d[None]
    reps, s, p = d.shape
    if s < 2 or p < 1:
        nan = np.full(reps, np.nan)
        return nan, nan.copy()
    rng = np.random.default_rng(seed)
    mean, sd = d.mean(axis=(1, 2)), np.empty(reps)
    chunk = max(1, 4_000_000 // (n_boot * (p + s)))
    for start in range(0, reps, chunk):
        part = d[start:start + chunk]
        k = part.shape[0]
        problems, seeds = _draw_counts(rng, k * n_boot, p), _draw_counts(rng, k * n_boot, s)
        problems, seeds = problems.reshape(k, n_boot, p), seeds.reshape(k, n_boot, s)   # draws of each cluster
        means = np.einsum("ksp,kbp,kbs->kb", part, problems, seeds, optimize=True) / (s * p)
        sd[start:start + chunk] = means.std(axis=1)
    half = sps.t.ppf(0.5 + level / 2, s - 1) * sd * np.sqrt(s / (s - 1))
    return mean - half, mean + half


def _bootstrap(stat: str, samples: list[np.ndarray], difference: bool = False,
               level: float = LEVEL) -> tuple[float, float]:
    lo, hi = bootstrap_bounds(stat, [s[None, :] for s in samples], difference, level=level)
    return float(lo[0]), float(hi[0])


def aggregate(values, how: str = "mean", lo=None, hi=None) -> Estimate:
    """One table cell: `how` in mean | median | iqm | fit (a single value with its own interval).

    median / iqm get a bootstrap 95% CI from BOOT_MIN_N seeds on; with fewer seeds no interval
    of a median deserves the name (the bootstrap of a median of 3 is their range, ~75% coverage),
    so the cell shows the range of the seeds and says so."""
    arr = _clean(values)
    if arr.size == 0:
        return Estimate(float("nan"), float("nan"), float("nan"), 0, how)
    if how == "mean":
        return Estimate(float(arr.mean()), *_t_interval(arr), arr.size, "mean, t 95% CI")
    if how in ("median", "iqm"):
        name = "median" if how == "median" else "IQM"
        value = float(np.median(arr)) if how == "median" else iqm(arr)
        if arr.size < BOOT_MIN_N:
            return Estimate(value, float(arr.min()), float(arr.max()), arr.size,
                            f"{name}, range of {arr.size} seeds (too few for a 95% CI)")
        return Estimate(value, *_bootstrap(how, [arr]), arr.size, f"{name}, bootstrap 95% CI (expanded percentile)")
    if how == "fit":
        if arr.size != 1:
            raise ValueError(f"agg 'fit' expects one value, got {arr.size}")
        # no silent point estimate: without its own interval a fit would read as certain (lo = hi)
        if lo is None or hi is None or not (_clean(lo).size and _clean(hi).size):
            raise ValueError("agg 'fit' needs the record's own 95% interval (<metric>_lo and <metric>_hi)")
        return Estimate(float(arr[0]), float(_clean(lo)[0]), float(_clean(hi)[0]), 1,
                        "estimate with its own 95% interval")
    raise ValueError(f"unknown aggregation {how!r}; use mean, median, iqm or fit")


def _pct(level: float) -> str:
    return f"{100 * level:.0f}%"


def _own_interval_only(test: str, level: float) -> None:
    if test == "fit" and level != LEVEL:
        raise ValueError(f"test 'fit' has only the record's own {_pct(LEVEL)} interval, not a {_pct(level)} one")


def one_sample(values, test: str, lo=None, hi=None, level: float = LEVEL) -> Estimate:
    """A claim against a number: the estimate and interval (95% unless `level` says otherwise) of the
    test that is named (t tests: the mean with a t interval; fit: the record's own interval)."""
    _own_interval_only(test, level)
    if test in ("t", "paired_t", "welch_t"):
        arr = _clean(values)
        if arr.size == 0:
            return Estimate(float("nan"), float("nan"), float("nan"), 0, test)
        return Estimate(float(arr.mean()), *_t_interval(arr, level), arr.size,
                        f"one-sample t, {_pct(level)} CI of the mean")
    if test in VALUE_REFUSED:
        raise ValueError(f"test {test!r} {VALUE_REFUSED[test]}")
    if test == "fit":
        return aggregate(values, "fit", lo, hi)
    if test == "every_seed":
        return _every_seed(np.asarray(values, dtype=float).ravel(), "values")
    raise ValueError(f"unknown test {test!r}; use {', '.join(MIN_N)}")


def _every_seed(x: np.ndarray, what: str) -> Estimate:
    """The mean with the seeds' range as its interval: a verdict of `holds` then means every seed is on
    the claimed side, `not reproduced` that every seed is on the other side. A seed without a value
    fails the gate (its interval is then undefined, so the verdict is never `holds`)."""
    finite = x[np.isfinite(x)]
    if finite.size == 0:
        return Estimate(float("nan"), float("nan"), float("nan"), int(x.size), "every_seed")
    missing = x.size - finite.size
    lo, hi = (float(finite.min()), float(finite.max())) if not missing else (float("nan"), float("nan"))
    return Estimate(float(finite.mean()), lo, hi, int(x.size),
                    f"every seed: the range of the {x.size} seeds' {what} (a gate, not a 95% interval)"
                    + (f"; {missing} seed(s) without a value fail it" if missing else ""))


def effect(method, baseline, test: str, method_lo=None, method_hi=None, base_lo=None, base_hi=None,
           method_items=None, base_items=None, level: float = LEVEL) -> Estimate:
    """Effect of method over baseline (method - baseline) with a 95% interval (or one at `level`).

    paired_t: seeds are paired (same seed, same data) - the difference per seed, t interval.
    welch_t: unpaired, unequal variances.  bootstrap_mean / bootstrap_iqm: stratified bootstrap
    of the difference of means / IQMs.  fit: single estimates with their own intervals; the
    difference's interval is the conservative [lo_m - hi_b, hi_m - lo_b].
    """
    _own_interval_only(test, level)
    m, b = np.asarray(method, dtype=float), np.asarray(baseline, dtype=float)
    pct = _pct(level)
    if test == "cluster_bootstrap":   # method_items / base_items: (seeds, problems), paired by row and column
        if method_items is None or base_items is None:
            raise ValueError("cluster_bootstrap needs per-problem outcomes (the records' <metric>_items lists)")
        mi, bi = np.asarray(method_items, dtype=float), np.asarray(base_items, dtype=float)
        if mi.shape != bi.shape or mi.ndim != 2:
            raise ValueError(f"cluster_bootstrap needs the same seeds and problems for method and baseline, "
                             f"got {mi.shape} and {bi.shape}")
        d = mi - bi
        lo, hi = cluster_bounds(d, level=level)
        return Estimate(float(d.mean()), float(lo[0]), float(hi[0]), d.shape[0],
                        f"seed x problem cluster bootstrap ({d.shape[1]} problems), {pct} t interval of the "
                        "mean difference")
    if test in ("paired_t", "every_seed"):
        if m.shape != b.shape:
            raise ValueError("paired test needs the same seeds for method and baseline")
        if test == "every_seed":
            return _every_seed(m - b, "differences")
        keep = np.isfinite(m) & np.isfinite(b)
        diff = m[keep] - b[keep]
        return Estimate(float(diff.mean()) if diff.size else float("nan"), *_t_interval(diff, level), diff.size,
                        f"paired t, {pct} CI of the mean difference")
    m, b = _clean(m), _clean(b)
    if test == "welch_t":
        lo, hi = welch_bounds(m[None, :], b[None, :], level)
        d = float(m.mean() - b.mean()) if m.size and b.size else float("nan")
        return Estimate(d, float(lo[0]), float(hi[0]), min(m.size, b.size), f"Welch t, {pct} CI of the difference")
    if test in ("bootstrap_mean", "bootstrap_iqm"):
        stat = "mean" if test == "bootstrap_mean" else "iqm"
        d = float(STATS[stat](m) - STATS[stat](b))
        lo, hi = _bootstrap(stat, [m, b], difference=True, level=level)
        name = "mean" if test == "bootstrap_mean" else "IQM"
        return Estimate(d, lo, hi, min(m.size, b.size),
                        f"stratified expanded percentile bootstrap, {pct} CI of the {name} difference")
    if test == "fit":
        em = aggregate(m, "fit", method_lo, method_hi)
        eb = aggregate(b, "fit", base_lo, base_hi)
        return Estimate(em.value - eb.value, em.lo - eb.hi, em.hi - eb.lo, 1,
                        "difference of estimates, interval from their 95% intervals")
    if test == "t":
        raise ValueError("test 't' is for a claim against a number; against a baseline use paired_t or welch_t")
    raise ValueError(f"unknown test {test!r}; use paired_t, welch_t, bootstrap_mean, bootstrap_iqm or fit")


# ----------------------------------------------------------------------------- seeds needed
SEEDS_CAP = 64   # beyond this a tiny-scale claim is not worth more seeds: say "more than 64"


def projected_half_width(half: float, n: int, k, level: float = LEVEL) -> np.ndarray:
    """The half-width a 95% interval of `half` at n seeds would have at k seeds (and `level`), at the
    same spread: a t interval's half-width is t_{k-1} s / sqrt(k). For the bootstraps this is the
    t approximation of their width, which is what an expanded percentile interval is built to match."""
    spread = half * np.sqrt(n) / sps.t.ppf(0.5 + LEVEL / 2, n - 1)
    k = np.asarray(k, dtype=float)
    return sps.t.ppf(0.5 + level / 2, k - 1) * spread / np.sqrt(k)


def seeds_needed(half: float, n: int, fits, level: float = LEVEL, cap: int = SEEDS_CAP) -> int | None:
    """The fewest seeds k (n < k <= cap) at which the interval, at the observed effect and spread,
    would satisfy `fits(half_width)`; None when even `cap` seeds would not."""
    if n < 2 or not np.isfinite(half):
        return None
    ks = np.arange(n + 1, cap + 1)
    if ks.size == 0:
        return None
    ok = np.nonzero([fits(h) for h in projected_half_width(half, n, ks, level)])[0]
    return int(ks[ok[0]]) if ok.size else None
