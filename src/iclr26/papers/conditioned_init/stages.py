"""Stages of card 01, "Conditioned Initialization for Attention" (OpenReview cKNOCYPo2W).

    acquire   motif-pair images from a seeded generator (tiny, smoke) or CIFAR-10 (full) -> images.npz
    prepare   images normalised by the training pool's channel stats                    -> *.npy
    train     one unit of work per (regime, seed) run of this init method (training.py):
              kappa(J) at init, AdamW on the data stream, checkpointed as it goes     -> run_<key>.npz, model_<key>.pt
    evaluate  one record per run: kappa, loss AUC, steps to the target loss, test accuracy (analysis.py)

One train job = one init method x a block of seeds (`seed_batch`), and every regime that lists the
method: `no_warmup` (the headline: constant lr, no warmup) and `warmup` (the card's OneCycle
ablation). The same seed gives the same default init and the same data order under every method,
so the methods are paired by seed. Only train imports torch and transformers.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from iclr26.core.io import load_arrays, save_arrays, write_json

from . import analysis, data

DATASET = "images"  # the paper's one dataset slot: motif pairs at tiny/smoke, CIFAR-10 at full


def acquire(job) -> dict:
    spec = job.cfg["data"][job.dataset]
    if spec["source"] == "motif_pairs":
        arrays = data.generate_motif_pairs(spec)
    elif spec["source"] == "cifar10":
        from iclr26.core.acquire import download

        pin = spec.get("sha256", data.CIFAR10_SHA256)
        archive = download(spec.get("url", data.CIFAR10_URL), job.out_dir / "cifar-10-python.tar.gz", pin,
                           progress=lambda done, total: job.log(f"{done >> 20} / {(total or 0) >> 20} MiB", every_s=30))
        arrays = data.read_cifar10(archive, pin)
    else:
        raise ValueError(f"data.{job.dataset}.source must be motif_pairs or cifar10, got {spec['source']!r}")
    save_arrays(job.out_dir / "images.npz", **arrays)
    return {"source": spec["source"], "train": list(arrays["x_train"].shape), "test": list(arrays["x_test"].shape),
            "classes": int(arrays["y_train"].max()) + 1}


def prepare(job) -> dict:
    arrays, stats = data.prepared_arrays(load_arrays(job.raw_dir() / "images.npz"))
    data.save_prepared(job.out_dir, arrays)
    write_json(job.out_dir / "stats.json", stats)
    return stats


def runs_of(cfg: dict, method: str, seeds: list[int]) -> dict[str, tuple[str, int]]:
    """{run key: (regime, seed)} of the runs this method trains, regimes in config order."""
    return {f"{regime}_s{seed}": (regime, seed) for regime, spec in cfg["train"]["regimes"].items()
            if method in spec["methods"] for seed in seeds}


def train(job) -> dict:
    from .training import Trainer  # torch and transformers: only this stage pays their import

    runs = runs_of(job.cfg, job.method, job.seeds)
    arrays = data.load_prepared(job.prepared_dir(DATASET))
    with Trainer(job, arrays, augment=bool(job.cfg["data"][DATASET].get("augment", False))) as trainer:
        done = job.units(runs, lambda key: trainer.run(key, *runs[key]))
    return {"runs": done}


def evaluate(job) -> dict:
    y_test = np.load(job.prepared_dir(DATASET) / "test_y.npy")
    records = []
    for key, (regime, seed) in runs_of(job.cfg, job.method, job.seeds).items():
        run = load_arrays(job.out_dir / analysis.run_file(key))
        records.append({"seed": seed, "regime": regime, **analysis.run_record(run, y_test, job.cfg["eval"])})
    return {"records": records}


def figures(cfg: dict, records, out_dir) -> list[Path]:
    from . import plots

    return plots.make_all(cfg, records, Path(out_dir))
