"""Stages of card 01, "Conditioned Initialization for Attention" (OpenReview cKNOCYPo2W).

One train job = one init method x a block of seeds (`seed_batch`), and every regime that lists the
method: `no_warmup` (the headline: constant lr, no warmup) and `warmup` (the card's OneCycle
ablation). Each (regime, seed) run (training.py):
  1. seeds torch, builds the ViT from config, applies the init (inits.py);
  2. measures kappa(J) of the first attention layer at init on test image 0 (jacobian.py);
  3. trains with AdamW on the data stream for the regime's steps, checkpointing as it goes;
  4. writes the per-step train losses, the test-set logits and the final weights.
Evaluate turns those files into one record per run (accuracy, loss AUC, steps to the target loss)
with numpy alone; only the train stage imports torch and transformers.
The same seed gives the same default init and the same data order under every method, so the
methods are paired by seed.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from iclr26.core.errors import DataError
from iclr26.core.io import atomic_path, atomic_write

from . import data as D

DATASET = "images"


# ----------------------------------------------------------------------------- acquire, prepare
def _save_npz(path: Path, arrays: dict) -> None:
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as handle:
            np.savez(handle, **arrays)


def acquire(job) -> dict:
    spec = job.cfg["data"][job.dataset]
    if spec["source"] == "motif_pairs":
        arrays = D.generate_motif_pairs(spec)
    elif spec["source"] == "cifar10":
        from iclr26.core.acquire import download

        archive = download(spec.get("url", D.CIFAR10_URL), job.out_dir / "cifar-10-python.tar.gz",
                           spec.get("sha256", D.CIFAR10_SHA256), progress=lambda done, total: job.log(
                               f"{done >> 20} / {(total or 0) >> 20} MiB", every_s=30))
        arrays = D.read_cifar10(archive)
    else:
        raise ValueError(f"data.{job.dataset}.source must be motif_pairs or cifar10, got {spec['source']!r}")
    _save_npz(job.out_dir / "images.npz", arrays)
    return {"source": spec["source"], "train": list(arrays["x_train"].shape), "test": list(arrays["x_test"].shape),
            "classes": int(arrays["y_train"].max()) + 1}


def prepare(job) -> dict:
    """Normalise by the training pool's per-channel mean/std; write float32 arrays the model eats."""
    raw = np.load(job.raw_dir() / "images.npz")
    mean, std = D.channel_stats(raw["x_train"])
    for split in ("train", "test"):
        for name, array in ((f"{split}_x", D.normalise(raw[f"x_{split}"], mean, std)), (f"{split}_y", raw[f"y_{split}"])):
            with atomic_path(job.out_dir / f"{name}.npy") as tmp, open(tmp, "wb") as handle:
                np.save(handle, array, allow_pickle=False)  # a handle: np.save would append .npy to a path
    counts = np.bincount(raw["y_train"]).tolist()
    stats = {"mean": mean.tolist(), "std": std.tolist(), "n_train": len(raw["y_train"]),
             "n_test": len(raw["y_test"]), "train_class_counts": counts}
    atomic_write(job.out_dir / "stats.json", json.dumps(stats, indent=1))
    return stats


def load_prepared(directory: Path) -> dict[str, np.ndarray]:
    # .npy, so a large training pool is memory-mapped rather than read whole
    if not (directory / "stats.json").exists():
        raise DataError(f"{directory} has no prepared data; run the prepare stage first")
    return {name: np.load(directory / f"{name}.npy", mmap_mode="r") for name in ("train_x", "train_y", "test_x", "test_y")}


# ----------------------------------------------------------------------------- train
def runs_of(cfg: dict, method: str, seeds: list[int]) -> list[tuple[str, int]]:
    """(regime, seed) pairs this method trains, regimes in config order."""
    return [(regime, seed) for regime, spec in cfg["train"]["regimes"].items()
            if method in spec["methods"] for seed in seeds]


def run_key(regime: str, seed: int) -> str:
    return f"{regime}_s{seed}"


def train(job) -> dict:
    from .training import train_method  # torch and transformers: only this stage pays their import

    return train_method(job)


# ----------------------------------------------------------------------------- evaluate
def steps_to_target(losses: np.ndarray, target: float, window: int) -> int:
    """First step (1-based) whose trailing running mean of `window` train losses is below `target`.

    Never reached: len(losses) + 1, a censored value (the record's reached_target says which).
    """
    cumulative = np.concatenate([[0.0], np.cumsum(losses)])
    steps = np.arange(1, len(losses) + 1)
    lo = np.maximum(steps - window, 0)
    running = (cumulative[steps] - cumulative[lo]) / (steps - lo)
    below = np.flatnonzero(running < target)
    return int(below[0]) + 1 if below.size else len(losses) + 1


def coarse_curve(losses: np.ndarray, points: int) -> tuple[list[float], list[float]]:
    """Mean train loss in `points` consecutive bins of steps, and each bin's mean step (1-based)."""
    bins = np.array_split(np.arange(len(losses)), min(points, len(losses)))
    return ([round(float(losses[b].mean()), 5) for b in bins], [float(b.mean() + 1) for b in bins])


def evaluate(job) -> dict:
    ec = job.cfg["eval"]
    y_test = np.load(job.prepared_dir(DATASET) / "test_y.npy")
    records = []
    for regime_name, seed in runs_of(job.cfg, job.method, job.seeds):
        run = np.load(job.out_dir / f"run_{run_key(regime_name, seed)}.npz")
        losses, kappa = run["losses"], float(run["kappa"])
        reached = steps_to_target(losses, ec["target_loss"], ec["target_window"])
        curve, curve_steps = coarse_curve(losses, ec["curve_points"])
        records.append({
            "seed": seed, "regime": regime_name,
            "kappa_J_init": kappa, "log10_kappa_J_init": float(np.log10(kappa)),
            "loss_auc": float(losses.mean()),
            "steps_to_target": reached, "reached_target": reached <= len(losses),
            "test_acc": float((run["test_logits"].argmax(axis=1) == y_test).mean()),
            "final_train_loss": float(losses[-10:].mean()),
            "loss_curve": curve, "loss_curve_step": curve_steps,
        })
    return {"records": records}


# ----------------------------------------------------------------------------- figures
def figures(cfg: dict, records, out_dir) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    from . import PAPER

    methods = [m for m in PAPER.methods if (records["method"] == m).any()]  # table order
    colours = {m: plt.cm.tab10(i) for i, m in enumerate(methods)}
    paths = []

    # 1. train-loss curves per init, one panel per regime; thin lines are seeds, thick the mean
    regimes = [r for r in cfg["train"]["regimes"] if (records["regime"] == r).any()]
    fig, axes = plt.subplots(1, len(regimes), figsize=(5.5 * len(regimes), 4), squeeze=False)
    for ax, regime in zip(axes[0], regimes):
        for method in methods:
            rows = records[(records["regime"] == regime) & (records["method"] == method)]
            if rows.empty:
                continue
            curves = np.array(rows["loss_curve"].tolist(), dtype=float)
            steps = rows["loss_curve_step"].iloc[0]
            for curve in curves:
                ax.plot(steps, curve, color=colours[method], alpha=0.25, lw=0.8)
            ax.plot(steps, curves.mean(axis=0), color=colours[method], lw=2, label=f"{method} (n={len(curves)})")
        ax.axhline(cfg["eval"]["target_loss"], color="grey", ls=":", lw=1, label="target loss")
        ax.set(title=f"train loss, {regime}", xlabel="step", ylabel="cross-entropy")
        ax.legend(fontsize=8)
    fig.tight_layout()
    paths.append(out_dir / "loss_curves.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)

    # 2. conditioning at init vs final test accuracy, headline regime
    headline = regimes[0]
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for method in methods:
        rows = records[(records["regime"] == headline) & (records["method"] == method)]
        ax.scatter(rows["kappa_J_init"], rows["test_acc"], color=colours[method], label=method)
    ax.set(xscale="log", xlabel="kappa(J) of attention layer 1 at init", ylabel="test accuracy",
           title=f"conditioning at init vs accuracy ({headline})")
    ax.legend(fontsize=8)
    fig.tight_layout()
    paths.append(out_dir / "kappa_vs_accuracy.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)
    return paths
