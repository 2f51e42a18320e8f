"""Stages of diffusion_convergence (arXiv 2508.16306): exact-score KL rates of EI samplers.

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
              coordinates), the path-KL bounds of the two analyses: Monte-
              Carlo Girsanov term (EI-SDE), chain-rule bound of steps read
              as ODE step + noising (EI-SDE and the noising scheme)       -> records
Every quantity except the Girsanov term is deterministic: one record per job, tagged with the
job's first seed; the Girsanov term is Monte Carlo: one record per seed.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from iclr26.core.io import load_arrays, read_json, save_arrays, write_json

from . import analysis, sweeps, transport
from .targets import Mixture, target_spec


def load_target(raw_dir: Path) -> Mixture:
    return Mixture.from_spec(read_json(raw_dir / "target.json"))


def load_grid(path: Path) -> tuple[transport.Grid, dict[float, np.ndarray]]:
    """The grid of a prepared file and its exact log p_delta, keyed by delta."""
    arrays = load_arrays(path)
    grid = transport.Grid(float(arrays["lo"]), float(arrays["hi"]), int(arrays["n"]), int(arrays["dim"]))
    return grid, {float(d): arrays["log_p"][i] for i, d in enumerate(arrays["deltas"])}


def acquire(job) -> dict:
    spec = target_spec(job.cfg["data"][job.dataset])
    write_json(job.out_dir / "target.json", spec)
    return {"dim": spec["dim"], "atoms": len(spec["weights"])}


def prepare(job) -> dict:
    target = load_target(job.raw_dir())
    deltas = sweeps.deltas_used(job.cfg, job.dataset)
    sizes = sweeps.grid_sizes(job.cfg, job.dataset)
    for n in sizes:
        grid = sweeps.make_grid(job.cfg, job.dataset, n, target.dim)
        save_arrays(job.out_dir / f"grid_n{n}.npz", log_p=sweeps.exact_log_p(target, grid, deltas),
                    deltas=np.array(deltas), lo=grid.lo, hi=grid.hi, n=grid.n, dim=grid.dim)
    return {"deltas": deltas, "grids": sizes, "dim": target.dim}


def train(job) -> dict:
    """Propagate the exact law of this scheme's output for every sweep point, on every grid: one
    unit of work per law (a law shared by several sweep points is propagated once)."""
    cfg, method = job.cfg, job.method
    points = [(sweeps.law_key(method, point, n), point, n)
              for point in sweeps.sweep_points(cfg, method) for n in sweeps.grid_sizes(cfg, point["dataset"])]
    laws = {}  # key -> the first (point, n) that needs it
    for key, point, n in points:
        laws.setdefault(key, (point, n))
    targets = {dataset: load_target(job.raw_dir(dataset)) for dataset in {point["dataset"] for _, point, _ in points}}

    def propagate(key: str) -> dict:
        point, n = laws[key]
        log_q, summary = sweeps.propagate_law(cfg, targets[point["dataset"]], method, point, n, job.log)
        if log_q is not None:
            save_arrays(job.out_dir / "laws" / f"{key}.npz", log_q=log_q)
        return summary

    done = job.units(laws, propagate)
    write_json(job.out_dir / "points.json", [{**point, "n": n, "key": key, **done[key]} for key, point, n in points])
    ok = [law for law in done.values() if law["status"] == "ok"]
    return {"laws": len(done), "skipped": len(done) - len(ok), "steps": sum(law["N"] for law in done.values()),
            "worst_residual": max((law["residual"] for law in ok), default=0.0)}


def evaluate(job) -> dict:
    cfg, method, seed = job.cfg, job.method, int(job.seeds[0])
    points = read_json(job.out_dir / "points.json")
    rows = analysis.kl_rows(points, _law_kls(job, points))
    records = analysis.sweep_records(cfg["train"]["sweeps"], rows, method, seed)
    bound = cfg["eval"].get("path_kl", {})
    if bound.get("enabled", False) and bound["bounds"].get(method):
        target = load_target(job.raw_dir(bound["dataset"]))
        n, refine = int(bound["quadrature_n"]), int(cfg["train"]["refine"])  # the fine points and the coarse ones
        axes = [sweeps.make_grid(cfg, bound["dataset"], m, 1).axis for m in ([n, n // refine] if refine > 1 else [n])]
        for name in bound["bounds"][method]:
            records += analysis.path_kl_records(target, bound, method, name, job.seeds, float(cfg["train"]["c"]),
                                                axes, log=job.log)
    return {"records": records}


def _law_kls(job, points: list[dict]) -> dict[str, tuple[float, float]]:
    """(KL(p_delta || q_N), KL(q_N || p_delta)) of every propagated law, by its key."""
    grids, kls = {}, {}
    for p in points:
        if p["status"] != "ok" or p["key"] in kls:
            continue
        where = (p["dataset"], p["n"])
        if where not in grids:
            grids[where] = load_grid(job.prepared_dir(p["dataset"]) / f"grid_n{p['n']}.npz")
        grid, log_p = grids[where]
        log_q = load_arrays(job.out_dir / "laws" / f"{p['key']}.npz")["log_q"]
        kls[p["key"]] = (transport.kl(log_p[p["delta"]], log_q, grid), transport.kl(log_q, log_p[p["delta"]], grid))
    return kls


def figures(cfg: dict, records, out_dir) -> list[Path]:
    from . import plots

    return plots.make_all(cfg, records, Path(out_dir))
