"""The records: KL per sweep point with its grid-error bar, rates from them (power-law fits, the
eps-exponent, the d sweep) and the path-KL upper bounds of the two analyses (the prior one's
Girsanov term for EI-SDE, the chain-rule bound of steps read as ODE step + noising, for EI-SDE and
the noising scheme)."""
from __future__ import annotations

import math

import numpy as np

from . import samplers
from .targets import Mixture, sigma2


# ----------------------------------------------------------------------------- power-law fits
def power_fit(x, y, y_coarse=None) -> dict:
    """Least-squares slope of log y on log x with a 95% interval.

    The interval is the t interval of the regression slope (its residuals measure how far the
    points are from a pure power law, i.e. pre-asymptotic curvature; the numbers themselves are
    deterministic) widened by the grid sensitivity |slope - slope on the coarse grid| when the
    same points were also computed on a coarser grid.
    """
    from scipy import stats

    lx, ly = np.log(np.asarray(x, float)), np.log(np.asarray(y, float))
    n = len(lx)
    if n < 2:
        return {"slope": float("nan"), "slope_lo": float("nan"), "slope_hi": float("nan"), "n_points": n}
    slope, intercept = np.polyfit(lx, ly, 1)
    half = float("nan")
    if n > 2:
        resid = ly - (slope * lx + intercept)
        se = np.sqrt(resid @ resid / (n - 2) / np.sum((lx - lx.mean()) ** 2))
        half = stats.t.ppf(0.975, n - 2) * se
    if y_coarse is not None:
        half += abs(slope - np.polyfit(lx, np.log(np.asarray(y_coarse, float)), 1)[0])
    return {"slope": float(slope), "slope_lo": float(slope - half), "slope_hi": float(slope + half),
            "n_points": n}


def eps_exponent(fit: dict, prefix: str = "eps_exponent") -> dict:
    """KL = C N^slope and KL = eps^2  =>  N*(eps) = (eps^2 / C)^(1/slope) ∝ eps^(-2/slope).

    The exponent e = -2/slope is increasing in slope for slope < 0, so the slope interval maps to
    [ -2/slope_lo, -2/slope_hi ]; an interval reaching slope >= 0 means no decay: e = +inf.
    """
    def exponent(s):
        return -2.0 / s if s < 0 else float("inf")

    return {prefix: exponent(fit["slope"]), f"{prefix}_lo": exponent(fit["slope_lo"]),
            f"{prefix}_hi": exponent(fit["slope_hi"])}


# ----------------------------------------------------------------------------- records per sweep
KL_KEYS = ("kl_fwd", "kl_fwd_lo", "kl_fwd_hi", "kl_rev", "kl_rev_lo", "kl_rev_hi")
POINT_KEYS = ("sweep", "dataset", "T", "kappa", "delta", "c")


def kl_rows(points: list[dict], kls: dict[str, tuple[float, float]]) -> list[dict]:
    """One row per sweep point: KL(p_delta || q_N) and KL(q_N || p_delta) on the fine grid, with the
    coarse grid's difference as an error bar: lo/hi = KL_fine -/+ |KL_fine - KL_coarse|
    (conservative: the error of KL_fine is ~|difference| / (2^p - 1) for a scheme of order p >= 1).

    `points` are train's summaries (one per point and grid, with the law's key, N and status);
    `kls` maps the key of every law that was propagated to its (forward, reverse) KL."""
    by_point: dict[tuple, dict] = {}
    for p in points:
        row = by_point.setdefault(tuple(p[k] for k in POINT_KEYS),
                                  {"sweep": p["sweep"], "dataset": p["dataset"], "T": p["T"],
                                   "kappa": p["kappa"], "delta": p["delta"], "N": p["N"],
                                   **({"c": p["c"]} if p["c"] is not None else {}),
                                   "status": "ok", "grid_n": None, "_by_n": {}})
        if p["status"] != "ok":
            row["status"] = p["status"]
            continue
        row["_by_n"][p["n"]] = kls[p["key"]]
    rows = []
    for row in by_point.values():
        values = row.pop("_by_n")
        if row["status"] != "ok" or not values:  # a point skipped on any grid has no KL
            rows.append({**row, **{k: float("nan") for k in KL_KEYS}})
            continue
        fine = max(values)
        row["grid_n"] = fine
        fwd, rev = values[fine]
        coarse = values.get(min(values), values[fine])
        row.update(_with_error("kl_fwd", fwd, coarse[0]))
        row.update(_with_error("kl_rev", rev, coarse[1]))
        rows.append(row)
    return rows


def _with_error(name: str, fine: float, coarse: float) -> dict:
    err = abs(fine - coarse)
    return {name: fine, f"{name}_lo": max(fine - err, 0.0), f"{name}_hi": fine + err, f"{name}_coarse": coarse}


def sweep_records(sweeps: dict, rows: list[dict], method: str, seed: int) -> list[dict]:
    """The records of every sweep, in the config's order: its points, then its fit where asked."""
    records = []
    for name, sweep in sweeps.items():
        mine = [r for r in rows if r["sweep"] == name]
        if not mine:
            continue
        if "dims" in sweep:  # the dimension sweep: one 1-D law, extended in closed form
            records += d_sweep(mine, name, sweep["dims"], method, seed)
            continue
        records += [{"seed": seed, **r} for r in mine]
        if sweep.get("fit"):
            records.append(rate_fit(mine, name, seed))
    return records


def _ok(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r["status"] == "ok" and math.isfinite(r["kl_fwd"])]


def rate_fit(rows: list[dict], name: str, seed: int) -> dict:
    """Slope of KL versus N (both directions) and the eps-exponent of N*(eps) = N at KL = eps^2."""
    ok = sorted(_ok(rows), key=lambda r: r["N"])
    n_steps = [r["N"] for r in ok]
    fwd = power_fit(n_steps, [r["kl_fwd"] for r in ok], [r["kl_fwd_coarse"] for r in ok])
    rev = power_fit(n_steps, [r["kl_rev"] for r in ok], [r["kl_rev_coarse"] for r in ok])
    return {"seed": seed, "sweep": f"{name}_fit", "dataset": rows[0]["dataset"], "delta": rows[0]["delta"],
            "skipped_points": len(rows) - len(ok),
            **fwd, **eps_exponent(fwd),
            "slope_rev": rev["slope"], "slope_rev_lo": rev["slope_lo"], "slope_rev_hi": rev["slope_hi"],
            **eps_exponent(rev, "eps_exponent_rev")}


def d_sweep(rows: list[dict], name: str, dims: list[int], method: str, seed: int) -> list[dict]:
    """KL in dimension d for p_data = (1-D mixture along e_1) x (atom at 0 in the other d-1
    coordinates). With exact scores every scheme acts coordinate-wise, so (card §6.3)
        KL_d(N) = KL_mixture(N) + (d - 1) KL_gauss(N),
    KL_gauss in closed form. Linear in d by construction for this family: a consistency check
    of "at most linear in d", not a tight d-exponent (the 2-D triangle target is non-product)."""
    (row,) = rows
    if row["status"] != "ok":
        return [{"seed": seed, "sweep": name, "d": int(d), "status": row["status"], "kl_fwd": float("nan")}
                for d in dims]
    times = samplers.time_grid(row["T"], row["delta"], row["kappa"])
    gauss_fwd, gauss_rev = samplers.gaussian_coordinate_kl(method, times, row.get("c", 0.0) or 0.0)
    records = []
    for d in dims:
        extra_fwd, extra_rev = (d - 1) * gauss_fwd, (d - 1) * gauss_rev
        records.append({"seed": seed, "sweep": name, "d": int(d), "N": row["N"], "kappa": row["kappa"],
                        "delta": row["delta"], "status": "ok",
                        "kl_fwd": row["kl_fwd"] + extra_fwd, "kl_fwd_lo": row["kl_fwd_lo"] + extra_fwd,
                        "kl_fwd_hi": row["kl_fwd_hi"] + extra_fwd, "kl_fwd_coarse": row["kl_fwd_coarse"] + extra_fwd,
                        "kl_rev": row["kl_rev"] + extra_rev, "kl_per_d": (row["kl_fwd"] + extra_fwd) / d,
                        "kl_gauss": gauss_fwd, "kl_mixture": row["kl_fwd"]})
    fit = power_fit([r["d"] for r in records], [r["kl_fwd"] for r in records],
                    [r["kl_fwd_coarse"] for r in records])
    records.append({"seed": seed, "sweep": f"{name}_fit", "N": row["N"], "d_exponent": fit["slope"],
                    "d_exponent_lo": fit["slope_lo"], "d_exponent_hi": fit["slope_hi"]})
    return records


# ----------------------------------------------------------------------------- path-KL bounds
# Each analysis bounds KL(p_delta || q_N) by the KL between the laws of two whole paths (data
# processing: the marginal at t = delta is a function of the path), and the power of N at which its
# bound falls is the power of 1/eps in its step count. With exact scores both path KLs are computed:
#   Girsanov term (the prior analysis, Benton et al.), EI-SDE, Monte Carlo  -> bound ~ 1/N   -> N ~ 1/eps^2
#   chain rule over steps read as an ODE step + forward noising (our reading of the refined analysis),
#       for the noising scheme AND for EI-SDE (its step is such a step)     -> bound ~ 1/N^2 -> N ~ 1/eps
# On EI-SDE the two differ only in the analysis, not the scheme (audit 16, finding 1).
def girsanov_term(target: Mixture, times: np.ndarray, samples: int, nodes: int,
                  rng: np.random.Generator) -> tuple[float, float]:
    """Monte-Carlo estimate (and standard error) of the discretisation term of the Girsanov bound

        G = sum_k  int_{t_{k+1}}^{t_k}  E | s(t_k, X_{t_k}) - s(t, X_t) |^2  dt

    for EI-SDE with exact scores (card §6.2). With the drift 2 s and noise sqrt(2) of the reverse
    SDE, Girsanov gives KL(path of the exact reverse process || path of EI-SDE) = G exactly, which
    is the quantity the prior analysis bounds; it decays like 1/N because X_{t_k} - X_t contains a
    Brownian increment of size sqrt(h), while the marginal KL decays like 1/N^2.

    Each step's integral uses `nodes`-point Gauss-Legendre quadrature; at each node t, X_t is
    drawn exactly from p_t and X_{t_k} from the forward transition X_t -> X_{t_k} (the joint law
    of the forward process), with `samples` fresh draws per node.
    """
    unit_nodes, unit_weights = np.polynomial.legendre.leggauss(nodes)
    total, variance = 0.0, 0.0
    for t_k, t_next in zip(times[:-1], times[1:]):
        h = t_k - t_next
        for u, w in zip(unit_nodes, unit_weights):
            t = t_next + 0.5 * h * (u + 1.0)
            x_t = target.sample(t, samples, rng)
            lag = t_k - t
            x_k = np.exp(-lag) * x_t + np.sqrt(sigma2(lag)) * rng.standard_normal(x_t.shape)
            diff = target.score(t_k, x_k) - target.score(t, x_t)
            sq = np.sum(diff * diff, axis=1)
            weight = 0.5 * h * w
            total += weight * sq.mean()
            variance += weight**2 * sq.var(ddof=1) / samples
    return float(total), float(np.sqrt(variance))


def noising_overshoot(step: samplers.Step, t_next: float) -> float:
    """The overshoot eta of the ODE + noising reading of one Gaussian step (a y + b s) + sqrt(v) xi.

    Forward OU noising for a time eta adds variance 1 - e^{-2 eta}, so a step whose noise variance v
    is below 1 reads as an ODE step from t_k to t_{k+1} - eta followed by noising for eta, with
    eta = -log(1 - v) / 2: for the noising scheme eta = c h (by construction), for EI-SDE
    1 - e^{-2 eta} = e^{2h} - 1, i.e. eta = h + O(h^2) (it is close to c = 1). Raises ValueError
    when the step has no such reading (v >= 1, or the ODE step would pass t = 0)."""
    if not 0.0 < step.var < 1.0:
        raise ValueError(f"no ODE + noising reading of a step with noise variance {step.var:.3g} (needs 0 < v < 1)")
    eta = -0.5 * np.log1p(-step.var)
    if t_next - eta <= 0:
        raise ValueError(f"no ODE + noising reading: the ODE step would pass t = 0 "
                         f"(t_(k+1) - eta = {t_next - eta:.3g})")
    return float(eta)


def chain_rule_path_kl(target: Mixture, times: np.ndarray, scheme: str, c: float, axis: np.ndarray) -> float:
    """Chain-rule KL between the path of the exact ODE + noising chain and the path of a sampler whose
    steps read as an ODE step followed by forward noising (1-D, exact scores).

    Each step (a y + b s) + sqrt(v) xi of `scheme` is read as an ODE step that overshoots to
    t' = t_{k+1} - eta, then forward OU noising for eta with 1 - e^{-2 eta} = v (noising_overshoot:
    the noising scheme of card §2.3 by construction, EI-SDE with eta = h + O(h^2)):
        sampler:  Y_{k+1} = e^{-eta} F(Y_k) + sqrt(1 - e^{-2 eta}) xi,   e^{-eta} F(y) = a y + b s(t_k, y)
        exact:    X_{k+1} = e^{-eta} Phi(X_k) + sqrt(1 - e^{-2 eta}) xi,  Phi the exact flow t_k -> t'
    The exact chain started from p_T has the marginals p_{t_k} (the flow carries p_{t_k} to p_{t'},
    the noising p_{t'} to p_{t_{k+1}}), so it ends at p_delta, and both transition kernels are
    Gaussian with the same variance. By the chain rule of KL (the card's gloss: Gaussian noising turns
    the ODE step's Wasserstein-type error into KL),
        KL(path exact || path sampler) = sum_k E_{x ~ p_{t_k}} |e^{-eta} Phi(x) - (a x + b s)|^2 / (2 v),
    an upper bound of KL(p_delta || q_N). The same bound applies to EI-SDE (its step is the ODE step
    plus noising with eta = h + O(h^2)), so comparing it with EI-SDE's Girsanov term compares two
    analyses of one scheme. Each expectation is a quadrature on the uniform points `axis` (weights
    p_{t_k} normalised on them; points below e^-40 of the peak density are left out), which resolves
    both the narrow p_t near delta and the sharp switch of the score between atoms (a Gauss-Hermite
    rule per component does not); Phi is exact (Mixture.flow_map). Infinite without noise (c = 0).
    """
    if target.dim != 1:
        raise ValueError("chain_rule_path_kl: 1-D targets only (the exact flow is the monotone rearrangement)")
    if scheme == "ei_ode" or (scheme == "ei_ode_noise" and c <= 0):
        return float("inf")
    axis = np.asarray(axis, float)
    total = 0.0
    for t_k, t_next in zip(times[:-1], times[1:]):
        step = samplers.step_coefficients(scheme, t_k, t_next, c)  # mean a y + b s = e^{-eta} F(y)
        eta = noising_overshoot(step, t_next)
        log_p = target.log_p(t_k, axis[:, None])
        keep = log_p > log_p.max() - 40.0
        y, weight = axis[keep], np.exp(log_p[keep] - log_p.max())
        mean = step.a * y + step.b * target.score(t_k, y[:, None])[:, 0]
        exact = target.flow_map(t_k, t_next - eta, y, x0=mean * np.exp(eta))  # start Newton at F(y)
        total += float(np.sum(weight * (np.exp(-eta) * exact - mean) ** 2) / weight.sum() / (2.0 * step.var))
    return total


BOUNDS = {"girsanov": ("ei_sde",), "chain_rule": ("ei_sde", "ei_ode_noise")}


def path_kl_records(target: Mixture, pcfg: dict, method: str, bound: str, seeds, c: float, axes=(),
                    log=None) -> list[dict]:
    """The path-KL bound `bound` of `method` at every step size of `pcfg` (records of sweep 'path_kl', tagged
    with `bound`), and its power-law fit in N with the eps-exponent of the step count it certifies (sweep
    'path_kl_fit').

    girsanov (ei_sde only): the Monte-Carlo Girsanov term, one record per seed and step size and one slope
    per seed (sweep 'path_kl_fit_seed'); the fit is of the seed means (one point per step size, so the
    regression's degrees of freedom are the step sizes', not seeds x step sizes), and records the sd of the
    per-seed slopes. chain_rule (ei_sde, ei_ode_noise): deterministic (quadrature on the points `axes[0]`),
    one record per step size tagged with the first seed; computed again on the coarser `axes[1]` when
    given, the difference is its error bar (path_kl_lo/hi) and widens the slope interval, as for the KL.
    A step size at which the scheme has no ODE + noising reading is recorded with status 'undefined'
    and left out of the fit."""
    if method not in BOUNDS.get(bound, ()):
        raise ValueError(f"no path-KL bound {bound!r} for {method!r}: "
                         + "; ".join(f"{b}: {', '.join(m)}" for b, m in BOUNDS.items()))
    records = []
    base = {"sweep": "path_kl", "bound": bound, "delta": pcfg["delta"], "T": pcfg["T"]}
    if bound == "girsanov":
        per_seed = {}
        for seed in seeds:
            mine = []
            for i, kappa in enumerate(pcfg["kappas"]):
                times = samplers.time_grid(pcfg["T"], pcfg["delta"], kappa)
                rng = np.random.default_rng([int(seed), i])  # one independent stream per (seed, kappa)
                value, se = girsanov_term(target, times, pcfg["samples"], pcfg["nodes"], rng)
                records.append({"seed": int(seed), **base, "kappa": kappa, "N": len(times) - 1,
                                "path_kl": value, "path_kl_se": se})
                mine.append((len(times) - 1, value))
                if log:
                    log(f"girsanov seed={seed} N={len(times) - 1}: {value:.4g} ± {se:.2g}")
            per_seed[int(seed)] = power_fit(*zip(*mine))["slope"]
            records.append({"seed": int(seed), "sweep": "path_kl_fit_seed", "bound": bound,
                            "slope": per_seed[int(seed)]})
        n_steps = [n for n, _ in mine]
        means = [float(np.mean([r["path_kl"] for r in records if r.get("N") == n and r["sweep"] == "path_kl"]))
                 for n in n_steps]
        fit = power_fit(n_steps, means)
        slopes = list(per_seed.values())
        records.append({"seed": int(seeds[0]), "sweep": "path_kl_fit", "bound": bound, "delta": pcfg["delta"],
                        "n_seeds": len(seeds), "slope_seed_sd": float(np.std(slopes, ddof=1)) if len(slopes) > 1
                        else float("nan"), **fit, **eps_exponent(fit)})
        return records
    if not axes:
        raise ValueError("the chain-rule path KL needs the quadrature points (axes)")
    points, coarse = [], []
    for kappa in pcfg["kappas"]:
        times = samplers.time_grid(pcfg["T"], pcfg["delta"], kappa)
        point = {"seed": int(seeds[0]), **base, "kappa": kappa, "N": len(times) - 1, "grid_n": len(axes[0]),
                 **({"c": c} if method == "ei_ode_noise" else {})}
        try:
            values = [chain_rule_path_kl(target, times, method, c, axis) for axis in axes]
        except ValueError as err:
            records.append({**point, "status": "undefined", "path_kl": float("nan")})
            if log:
                log(f"chain-rule path KL {method} N={len(times) - 1}: undefined ({err})")
            continue
        fine, rough = values[0], values[-1]
        records.append({**point, "status": "ok", **_with_error("path_kl", fine, rough)})
        points.append((len(times) - 1, fine))
        coarse.append(rough)
        if log:
            log(f"chain-rule path KL {method} N={len(times) - 1}: {fine:.4g} (coarse grid {rough:.4g})")
    fit = power_fit([n for n, _ in points], [v for _, v in points], coarse)
    records.append({"seed": int(seeds[0]), "sweep": "path_kl_fit", "bound": bound, "delta": pcfg["delta"],
                    "skipped_points": len(pcfg["kappas"]) - len(points), **fit, **eps_exponent(fit)})
    return records
