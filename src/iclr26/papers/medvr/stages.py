"""Stages of card 02, MedVR (arXiv 2604.08203).

    acquire   tiny/smoke: VQA-RAD-schema synthetic scans (data.write_synthetic); full: VQA-RAD's
              parquet at a pinned commit (sha256-checked) and the base VLM's hub snapshot
    prepare   the one loader (data.load_vqa) -> global views and crops; the "base VLM" perception
              (the answer head warm-started on true crops, agent.warm_start) and the mechanism
              checks: its accuracy with the true crop, with no crop, and its entropy spread
    train     one GRPO arm for a block of seeds (agent.train_arm)
    evaluate  greedy zoom and answer on the test split, numpy only: accuracy, grounding hit,
              rollouts per question in training, sd of the answer entropy
Seeds are paired: every arm of a seed starts from the same base perception and sees the same
question order; the seed changes the zoom head's init, the questions drawn and the sampling.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from iclr26.core.io import load_arrays, read_json, save_arrays, write_json

from . import agent, data

DATASET = "vqa_rad"


def acquire(job) -> dict:
    spec = job.cfg["data"][job.dataset]
    if spec["source"] == "synthetic":
        return {"source": "synthetic", "rows": data.write_synthetic(job.out_dir, spec, spec["data_seed"])}
    if spec["source"] == "hub":
        from iclr26.core.acquire import download_pinned

        files = {}
        for split, pin in spec["files"].items():
            url = f"{spec['endpoint']}/datasets/{spec['hub_id']}/resolve/{spec['revision']}/{pin['file']}"
            dest = job.out_dir / "data" / Path(pin["file"]).name
            files[split] = download_pinned({"url": url, "sha256": pin.get("sha256")}, dest)
        return {"source": "hub", "hub_id": spec["hub_id"], "revision": spec["revision"], "files": files}
    raise ValueError(f"data.{job.dataset}.source must be synthetic or hub, got {spec['source']!r}")


def arrays(cfg: dict, raw: Path, split: str, vocab: list[str] | None = None) -> dict:
    spec, a = cfg["data"][DATASET], cfg["agent"]
    rows = data.load_vqa(raw, split, spec["image_size"])
    glob, crops = agent.views(rows["images"], spec["grid"], a["pool"])
    vocab = vocab or sorted(set(rows["answers"]))
    labels = np.array([vocab.index(x) if x in vocab else -1 for x in rows["answers"]], np.int64)
    out = {"glob": glob, "crops": crops, "labels": labels}
    if "cells" in rows:
        out["cells"] = rows["cells"]
    return out, vocab


def prepare(job) -> dict:
    cfg = job.cfg
    train, vocab = arrays(cfg, job.raw_dir(), "train")
    test, _ = arrays(cfg, job.raw_dir(), "test", vocab)
    save_arrays(job.out_dir / "train.npz", **train)
    save_arrays(job.out_dir / "test.npz", **test)
    if "cells" not in train:
        raise NotImplementedError("full scale: the base VLM's perception is the hub model; the VLM GRPO "
                                  "stage is not implemented (config deviations)")
    base, curve = agent.warm_start(train["glob"], train["crops"], train["cells"], train["labels"],
                                   len(vocab), cfg, cfg["agent"]["base_seed"])
    save_arrays(job.out_dir / "base.npz", **{f"p{i}": p for i, p in enumerate(base)})
    checks = {mode: float(agent.evaluate(base, None, test["glob"], test["crops"], test["labels"],
                                         test["cells"], mode)["accuracy"][0])
              for mode in ("oracle", "random", "blank")}
    checks["entropy_sd_random_zoom"] = float(agent.evaluate(base, None, test["glob"], test["crops"], test["labels"],
                                                            test["cells"], "random")["entropy_sd"][0])
    info = {"vocab": vocab, "n_train": len(train["labels"]), "n_test": len(test["labels"]),
            "warm_loss_first_last": [curve[0], curve[-1]], "base_accuracy": checks}
    job.log(f"base perception accuracy on test: {checks}")
    write_json(job.out_dir / "summary.json", info)
    return info


def _load(job):
    prep = job.prepared_dir(DATASET)
    base = load_arrays(prep / "base.npz")
    return (load_arrays(prep / "train.npz"), load_arrays(prep / "test.npz"),
            [base[f"p{i}"] for i in range(len(base))], read_json(prep / "summary.json"))


def train(job) -> dict:
    return {"units": job.units([f"{job.method}_{'_'.join(map(str, job.seeds))}"], lambda key: _train(job))}


def _train(job) -> dict:
    """One unit: the arm for the whole seed block (seeds run side by side, agent.train_arm)."""
    train_set, _, base, info = _load(job)
    out = agent.train_arm(job.method, train_set["glob"], train_set["crops"], train_set["labels"], base,
                          len(info["vocab"]), job.cfg, list(job.seeds), log=job.log)
    save_arrays(job.out_dir / "policy.npz", rollouts_per_question=out["rollouts_per_question"],
                reward_curve=out["reward_curve"], **{f"a{i}": p for i, p in enumerate(out["answer"])},
                **{f"z{i}": p for i, p in enumerate(out["zoom"])})
    curve = out["reward_curve"]
    tail = max(1, len(curve) // 10)
    return {"branch_rate": out["branch_rate"], "first_reward": float(curve[:tail].mean()),
            "last_reward": float(curve[-tail:].mean())}


def evaluate(job) -> dict:
    _, test, base, _ = _load(job)
    seeds = list(job.seeds)
    if job.method == "oracle_crop":   # the base perception with the true crop: no training
        answer = [np.repeat(p, len(seeds), 0) for p in base]
        res = agent.evaluate(answer, None, test["glob"], test["crops"], test["labels"], test["cells"], "oracle")
        res["entropy_sd"] = agent.evaluate(answer, None, test["glob"], test["crops"], test["labels"],
                                           test["cells"], "random")["entropy_sd"]
        rollouts = np.ones(len(seeds))
    else:
        pol = load_arrays(job.out_dir / "policy.npz")
        answer = [pol[f"a{i}"] for i in range(len(base))]
        zoom = [pol[f"z{i}"] for i in range(len(base))]
        mode = "blank" if job.method == "global_only" else "greedy"
        res = agent.evaluate(answer, zoom, test["glob"], test["crops"], test["labels"], test.get("cells"), mode)
        rollouts = pol["rollouts_per_question"]
    records = [{"seed": int(s), "accuracy": float(res["accuracy"][k]),
                "grounding_hit": float(res["grounding_hit"][k]), "entropy_sd": float(res["entropy_sd"][k]),
                "rollouts_per_question": float(rollouts[k])} for k, s in enumerate(seeds)]
    return {"records": records}


def figures(cfg: dict, records, out_dir) -> list[Path]:
    from iclr26.core.figures import pyplot, save

    plt = pyplot()
    from . import PAPER

    present = set(records["method"])
    methods = [m for m in PAPER.methods if m in present]
    fig, ax = plt.subplots(figsize=(6, 3))
    for i, m in enumerate(methods):
        acc = records.loc[records["method"] == m, "accuracy"].dropna().to_numpy()
        ax.scatter(np.full(len(acc), i), acc, s=12)
        ax.plot([i - 0.2, i + 0.2], [np.mean(acc)] * 2, color="k")
    ax.set_xticks(range(len(methods)), methods, rotation=20)
    ax.set_ylabel("test accuracy")
    return [save(fig, Path(out_dir) / "accuracy.png")]
