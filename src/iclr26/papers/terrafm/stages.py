"""Stages of card 12, TerraFM (arXiv 2506.06281).

    acquire   tiny/smoke: mini-Major-TOM parts in the Major-TOM Core schema (majortom.write_synthetic);
              full: Major-TOM Core S2L2A, S2L1C, S1RTC parts at pinned commits, streamed per part and
              cut to the selected grid cells (majortom.acquire_hub); where data.majortom.benchmarks is set
              (full), the GEO-Bench and Copernicus-Bench task files at pinned commits (benchmarks.acquire)
    prepare   the same loader for both: band rasters -> standardised pretraining tiles and downstream
              chips (probe.build_arrays); the pre-arm checks (long tail; S1 and S2 both carry the label);
              the benchmark tasks as arrays in the encoder's band order (benchmarks.prepare)
    train     per variant and seed: DINO pretraining (model.pretrain)            -> <variant>_s<seed>.pt
    evaluate  frozen CLS features, weighted kNN with 100% and a fraction of the training labels, on
              the S2 (L2A) and the S1 chips: overall, balanced and tail-class accuracy; collapse flag;
              the training diagnostics (first/last loss, teacher entropy, trained, the second centre's
              effect on the targets); raw_stats: the same kNN on per-band mean and sd of each chip;
              with benchmarks, the same frozen encoders on each task (GEO-Bench: kNN, 100% and its 1%
              partition; Copernicus-Bench: linear probe): records with benchmark, task, labels, score
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from iclr26.core.io import load_arrays, save_arrays, write_json

from . import benchmarks, majortom, probe

DATASET = "majortom"


def acquire(job) -> dict:
    spec = job.cfg["data"][job.dataset]
    if spec["source"] == "synthetic":
        return {"source": "synthetic", **majortom.write_synthetic(job.out_dir, spec["generator"], spec["data_seed"]),
                **_acquire_benchmarks(job, spec)}
    if spec["source"] == "hub":
        return {"source": "hub", **majortom.acquire_hub(spec, job.out_dir, job.log), **_acquire_benchmarks(job, spec)}
    raise ValueError(f"data.{job.dataset}.source must be synthetic or hub, got {spec['source']!r}")


def _acquire_benchmarks(job, spec: dict) -> dict:
    """The GEO-Bench / Copernicus-Bench task files, where the config names them (full scale)."""
    if not spec.get("benchmarks"):
        return {}
    return {"benchmarks": benchmarks.acquire(spec["benchmarks"], job.out_dir / "benchmarks", job.log)}


def prepare(job) -> dict:
    arrays = probe.build_arrays(job.raw_dir(), job.cfg["data"][job.dataset])
    save_arrays(job.out_dir / "arrays.npz", **arrays)
    checks = probe.pre_arm_checks(arrays, job.cfg)
    job.log(f"pre-arm checks: {checks}")
    write_json(job.out_dir / "checks.json", checks)
    info = {"pretrain_tiles": int(len(arrays["label"])), "train_chips": int(len(arrays["train_label"])),
            "test_chips": int(len(arrays["test_label"])), "checks": checks}
    spec = job.cfg["data"][job.dataset]
    if spec.get("benchmarks"):
        info["benchmarks"] = benchmarks.prepare(spec["benchmarks"], job.raw_dir() / "benchmarks",
                                                job.out_dir / "benchmarks", job.log)
    return info


def _load(job) -> dict:
    return load_arrays(job.prepared_dir(DATASET) / "arrays.npz")


def train(job) -> dict:
    if job.method in ("random", "raw_stats"):
        return {}
    import torch

    from iclr26.core.runtime import pick_device

    from . import model

    device = pick_device(job.cfg.get("device"))
    arrays = _load(job)
    data = {k: arrays[k] for k in model.MODALITIES}
    data["label"] = arrays["label"]

    def work(key):
        seed = int(key[1:])
        out = model.pretrain(job.cfg, data, job.method, seed, log=job.log, device=device)
        curve = out["curve"]
        diag = {"first_loss": float(np.mean(curve[:10])), "last_loss": float(np.mean(curve[-10:])),
                "center_gap": out["center_gap"], "dual_kl": out["dual_kl"]}
        torch.save({"encoder": out["teacher"].state_dict(), "center": out["center"], "diag": diag},
                   job.out_dir / f"{key}.pt")
        return diag

    return {"units": job.units([f"s{s}" for s in job.seeds], work)}


def evaluate(job) -> dict:
    cfg, ev = job.cfg, job.cfg["eval"]
    n_cls = cfg["data"][DATASET]["n_classes"]
    arrays = _load(job)
    y_tr, y_te = arrays["train_label"], arrays["test_label"]
    tails = probe.tail_classes(y_tr, n_cls, ev["n_tail"])
    nan = float("nan")
    records, nets = [], {}
    for seed in job.seeds:
        diag = {"first_loss": nan, "last_loss": nan, "center_gap": nan, "dual_kl": nan}
        if job.method == "raw_stats":   # no encoder: per-band mean and sd of each chip (pre-arm check's features)
            net = None
            collapse = {"collapsed": nan, "h_mean_norm": nan, "mean_h_norm": nan}
        else:
            import torch

            from . import model

            if job.method == "random":
                torch.manual_seed(seed)
                net, center = model.build(cfg), torch.zeros(cfg["model"]["prototypes"])
            else:
                state = torch.load(job.out_dir / f"s{seed}.pt", weights_only=True)   # train's run folder
                net = model.build(cfg)
                net.load_state_dict(state["encoder"])
                center, diag = state["center"], state["diag"]
            collapse = model.collapse_stats(net, arrays["test_s2l2a"][: ev["collapse_chips"]], "s2l2a", center,
                                            cfg["train"]["tau_t"], ev["max_teacher_entropy"])
        # training worked (fixed before the debugged recipe ran): the loss fell, the teacher is sharp
        # (H / log K below max_teacher_entropy) and has not collapsed to one prototype (H(mean p) / log K >= 0.1)
        trained = nan if job.method in ("random", "raw_stats") else \
            float(diag["last_loss"] < diag["first_loss"] and collapse["collapsed"] == 0.0)
        dual_active = float(trained == 1.0 and diag["dual_kl"] >= ev["min_dual_kl"]) \
            if job.method == "dual_center" else nan
        nets[seed] = net
        for modality, name in (("s2l2a", "s2"), ("s1rtc", "s1")):
            if net is None:
                f_tr, f_te = (probe.raw_features(arrays[f"{p}_{modality}"]) for p in ("train", "test"))
            else:
                f_tr = model.features(net, arrays[f"train_{modality}"], modality)
                f_te = model.features(net, arrays[f"test_{modality}"], modality)
            for labels, fraction in (("full", 1.0), ("low", ev["low_label_fraction"])):
                keep = np.arange(len(y_tr)) if fraction >= 1 else probe.subset(y_tr, fraction, seed)
                pred = probe.knn_predict(f_tr[keep], y_tr[keep], f_te, ev["k"], ev["temperature"], n_cls)
                records.append({"seed": seed, "modality": name, "labels": labels, "n_labels": int(len(keep)),
                                **probe.scores(y_te, pred, tails), **collapse, **diag,
                                "trained": trained, "dual_active": dual_active})
    bench = cfg["data"][DATASET].get("benchmarks") or {}
    for name, tasks in bench.items():   # full scale: the paper's benchmark tasks, same frozen encoders
        for task, tspec in tasks.items():
            arrays = load_arrays(job.prepared_dir(DATASET) / "benchmarks" / f"{name}_{task}.npz")
            for seed, net in nets.items():
                if net is None:
                    f_tr, f_te = (probe.raw_features(arrays[k].astype(np.float32)) for k in ("train_x", "test_x"))
                else:
                    px = tspec.get("px", ev.get("benchmark_px"))   # per task (LCZ-S2: Copernicus-Bench's 112)
                    f_tr, f_te = (benchmarks.features(net, arrays[k], tspec["modality"], px)
                                  for k in ("train_x", "test_x"))
                for rec in benchmarks.evaluate_task(f_tr, f_te, arrays, tspec, ev, seed):
                    records.append({"seed": seed, "benchmark": name, "task": task, **rec})
                job.log(f"{name}/{task} seed {seed}: {records[-1]['score_name']} {records[-1]['score']:.3f}")
    return {"records": records}


def figures(cfg: dict, records, out_dir) -> list[Path]:
    """Per-seed kNN accuracies of every row (records: a DataFrame with a `method` column)."""
    from iclr26.core.figures import pyplot, save

    from . import PAPER

    plt = pyplot()
    methods = [m for m in PAPER.methods if (records["method"] == m).any()]
    panels = [("s2", "full", "oa"), ("s2", "low", "oa"), ("s2", "full", "tail_acc"), ("s1", "full", "oa")]
    fig, axes = plt.subplots(1, len(panels), figsize=(3.2 * len(panels), 3))
    for ax, (mod, lab, metric) in zip(axes, panels):
        for i, m in enumerate(methods):
            pick = (records["method"] == m) & (records["modality"] == mod) & (records["labels"] == lab)
            vals = records.loc[pick, metric].astype(float).to_numpy()
            ax.scatter(np.full(len(vals), i), vals, s=14)
            if len(vals):
                ax.hlines(vals.mean(), i - 0.3, i + 0.3)
        ax.set_xticks(range(len(methods)), methods, rotation=30, fontsize=7)
        ax.set_title(f"{mod.upper()} {metric} ({lab} labels)", fontsize=8)
    fig.tight_layout()
    return [save(fig, Path(out_dir) / "knn_accuracy.png")]
