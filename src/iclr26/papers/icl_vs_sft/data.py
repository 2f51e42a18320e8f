"""The 2-D linear classification tasks of card 04 (section 6), their text serialisation, and the
stand-in pretraining corpus.

A task is a line through the integer grid {0..G-1}^2: unit normal w (angle uniform), through a
point c drawn from the grid's central band (so both classes are common), and an orientation. The
numerical prior ("bigger numbers -> A") is the orientation that puts label A on the side where
x1 + x2 is larger, i.e. A iff sign(w.(x - c)) == sign(w.(1, 1)). A "pro" task follows it, an "anti"
task reverses it (evaluation: the mirror image of a pro task, labels flipped). Pretraining tasks
follow it with probability `prior_p`.

The evaluation tasks are data (acquire writes tasks.jsonl, one row per task, at every scale: they
are synthetic in the paper too): per task its geometry, its shot pool (the first k are the k shots,
nested across k) and its query points. `load_tasks` is the one loader of both scales.

Serialisation (config `format`), the same at every scale: an example is `template` with
{x1} {x2} {label}; a prompt is the k shots joined by `sep`, then `sep` and the query's text up to
{label}. The next token after the prompt is the label (`labels`, one token each).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from iclr26.core.io import read_jsonl

SIDES = ("pro", "anti")


def _geometry(rng: np.random.Generator, n: int, grid: int, centre: tuple[float, float]):
    """n unit normals w (n, 2) and offsets c (n, 2) inside the central band centre*(G-1)."""
    angle = rng.uniform(0.0, 2 * np.pi, size=n)
    w = np.stack([np.cos(angle), np.sin(angle)], axis=1)
    c = rng.uniform(centre[0] * (grid - 1), centre[1] * (grid - 1), size=(n, 2))
    return w, c


def labels_of(x: np.ndarray, w: np.ndarray, c: np.ndarray, pro: np.ndarray) -> np.ndarray:
    """Label index (0 = A, 1 = B) of points x (..., m, 2) for tasks (w, c, pro) broadcast over m.
    A is on the side of larger x1 + x2 for a pro task, on the other side for an anti task."""
    side = np.sign(np.einsum("...md,...d->...m", x - c[..., None, :], w))
    bigger = np.sign(w.sum(-1))[..., None]          # the side of larger x1 + x2
    bigger = np.where(bigger == 0, 1.0, bigger)
    is_a = (side == bigger) == pro[..., None]
    return np.where(is_a, 0, 1)


def pretraining_batch(rng: np.random.Generator, batch: int, spec: dict) -> tuple[np.ndarray, np.ndarray]:
    """Points (batch, K, 2) and labels (batch, K) of `batch` fresh pretraining tasks, each following
    the numerical prior with probability spec.prior_p."""
    grid, k = int(spec["grid"]), int(spec["examples_per_sequence"])
    w, c = _geometry(rng, batch, grid, tuple(spec["centre"]))
    pro = rng.random(batch) < float(spec["prior_p"])
    x = rng.integers(0, grid, size=(batch, k, 2)).astype(float)
    return x.astype(np.int64), labels_of(x, w, c, pro)


def generate_tasks(spec: dict, seeds: list[int]) -> list[dict]:
    """The evaluation tasks of every seed: n_tasks_per_side pro tasks, each with a shot pool and
    queries drawn without replacement from the grid (shots and queries disjoint), and as many anti
    tasks that mirror them: anti task i has pro task i's boundary, shots and queries with every
    label flipped, so the prior gap compares the same geometries (audit 04, finding 7)."""
    grid, n_side = int(spec["grid"]), int(spec["n_tasks_per_side"])
    n_shots, n_queries = int(spec["shot_pool"]), int(spec["n_queries"])
    points = np.array([(a, b) for a in range(grid) for b in range(grid)], dtype=np.int64)
    if n_shots + n_queries > len(points):
        raise ValueError(f"data.tasks: shot_pool + n_queries = {n_shots + n_queries} > {len(points)} grid points")
    rows = []
    for seed in seeds:
        rng = np.random.default_rng([int(spec["data_seed"]), int(seed)])
        w, c = _geometry(rng, n_side, grid, tuple(spec["centre"]))
        picks = [points[rng.permutation(len(points))[: n_shots + n_queries]] for _ in range(n_side)]
        for side in SIDES:
            for i, pick in enumerate(picks):
                y = labels_of(pick[None].astype(float), w[i][None], c[i][None], np.array([side == "pro"]))[0]
                rows.append({
                    "seed": int(seed), "task": f"s{seed}_{side}{i}", "side": side,
                    "w": [float(v) for v in w[i]], "c": [float(v) for v in c[i]],
                    "shots": [[int(a), int(b), int(t)] for (a, b), t in zip(pick[:n_shots], y[:n_shots])],
                    "queries": [[int(a), int(b), int(t)] for (a, b), t in zip(pick[n_shots:], y[n_shots:])],
                })
    return rows


def load_tasks(path: Path, seed: int | None = None) -> list[dict]:
    """tasks.jsonl (acquire's file, either scale), optionally one seed's tasks; checks the schema."""
    rows = read_jsonl(path)
    need = {"seed", "task", "side", "w", "c", "shots", "queries"}
    for row in rows:
        missing = need - set(row)
        if missing:
            raise ValueError(f"{path}: task {row.get('task', '?')} lacks {sorted(missing)}")
    return [r for r in rows if seed is None or r["seed"] == seed]


# ----------------------------------------------------------------------------- serialisation
def example_text(fmt: dict, x1: int, x2: int, label: int | None) -> str:
    """One example; label None: the query, cut where the label would start."""
    template = fmt["template"]
    if label is None:
        return template.split("{label}")[0].format(x1=x1, x2=x2)
    return template.format(x1=x1, x2=x2, label=fmt["labels"][label])


def prompt_text(fmt: dict, shots: list, query) -> str:
    """k shots then the query (zero-shot when shots is empty): the next token is the label."""
    parts = [example_text(fmt, a, b, t) for a, b, t in shots] + [example_text(fmt, query[0], query[1], None)]
    return fmt["sep"].join(parts)


def coordinates(task: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The queries' relevant coordinate (w.x, across the boundary), irrelevant coordinate (along
    the boundary) and labels."""
    q = np.asarray(task["queries"], dtype=float)
    w = np.asarray(task["w"], dtype=float)
    along = np.array([-w[1], w[0]])
    return q[:, :2] @ w, q[:, :2] @ along, q[:, 2].astype(int)
