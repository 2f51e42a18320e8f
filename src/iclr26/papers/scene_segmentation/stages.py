"""Stages of card 15, video scene segmentation with genre and duration signals (BaSSL-lite base).

acquire   tiny/smoke: per world (hypothesis: assumptions A, B, C on; null: off) and seed, synthetic
          movies written in MovieNet-SSeg's layout (movienet.write_world); full: the MovieNet-SSeg
          files placed by hand (the scene318 step of BaSSL's README is manual), checked and hashed.
prepare   the mechanism checks per world and seed (movienet.mechanism_checks), before any arm runs.
train     per row, world and seed, one unit: BaSSL-lite pretraining on the pretrain split (the row's
          variant: genre prior, duration anchors), fine-tuning on train, boundary scores of the test
          split (test_split, all_three: with the test-time split) (bassl.py). test_split retrains
          bassl's model (same seed: the same model) so that every job reads only its own outputs.
evaluate  BaSSL's metrics (AP, mIoU, F1 at 0.5) of the row's scores, per world and seed.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from iclr26.core.io import load_arrays, save_arrays, sha256_file

from . import movienet

DATASET = "movienet"
# row -> (pretraining variant, test-time split)
ROWS = {"bassl": ("base", False), "genre_prior": ("genre", False), "duration_anchor": ("duration", False),
        "test_split": ("base", True), "all_three": ("genre_duration", True)}
VARIANTS = {"base": (False, False), "genre": (True, False), "duration": (False, True),
            "genre_duration": (True, True)}
LAYOUT = ("anno/anno.pretrain.ndjson", "anno/anno.train.ndjson", "anno/anno.test.ndjson")


def world_dirs(cfg: dict, root: Path, seed: int) -> dict[str, Path]:
    spec = cfg["data"][DATASET]
    if spec["source"] == "synthetic":
        return {w: Path(root) / w / f"s{seed}" for w in spec["worlds"]}
    return {"movienet": Path(root) / "movienet"}


def acquire(job) -> dict:
    spec = job.cfg["data"][job.dataset]
    if spec["source"] == "synthetic":
        out = {}
        for k, world in enumerate(spec["worlds"]):
            for seed in job.cfg["seeds"]:
                d = world_dirs(job.cfg, job.out_dir, seed)[world]
                out[f"{world}_s{seed}"] = movienet.write_world(d, world, spec, spec["data_seed"] + 1000 * k + seed)
        return {"source": "synthetic", "movies": out}
    if spec["source"] == "manual":
        src = Path(spec["manual_dir"])
        missing = [p for p in LAYOUT if not (src / p).exists()] + [d for d in ("shots", "genres", "features")
                                                                  if not (src / d).is_dir()]
        if missing:
            raise FileNotFoundError(
                f"scene_segmentation: place MovieNet-SSeg in {src}: BaSSL's anno.tar unpacked into anno/ "
                f"({spec['where']}), and per movie shots/<imdb_id>.json, genres/<imdb_id>.json, "
                f"features/<imdb_id>.npy (see movienet.py); missing: {missing}")
        dest = job.out_dir / "movienet"
        if not dest.exists():
            dest.symlink_to(src.resolve(), target_is_directory=True)
        return {"source": "manual", "dir": str(src), "sha256": {p: sha256_file(src / p) for p in LAYOUT}}
    raise ValueError(f"data.{job.dataset}.source must be synthetic or manual, got {spec['source']!r}")


def prepare(job) -> dict:
    """The mechanism checks of every world and seed (test split), before any arm runs."""
    cfg = job.cfg
    units = {f"{w}_s{seed}": d for seed in cfg["seeds"] for w, d in world_dirs(cfg, job.raw_dir(), seed).items()}

    def work(key: str) -> dict:
        return movienet.mechanism_checks(movienet.load_split(units[key], "test"), {"tau": cfg["split"]["tau"]})

    return job.units(units, work)


def train(job) -> dict:
    """The row's model per world and seed: BaSSL-lite pretraining (its variant), fine-tuning, and the
    boundary scores of the test split (with the test-time split for the rows that use it)."""
    from iclr26.core.runtime import pick_device

    from . import bassl

    cfg = job.cfg
    device = pick_device(cfg.get("device"))
    variant, use_split = ROWS[job.method]
    use_genre, duration = VARIANTS[variant]
    units = {f"{w}_s{seed}": (seed, d) for seed in job.seeds
             for w, d in world_dirs(cfg, job.raw_dir(DATASET), seed).items()}

    def split(d: Path, name: str):
        movies = movienet.load_split(d, name)
        g = np.stack([bassl.genre_vector(m["genres"], cfg["genre"]["definitions"], cfg["genre"]["dim"])
                      for m in movies])
        return movies, g

    def work(key: str) -> dict:
        seed, d = units[key]
        pre = bassl.pretrain(*split(d, "pretrain"), cfg, seed, use_genre, duration, device)
        bassl.finetune(pre["model"], *split(d, "train"), cfg, seed)
        test, g = split(d, "test")
        scores = bassl.score(pre["model"], test, g, cfg, cfg["split"]["tau"] if use_split else None)
        save_arrays(job.out_dir / f"scores_{key}.npz", **{m["video_id"]: s for m, s in zip(test, scores)})
        return {"pseudo_precision": pre["pseudo_precision"] if pre["labelled"] else float("nan")}

    return job.units(units, work)


def evaluate(job) -> dict:
    cfg = job.cfg
    records = []
    for seed in job.seeds:
        for world, d in world_dirs(cfg, job.raw_dir(DATASET), seed).items():
            key = f"{world}_s{seed}"
            arrays = load_arrays(job.out_dir / f"scores_{key}.npz")
            test = movienet.load_split(d, "test")
            scores, labels, mious = [], [], []
            for m in test:
                s = arrays[m["video_id"]][:-1]
                y = m["labels"][:-1]
                scores.append(s)
                labels.append(y)
                mious.append(movienet.miou(list((s >= 0.5).astype(int)) + [0], list(y) + [0]))
            rec = {"seed": seed, "world": world, **movienet.ap_f1(np.concatenate(scores), np.concatenate(labels)),
                   "miou": float(np.mean(mious))}
            trained = json.loads((job.out_dir / "units" / f"{key}.json").read_text())["result"]
            checks = json.loads((job.prepared_dir(DATASET) / "units" / f"{key}.json").read_text())["result"]
            rec.update({k: float("nan") if v is None else float(v) for k, v in {**trained, **checks}.items()})
            records.append(rec)
    return {"records": records}


def figures(cfg: dict, records, out_dir) -> list[Path]:
    import pandas as pd

    from iclr26.core.figures import pyplot, save

    from . import METHODS

    df = pd.DataFrame(records)
    plt = pyplot()
    worlds = list(dict.fromkeys(df["world"]))
    fig, axes = plt.subplots(1, len(worlds), figsize=(4.5 * len(worlds), 3.5), squeeze=False)
    for ax, world in zip(axes[0], worlds):
        d = df[df["world"] == world]
        rows = [m for m in METHODS if m in set(d["method"])]
        for i, m in enumerate(rows):
            v = d[d["method"] == m]["ap"]
            ax.plot([i] * len(v), v, "o", alpha=0.4, color="C0")
            ax.plot(i, v.mean(), "_", markersize=20, color="C3")
        ax.set_xticks(range(len(rows)), rows, rotation=30, fontsize=7)
        ax.set(ylabel="boundary AP", title=f"world: {world}")
    fig.tight_layout()
    return [save(fig, Path(out_dir) / "ap_by_arm.png")]
