"""Stages of card 01, "Conditioned Initialization for Attention" (OpenReview cKNOCYPo2W).

    acquire   motif-pair images from a generator seeded per run seed (tiny, smoke)     -> s<seed>/images.npz
              or CIFAR-10 (full), one set for every seed                               -> images.npz
    prepare   images normalised by the training pool's channel stats                    -> [s<seed>/]*.npy
    train     one unit of work per (regime, seed) run of this init method (training.py):
              kappa(J) at init, AdamW on the data stream, checkpointed as it goes     -> run_<key>.npz, model_<key>.pt
    evaluate  one record per run: kappa, loss AUC, steps to the target loss, test accuracy (analysis.py)

One train job = one init method x a block of seeds (`seed_batch`), and every regime that lists the
method: `warmup` (the standard recipe: linear warmup then cosine decay) and `no_warmup`
(constant lr: the card's regime, where the tiny trial first showed the effect). The same seed
gives the same data, the same default init and the same data order under every method, so the
methods are paired by seed. weight_selection first trains one teacher per seed (`teacher_s<seed>`).
Only train imports torch and transformers.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from iclr26.core.io import load_arrays, save_arrays, write_json

from . import analysis, data

DATASET = "images"  # the paper's one dataset slot: motif pairs at tiny/smoke, CIFAR-10 at full


def acquire(job) -> dict:
    spec = job.cfg["data"][job.dataset]
    if spec["source"] == "motif_pairs":  # one dataset per run seed, drawn with that seed
        info = {}
        for seed, folder in data.seed_datasets(spec, job.cfg["seeds"]).items():
            arrays = data.generate_motif_pairs(spec, seed)
            save_arrays(job.out_dir / folder / "images.npz", **arrays)
            info[folder] = {"train": list(arrays["x_train"].shape), "test": list(arrays["x_test"].shape)}
        return {"source": spec["source"], "per_seed": info, "classes": len(data.pair_classes(spec["n_motifs"]))}
    if spec["source"] == "cifar10":
        from iclr26.core.acquire import download

        pin = spec.get("sha256", data.CIFAR10_SHA256)
        archive = download(spec.get("url", data.CIFAR10_URL), job.out_dir / "cifar-10-python.tar.gz", pin,
                           progress=lambda done, total: job.log(f"{done >> 20} / {(total or 0) >> 20} MiB", every_s=30))
        arrays = data.read_cifar10(archive, pin)
        save_arrays(job.out_dir / "images.npz", **arrays)
        return {"source": spec["source"], "train": list(arrays["x_train"].shape),
                "test": list(arrays["x_test"].shape), "classes": int(arrays["y_train"].max()) + 1}
    raise ValueError(f"data.{job.dataset}.source must be motif_pairs or cifar10, got {spec['source']!r}")


def prepare(job) -> dict:
    stats = {}
    for folder in sorted(set(data.seed_datasets(job.cfg["data"][job.dataset], job.cfg["seeds"]).values())):
        arrays, stats[folder] = data.prepared_arrays(load_arrays(job.raw_dir() / folder / "images.npz"))
        (job.out_dir / folder).mkdir(parents=True, exist_ok=True)
        data.save_prepared(job.out_dir / folder, arrays)
    stats = stats.get("", stats)  # one shared set: its stats; one set per seed: {folder: stats}
    write_json(job.out_dir / "stats.json", stats)
    return stats


def runs_of(cfg: dict, method: str, seeds: list[int]) -> dict[str, tuple[str, int]]:
    """{run key: (regime, seed)} of the runs this method trains, regimes in config order.

    weight_selection first trains its teachers (regime `teacher`, one per seed): each student
    is initialised from its own seed's teacher (weight_selection.py)."""
    students = {f"{regime}_s{seed}": (regime, seed) for regime, spec in cfg["train"]["regimes"].items()
                if method in spec["methods"] for seed in seeds}
    teachers = ({f"teacher_s{seed}": ("teacher", seed) for seed in seeds}
                if method == "weight_selection" and students else {})  # no student, no teacher
    return {**teachers, **students}


def seed_data(job):
    """seed -> that seed's prepared arrays (memory-mapped), for training."""
    folders = data.seed_datasets(job.cfg["data"][DATASET], job.seeds)
    return lambda seed: data.load_prepared(job.prepared_dir(DATASET) / folders[seed])


def train(job) -> dict:
    runs = runs_of(job.cfg, job.method, job.seeds)
    if not runs:  # a method no regime of this scale lists (tiny: mimetic, weight_selection): no rows
        return {"runs": {}}
    from .training import Trainer  # torch and transformers: only this stage pays their import

    with Trainer(job, seed_data(job), augment=bool(job.cfg["data"][DATASET].get("augment", False))) as trainer:
        done = job.units(runs, lambda key: trainer.run(key, *runs[key]))
    return {"runs": done}


def evaluate(job) -> dict:
    folders = data.seed_datasets(job.cfg["data"][DATASET], job.seeds)
    records = []
    for key, (regime, seed) in runs_of(job.cfg, job.method, job.seeds).items():
        if regime == "teacher":  # not a row of the table: its numbers are in the train job's metrics.json
            continue
        y_test = np.load(job.prepared_dir(DATASET) / folders[seed] / "test_y.npy")
        run = load_arrays(job.out_dir / analysis.run_file(key))
        records.append({"seed": seed, "regime": regime, **analysis.run_record(run, y_test, job.cfg["eval"])})
    return {"records": records}


def figures(cfg: dict, records, out_dir) -> list[Path]:
    from . import plots

    return plots.make_all(cfg, records, Path(out_dir))
