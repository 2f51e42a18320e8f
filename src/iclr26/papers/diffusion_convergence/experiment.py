"""Stage functions of diffusion_convergence (arXiv 2508.16306): exact-score KL rates of EI samplers.

The paper is a theory paper (card 16): N = O~(d log^{3/2}(1/delta) / eps) steps of an Exponential-
Integrator sampler built from a reverse-ODE step plus a smaller noising step reach KL = O(eps^2)
to p_delta, against O~(d log^2(1/delta) / eps^2) for EI-SDE in the prior analysis. We measure the
rates directly (card §6): closed-form targets and scores, the sampler's law propagated exactly
on a grid, KL to the exact p_delta.

    acquire   the target law (atoms, weights) from the config            -> target.json
    prepare   the grids and the exact log p_delta on them                 -> grid_n<n>.npz
    train     the law of Y_N for every sweep point of this scheme, on the
              fine grid and on a coarser one (grid-error bar)             -> laws/<key>.npz, points.json
    evaluate  KL both ways, power-law fits, d sweep (closed-form Gaussian
              coordinates), Monte-Carlo Girsanov term (EI-SDE only)       -> records
Every quantity except the Girsanov term is deterministic: one record per job, tagged with the
job's first seed; the Girsanov term is Monte Carlo: one record per seed.
"""
from __future__ import annotations

import hashlib
import json
import math
import time
from pathlib import Path

import numpy as np

from iclr26.core.io import atomic_path, read_json, write_json

from . import analysis, samplers, transport
from .targets import Mixture, triangle_spec

NOISY = "ei_ode_noise"  # the only scheme whose law depends on the noise fraction c


# ============================================================================= acquire
def target_spec(dcfg: dict) -> dict:
    """The target law as data. 'mixture': atoms/weights/widths as given (tiny: the card's 1-D
    Dirac mixture w = (0.3, 0.7), mu = (-1, 1.5)); 'triangle': three atoms on a triangle (2-D)."""
    if dcfg["kind"] == "mixture":
        spec = {"atoms": dcfg["atoms"], "weights": dcfg["weights"], "widths": dcfg.get("widths")}
    elif dcfg["kind"] == "triangle":
        spec = triangle_spec(dcfg["radius"], tuple(dcfg["weights"]))
    else:
        raise ValueError(f"data kind {dcfg['kind']!r}: expected 'mixture' or 'triangle'")
    target = Mixture.from_spec(spec)  # validates
    return {"atoms": target.means.tolist(), "weights": target.weights.tolist(),
            "widths": target.widths.tolist(), "dim": target.dim}


def acquire(job) -> dict:
    spec = target_spec(job.cfg["data"][job.dataset])
    write_json(job.out_dir / "target.json", spec)
    return {"dim": spec["dim"], "atoms": len(spec["weights"])}


def load_target(path: Path) -> Mixture:
    return Mixture.from_spec(read_json(path / "target.json"))


# ============================================================================= prepare
def grid_sizes(cfg: dict, dataset: str) -> list[int]:
    """The fine grid and the coarse one (n / refine) whose difference is the grid-error bar."""
    n = int(cfg["data"][dataset]["grid"]["n"])
    refine = int(cfg["train"]["refine"])
    return [n, n // refine] if refine > 1 else [n]


def make_grid(cfg: dict, dataset: str, n: int, dim: int) -> transport.Grid:
    g = cfg["data"][dataset]["grid"]
    return transport.Grid(float(g["lo"]), float(g["hi"]), int(n), dim)


def deltas_used(cfg: dict, dataset: str) -> list[float]:
    found = set()
    for sweep in cfg["train"]["sweeps"].values():
        if sweep.get("enabled", True) and sweep["dataset"] == dataset:
            found.update(float(d) for d in sweep.get("deltas", [sweep.get("delta")]) if d is not None)
    return sorted(found, reverse=True)


def prepare(job) -> dict:
    target = load_target(job.raw_dir())
    deltas = deltas_used(job.cfg, job.dataset)
    for n in grid_sizes(job.cfg, job.dataset):
        grid = make_grid(job.cfg, job.dataset, n, target.dim)
        points = grid.points()
        log_p = np.stack([transport.normalise(target.log_p(d, points).reshape(grid.shape), grid) for d in deltas]) \
            if deltas else np.zeros((0, *grid.shape))
        _save_npz(job.out_dir / f"grid_n{n}.npz", log_p=log_p, deltas=np.array(deltas),
                  lo=grid.lo, hi=grid.hi, n=grid.n, dim=grid.dim)
    return {"deltas": deltas, "grids": grid_sizes(job.cfg, job.dataset), "dim": target.dim}


def load_grid(path: Path) -> tuple[transport.Grid, dict]:
    with np.load(path) as f:
        grid = transport.Grid(float(f["lo"]), float(f["hi"]), int(f["n"]), int(f["dim"]))
        log_p = {float(d): f["log_p"][i] for i, d in enumerate(f["deltas"])}
    return grid, log_p


def _save_npz(path: Path, **arrays) -> None:
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as handle:  # a handle: np.savez would append .npz to a bare name
            np.savez(handle, **arrays)


# ============================================================================= sweep points
def sweep_points(cfg: dict, method: str) -> list[dict]:
    """Every (sweep, setting) of this scheme, as flat dicts. A sweep may list `methods`."""
    points = []
    default_c = float(cfg["train"]["c"])
    for name, sw in cfg["train"]["sweeps"].items():
        if not sw.get("enabled", True) or method not in sw.get("methods", samplers.SCHEMES):
            continue
        base = {"sweep": name, "dataset": sw["dataset"], "T": float(sw["T"])}
        for kappa in sw.get("kappas", [sw.get("kappa")]):
            for delta in sw.get("deltas", [sw.get("delta")]):
                for c in sw.get("cs", [default_c]):
                    points.append({**base, "kappa": float(kappa), "delta": float(delta),
                                   "c": float(c) if method == NOISY else None})
    return points


def law_key(job, method: str, point: dict, n: int) -> str:
    """File name of one propagated law: a readable prefix + a hash of everything the law depends on
    (so that a changed target, grid or solver setting never reuses a stale file on resume)."""
    dataset = point["dataset"]
    spec = {**{k: point[k] for k in ("dataset", "T", "kappa", "delta", "c")}, "method": method, "n": n,
            "target": read_json(job.raw_dir(dataset) / "target.json"), "grid": job.cfg["data"][dataset]["grid"],
            "newton_iters": job.cfg["train"]["newton_iters"]}
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:12]
    return f"{dataset}_{method}_k{point['kappa']:g}_d{point['delta']:g}_n{n}_{digest}"


# ============================================================================= train
def train(job) -> dict:
    """Propagate the exact law of this scheme's output for every sweep point, on every grid.

    A finished point is one file in laws/ (written atomically), so a killed job resumes where it
    stopped. A step whose map is not monotone makes the point 'skipped' (logged, recorded)."""
    cfg, method = job.cfg, job.method
    laws = job.out_dir / "laws"
    summary, seen = [], {}
    started = time.time()
    for point in sweep_points(cfg, method):
        for n in grid_sizes(cfg, point["dataset"]):
            key = law_key(job, method, point, n)
            if key not in seen:
                seen[key] = _law(job, method, point, n, laws / f"{key}.npz")
            summary.append({**point, "n": n, "key": key, **seen[key]})
    write_json(job.out_dir / "points.json", summary)
    skipped = sorted({s["key"] for s in summary if s["status"] != "ok"})
    return {"laws": len(seen), "skipped": len(skipped), "steps": int(sum(s["N"] for s in seen.values())),
            "worst_residual": max((s["residual"] for s in seen.values() if s["status"] == "ok"), default=0.0),
            "seconds": round(time.time() - started, 2)}


def _law(job, method: str, point: dict, n: int, path: Path) -> dict:
    times = samplers.time_grid(point["T"], point["delta"], point["kappa"])
    info = {"N": len(times) - 1}
    if path.exists():  # resume: this point was finished before the job was interrupted
        with np.load(path) as f:
            return {**info, "status": str(f["status"]), "residual": float(f["residual"])}
    target = load_target(job.raw_dir(point["dataset"]))
    grid = make_grid(job.cfg, point["dataset"], n, target.dim)
    iters = int(job.cfg["train"]["newton_iters"][f"dim{target.dim}"])
    step_list = samplers.steps(method, times, point["c"] if point["c"] is not None else 0.0)
    try:
        log_q, residual = transport.propagate(target, step_list, times, grid, iters, log=job.log)
        status = "ok"
    except transport.NonMonotone as err:
        job.log(f"WARNING: skipped {method} kappa={point['kappa']} delta={point['delta']} n={n}: "
                f"transport map not monotone at {err}")
        log_q, residual, status = np.zeros(0), float("nan"), "skipped_nonmonotone"
    _save_npz(path, log_q=log_q, status=status, residual=residual)
    job.log(f"{point['sweep']}: kappa={point['kappa']} delta={point['delta']} c={point['c']} "
            f"N={info['N']} n={n}: {status}")
    return {**info, "status": status, "residual": residual}


# ============================================================================= evaluate
def evaluate(job) -> dict:
    cfg, method, seed = job.cfg, job.method, int(job.seeds[0])
    kls = _kl_table(job)
    records = []
    for name, sw in cfg["train"]["sweeps"].items():
        rows = [r for r in kls if r["sweep"] == name]
        if not rows:
            continue
        if "dims" in sw:  # the dimension sweep: one 1-D law, extended in closed form
            records += _d_sweep(rows, name, sw, method, seed)
            continue
        records += [{"seed": seed, **r} for r in rows]
        if sw.get("fit"):
            records.append(_rate_fit(rows, name, seed))
    gcfg = cfg["eval"].get("girsanov", {})
    if gcfg.get("enabled", False) and method in gcfg["methods"]:
        target = load_target(job.raw_dir(gcfg["dataset"]))
        records += analysis.girsanov_records(target, gcfg, job.seeds, log=job.log)
    return {"records": records}


def _kl_table(job) -> list[dict]:
    """KL(p_delta || q_N) and KL(q_N || p_delta) for every point, fine grid, with the coarse grid's
    difference as an error bar: lo/hi = KL_fine -/+ |KL_fine - KL_coarse| (conservative: the error
    of KL_fine is ~|difference| / (2^p - 1) for a scheme of order p >= 1)."""
    points = read_json(job.out_dir / "points.json")
    grids = {}
    by_point: dict[str, dict] = {}
    for p in points:
        ident = json.dumps({k: p[k] for k in ("sweep", "dataset", "T", "kappa", "delta", "c")}, sort_keys=True)
        if p["dataset"] not in grids:
            grids[p["dataset"]] = {n: load_grid(job.prepared_dir(p["dataset"]) / f"grid_n{n}.npz")
                                   for n in grid_sizes(job.cfg, p["dataset"])}
        row = by_point.setdefault(ident, {"sweep": p["sweep"], "dataset": p["dataset"], "T": p["T"],
                                          "kappa": p["kappa"], "delta": p["delta"], "N": p["N"],
                                          **({"c": p["c"]} if p["c"] is not None else {}),
                                          "status": "ok", "grid_n": None})
        if p["status"] != "ok":
            row["status"] = p["status"]
            continue
        grid, log_p = grids[p["dataset"]][p["n"]]
        with np.load(job.out_dir / "laws" / f"{p['key']}.npz") as f:
            log_q = f["log_q"]
        fwd, rev = transport.kl(log_p[p["delta"]], log_q, grid), transport.kl(log_q, log_p[p["delta"]], grid)
        row.setdefault("_by_n", {})[p["n"]] = (fwd, rev)
    rows = []
    for row in by_point.values():
        values = row.pop("_by_n", {})
        if row["status"] != "ok" or not values:
            rows.append({**row, **{k: float("nan") for k in _KL_KEYS}})
            continue
        fine = max(values)
        row["grid_n"] = fine
        fwd, rev = values[fine]
        coarse = values.get(min(values), values[fine])
        row.update(_with_error("kl_fwd", fwd, coarse[0]))
        row.update(_with_error("kl_rev", rev, coarse[1]))
        rows.append(row)
    return rows


_KL_KEYS = ("kl_fwd", "kl_fwd_lo", "kl_fwd_hi", "kl_rev", "kl_rev_lo", "kl_rev_hi")


def _with_error(name: str, fine: float, coarse: float) -> dict:
    err = abs(fine - coarse)
    return {name: fine, f"{name}_lo": max(fine - err, 0.0), f"{name}_hi": fine + err, f"{name}_coarse": coarse}


def _ok(rows):
    return [r for r in rows if r["status"] == "ok" and math.isfinite(r["kl_fwd"])]


def _rate_fit(rows: list[dict], name: str, seed: int) -> dict:
    """Slope of KL versus N (both directions) and the eps-exponent of N*(eps) = N at KL = eps^2."""
    ok = sorted(_ok(rows), key=lambda r: r["N"])
    n_steps = [r["N"] for r in ok]
    fwd = analysis.power_fit(n_steps, [r["kl_fwd"] for r in ok], [r["kl_fwd_coarse"] for r in ok])
    rev = analysis.power_fit(n_steps, [r["kl_rev"] for r in ok], [r["kl_rev_coarse"] for r in ok])
    return {"seed": seed, "sweep": f"{name}_fit", "dataset": rows[0]["dataset"], "delta": rows[0]["delta"],
            "skipped_points": len(rows) - len(ok),
            **fwd, **analysis.eps_exponent(fwd),
            "slope_rev": rev["slope"], "slope_rev_lo": rev["slope_lo"], "slope_rev_hi": rev["slope_hi"],
            **analysis.eps_exponent(rev, "eps_exponent_rev")}


def _d_sweep(rows: list[dict], name: str, sw: dict, method: str, seed: int) -> list[dict]:
    """KL in dimension d for p_data = (1-D mixture along e_1) x (atom at 0 in the other d-1
    coordinates). With exact scores every scheme acts coordinate-wise, so (card §6.3)
        KL_d(N) = KL_mixture(N) + (d - 1) KL_gauss(N),
    KL_gauss in closed form. Linear in d by construction for this family: a consistency check
    of "at most linear in d", not a tight d-exponent (the 2-D triangle target is non-product)."""
    (row,) = rows
    if row["status"] != "ok":
        return [{"seed": seed, "sweep": name, "d": int(d), "status": row["status"], "kl_fwd": float("nan")}
                for d in sw["dims"]]
    times = samplers.time_grid(row["T"], row["delta"], row["kappa"])
    gauss_fwd, gauss_rev = samplers.gaussian_coordinate_kl(method, times, row.get("c", 0.0) or 0.0)
    records = []
    for d in sw["dims"]:
        extra_fwd, extra_rev = (d - 1) * gauss_fwd, (d - 1) * gauss_rev
        records.append({"seed": seed, "sweep": name, "d": int(d), "N": row["N"], "kappa": row["kappa"],
                        "delta": row["delta"], "status": "ok",
                        "kl_fwd": row["kl_fwd"] + extra_fwd, "kl_fwd_lo": row["kl_fwd_lo"] + extra_fwd,
                        "kl_fwd_hi": row["kl_fwd_hi"] + extra_fwd, "kl_fwd_coarse": row["kl_fwd_coarse"] + extra_fwd,
                        "kl_rev": row["kl_rev"] + extra_rev, "kl_per_d": (row["kl_fwd"] + extra_fwd) / d,
                        "kl_gauss": gauss_fwd, "kl_mixture": row["kl_fwd"]})
    fit = analysis.power_fit([r["d"] for r in records], [r["kl_fwd"] for r in records],
                             [r["kl_fwd_coarse"] for r in records])
    records.append({"seed": seed, "sweep": f"{name}_fit", "N": row["N"], "d_exponent": fit["slope"],
                    "d_exponent_lo": fit["slope_lo"], "d_exponent_hi": fit["slope_hi"]})
    return records


# ============================================================================= figures
def figures(cfg: dict, records, out_dir) -> list[Path]:
    from . import plots

    return plots.make_all(cfg, records, Path(out_dir))
