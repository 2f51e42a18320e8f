"""Statistics over seeds: point estimates with 95% intervals, and effects between two methods.

Conventions follow the RL/ML reporting literature: the mean with a Student-t interval for a
handful of seeds, the interquartile mean (IQM) with a percentile bootstrap (Agarwal et al. 2021),
and effects as differences (method - baseline) with an interval from the paired t test, Welch's
t test, or a bootstrap. Bootstrap resampling uses a fixed seed, so tables are reproducible.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

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


def _t_interval(arr: np.ndarray) -> tuple[float, float]:
    if arr.size < 2:
        return float("nan"), float("nan")
    half = sps.t.ppf(0.5 + LEVEL / 2, arr.size - 1) * arr.std(ddof=1) / np.sqrt(arr.size)
    return float(arr.mean() - half), float(arr.mean() + half)


STATS = {"mean": np.mean, "median": np.median, "iqm": iqm}


def _bootstrap(stat: str, samples: list[np.ndarray], difference: bool = False) -> tuple[float, float]:
    """Percentile bootstrap of stat(sample) (or of stat(a) - stat(b)), resampling each sample
    independently (stratified); all resamples are drawn at once and reduced along an axis."""
    if any(s.size < 2 for s in samples):
        return float("nan"), float("nan")
    rng = np.random.default_rng(BOOT_SEED)
    fn = STATS[stat]
    draws = [fn(s[rng.integers(0, s.size, (N_BOOT, s.size))], axis=1) for s in samples]
    values = draws[0] - draws[1] if difference else draws[0]
    alpha = (1 - LEVEL) / 2
    return float(np.quantile(values, alpha)), float(np.quantile(values, 1 - alpha))


def aggregate(values, how: str = "mean", lo=None, hi=None) -> Estimate:
    """One table cell: `how` in mean | median | iqm | fit (a single value with its own interval)."""
    arr = _clean(values)
    if arr.size == 0:
        return Estimate(float("nan"), float("nan"), float("nan"), 0, how)
    if how == "mean":
        return Estimate(float(arr.mean()), *_t_interval(arr), arr.size, "mean, t 95% CI")
    if how == "median":
        return Estimate(float(np.median(arr)), *_bootstrap("median", [arr]), arr.size, "median, bootstrap 95% CI")
    if how == "iqm":
        return Estimate(iqm(arr), *_bootstrap("iqm", [arr]), arr.size, "IQM, bootstrap 95% CI")
    if how == "fit":
        if arr.size != 1:
            raise ValueError(f"agg 'fit' expects one value, got {arr.size}")
        lo_v = float(_clean(lo)[0]) if lo is not None and _clean(lo).size else float(arr[0])
        hi_v = float(_clean(hi)[0]) if hi is not None and _clean(hi).size else float(arr[0])
        return Estimate(float(arr[0]), lo_v, hi_v, 1, "estimate with its own 95% interval")
    raise ValueError(f"unknown aggregation {how!r}; use mean, median, iqm or fit")


def effect(method, baseline, test: str, method_lo=None, method_hi=None, base_lo=None, base_hi=None) -> Estimate:
    """Effect of method over baseline (method - baseline) with a 95% interval.

    paired_t: seeds are paired (same seed, same data) - the difference per seed, t interval.
    welch_t: unpaired, unequal variances.  bootstrap_mean / bootstrap_iqm: stratified bootstrap
    of the difference of means / IQMs.  fit: single estimates with their own intervals; the
    difference's interval is the conservative [lo_m - hi_b, hi_m - lo_b].
    """
    m, b = np.asarray(method, dtype=float), np.asarray(baseline, dtype=float)
    if test == "paired_t":
        if m.shape != b.shape:
            raise ValueError("paired test needs the same seeds for method and baseline")
        keep = np.isfinite(m) & np.isfinite(b)
        diff = m[keep] - b[keep]
        return Estimate(float(diff.mean()) if diff.size else float("nan"), *_t_interval(diff), diff.size,
                        "paired t, 95% CI of the mean difference")
    m, b = _clean(m), _clean(b)
    if test == "welch_t":
        if m.size < 2 or b.size < 2:
            return Estimate(float(m.mean() - b.mean()), float("nan"), float("nan"), min(m.size, b.size), "welch t")
        vm, vb = m.var(ddof=1) / m.size, b.var(ddof=1) / b.size
        dof = (vm + vb) ** 2 / (vm**2 / (m.size - 1) + vb**2 / (b.size - 1)) if vm + vb > 0 else 1.0
        half = sps.t.ppf(0.5 + LEVEL / 2, dof) * np.sqrt(vm + vb)
        d = float(m.mean() - b.mean())
        return Estimate(d, d - half, d + half, min(m.size, b.size), "Welch t, 95% CI of the difference")
    if test in ("bootstrap_mean", "bootstrap_iqm"):
        stat = "mean" if test == "bootstrap_mean" else "iqm"
        d = float(STATS[stat](m) - STATS[stat](b))
        lo, hi = _bootstrap(stat, [m, b], difference=True)
        name = "mean" if test == "bootstrap_mean" else "IQM"
        return Estimate(d, lo, hi, min(m.size, b.size), f"stratified bootstrap, 95% CI of the {name} difference")
    if test == "fit":
        em = aggregate(m, "fit", method_lo, method_hi)
        eb = aggregate(b, "fit", base_lo, base_hi)
        return Estimate(em.value - eb.value, em.lo - eb.hi, em.hi - eb.lo, 1,
                        "difference of estimates, interval from their 95% intervals")
    raise ValueError(f"unknown test {test!r}; use paired_t, welch_t, bootstrap_mean, bootstrap_iqm or fit")
