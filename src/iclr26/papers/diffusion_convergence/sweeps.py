"""The experiment's design, read from the config, and the propagation of one sampler law.

A *sweep point* is one setting of (dataset, T, kappa, delta, c) named by its sweep; every point is
propagated on a fine grid of n points and on a coarse one of n / refine points (the difference is
the grid-error bar). A *law* is one propagation, named by `law_key`: sweeps that share a setting
(e.g. the delta sweep's delta = 1e-3 and the d sweep) share its law.
"""
from __future__ import annotations

import numpy as np

from . import samplers, transport
from .targets import Mixture

NOISY = "ei_ode_noise"  # the only scheme whose law depends on the noise fraction c


# ----------------------------------------------------------------------------- grids
def grid_sizes(cfg: dict, dataset: str) -> list[int]:
    """The fine grid and the coarse one (n / refine) whose difference is the grid-error bar."""
    n = int(cfg["data"][dataset]["grid"]["n"])
    refine = int(cfg["train"]["refine"])
    return [n, n // refine] if refine > 1 else [n]


def make_grid(cfg: dict, dataset: str, n: int, dim: int) -> transport.Grid:
    bounds = cfg["data"][dataset]["grid"]
    return transport.Grid(float(bounds["lo"]), float(bounds["hi"]), int(n), dim)


def deltas_used(cfg: dict, dataset: str) -> list[float]:
    """Every early-stopping time a sweep on this dataset asks for, largest first."""
    found = set()
    for sweep in cfg["train"]["sweeps"].values():
        if sweep.get("enabled", True) and sweep["dataset"] == dataset:
            found.update(float(d) for d in sweep.get("deltas", [sweep.get("delta")]) if d is not None)
    return sorted(found, reverse=True)


def exact_log_p(target: Mixture, grid: transport.Grid, deltas: list[float]) -> np.ndarray:
    """log p_delta on the grid for every delta, each normalised on the grid: shape (len(deltas), *grid)."""
    if not deltas:
        return np.zeros((0, *grid.shape))
    points = grid.points()
    return np.stack([transport.normalise(target.log_p(d, points).reshape(grid.shape), grid) for d in deltas])


# ----------------------------------------------------------------------------- sweep points
def sweep_points(cfg: dict, method: str) -> list[dict]:
    """Every (sweep, setting) of this scheme, as flat dicts. A sweep may list `methods`."""
    points = []
    default_c = float(cfg["train"]["c"])
    for name, sweep in cfg["train"]["sweeps"].items():
        if not sweep.get("enabled", True) or method not in sweep.get("methods", samplers.SCHEMES):
            continue
        base = {"sweep": name, "dataset": sweep["dataset"], "T": float(sweep["T"])}
        for kappa in sweep.get("kappas", [sweep.get("kappa")]):
            for delta in sweep.get("deltas", [sweep.get("delta")]):
                for c in sweep.get("cs", [default_c]):
                    points.append({**base, "kappa": float(kappa), "delta": float(delta),
                                   "c": float(c) if method == NOISY else None})
    return points


def law_key(method: str, point: dict, n: int) -> str:
    """The name of one propagated law: everything it depends on within a job (the job's config and
    code are tied to its saved laws by job.units), e.g. atoms_1d_ei_ode_noise_T8.0_k0.1_d0.001_c0.5_n8192."""
    c = "" if point["c"] is None else f"_c{point['c']!r}"  # repr: the shortest text that is unique
    return f"{point['dataset']}_{method}_T{point['T']!r}_k{point['kappa']!r}_d{point['delta']!r}{c}_n{n}"


# ----------------------------------------------------------------------------- one law
def propagate_law(cfg: dict, target: Mixture, method: str, point: dict, n: int, log) -> tuple[np.ndarray | None, dict]:
    """The exact law of this scheme's output at one sweep point on the grid of n points.

    Returns (log q_N, summary); a step whose map is not monotone makes the point 'skipped'
    (log q_N is then None; logged and recorded, not an error)."""
    times = samplers.time_grid(point["T"], point["delta"], point["kappa"])
    grid = make_grid(cfg, point["dataset"], n, target.dim)
    iters = int(cfg["train"]["newton_iters"][f"dim{target.dim}"])
    step_list = samplers.steps(method, times, point["c"] if point["c"] is not None else 0.0)
    try:
        log_q, residual = transport.propagate(target, step_list, times, grid, iters, log=log)
        status = "ok"
    except transport.NonMonotone as err:
        log(f"WARNING: skipped {method} kappa={point['kappa']} delta={point['delta']} n={n}: "
            f"transport map not monotone at {err}")
        log_q, residual, status = None, None, "skipped_nonmonotone"
    log(f"{point['sweep']}: kappa={point['kappa']} delta={point['delta']} c={point['c']} "
        f"N={len(times) - 1} n={n}: {status}")
    return log_q, {"N": len(times) - 1, "status": status, "residual": residual}
