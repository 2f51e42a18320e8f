"""Stages of card 02, MedVR (arXiv 2604.08203).

    acquire   tiny/smoke: VQA-RAD-schema synthetic scans (data.write_synthetic); full: VQA-RAD's two
              parquets at a pinned commit (sha256-checked) and the base VLM's hub snapshot
    prepare   tiny: the one loader (data.load_vqa) -> global views and crops; the "base VLM"
              perception (the answer head warm-started on true crops, agent.warm_start) and the
              mechanism checks: its accuracy with the true crop, with no crop, and its entropy spread;
              full: both splits through the RGB loader (data.load_vqa_rgb), counts only
    train     tiny: one GRPO arm for a block of seeds (agent.train_arm); full: GRPO of the VLM with
              LoRA and the zoom tool (vlm.train_arm), one unit per seed, checkpointed
    evaluate  tiny: greedy zoom and answer on the test split, numpy only: accuracy, grounding hit,
              rollouts per question in training, sd of the answer entropy; full: greedy tool-using
              rollouts of the VLM on VQA-RAD's test split (exact match)
Seeds are paired: every arm of a seed starts from the same base perception and sees the same
question order; the seed changes the zoom head's init, the questions drawn and the sampling.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from iclr26.core.io import load_arrays, read_json, save_arrays, write_json

from . import agent, data

DATASET = "vqa_rad"
PAPER_TRAINING_FREE = ("oracle_crop", "base_random_zoom")


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
        info = {"source": "hub", "hub_id": spec["hub_id"], "revision": spec["revision"], "files": files}
        model = job.cfg.get("model") or {}
        if model.get("source") and not Path(model["source"]).exists():   # a hub id: the pinned snapshot
            from iclr26.core.acquire import snapshot_model

            info["model"] = snapshot_model(model)
        return info
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
    if cfg["data"][DATASET]["source"] == "hub":
        return _prepare_vlm(job)
    train_set, vocab = arrays(cfg, job.raw_dir(), "train")
    test, _ = arrays(cfg, job.raw_dir(), "test", vocab)
    save_arrays(job.out_dir / "train.npz", **train_set)
    save_arrays(job.out_dir / "test.npz", **test)
    base, curve = agent.warm_start(train_set["glob"], train_set["crops"], train_set["cells"], train_set["labels"],
                                   len(vocab), cfg, cfg["agent"]["base_seed"])
    save_arrays(job.out_dir / "base.npz", **{f"p{i}": p for i, p in enumerate(base)})
    checks = {mode: float(agent.evaluate(base, None, test["glob"], test["crops"], test["labels"],
                                         test["cells"], mode)["accuracy"][0])
              for mode in ("oracle", "random", "blank")}
    checks["entropy_sd_random_zoom"] = float(agent.evaluate(base, None, test["glob"], test["crops"], test["labels"],
                                                            test["cells"], "random")["entropy_sd"][0])
    info = {"vocab": vocab, "n_train": len(train_set["labels"]), "n_test": len(test["labels"]),
            "warm_loss_first_last": [curve[0], curve[-1]], "base_accuracy": checks}
    job.log(f"base perception accuracy on test: {checks}")
    write_json(job.out_dir / "summary.json", info)
    return info


def _prepare_vlm(job) -> dict:
    """Full scale: both pinned splits through the RGB loader; the counts and answer types."""
    info = {}
    for split in ("train", "test"):
        rows = data.load_vqa_rgb(job.raw_dir(), split)
        closed = [a in ("yes", "no") for a in rows["answers"]]
        info[split] = {"rows": len(rows["answers"]), "closed": int(sum(closed)),
                       "min_side": int(min(min(im.size) for im in rows["images"]))}
    job.log(f"VQA-RAD rows: {info}")
    write_json(job.out_dir / "summary.json", info)
    return info


def _vlm_rows(job, split: str) -> dict:
    spec = job.cfg["data"][DATASET]
    return data.load_vqa_rgb(job.raw_dir(DATASET), split, spec.get(f"n_{split}"))


def _vlm_agent(job, adapter_dir=None, train: bool = False):
    from iclr26.core.acquire import model_path
    from iclr26.core.runtime import pick_device

    from . import vlm

    device = pick_device(job.cfg.get("device"))
    return vlm.load_agent(model_path(job.cfg["model"]), job.cfg["vlm"], job.cfg["train"] if train else None,
                          device, adapter_dir)


def _train_vlm(job) -> dict:
    """Full scale: GRPO with LoRA, one unit per seed (its adapters saved at the end); inside a unit
    the adapters, the optimiser, the step and the RNG are checkpointed every `train.checkpoint_every`
    steps and on SIGTERM, and a retry resumes there."""
    import torch
    from peft import get_peft_model_state_dict, set_peft_model_state_dict

    from iclr26.core.checkpoint import rng_state, set_rng_state

    from . import vlm

    rows = _vlm_rows(job, "train")

    def work(key):
        seed = int(key.split("_")[-1])
        agent = _vlm_agent(job, train=True)
        ckpt = job.checkpointer()
        state = ckpt.load()
        opt = torch.optim.AdamW([p for p in agent.model.parameters() if p.requires_grad], lr=job.cfg["train"]["lr"],
                                weight_decay=0.0)
        start, curve = 0, []
        if state is not None and state.get("seed") == seed:
            set_peft_model_state_dict(agent.model, state["adapter"])
            opt.load_state_dict(state["opt"])
            set_rng_state(state["rng"])
            start, curve = state["step"], list(state["curve"])
            job.log(f"resumed seed {seed} at step {start}")

        def on_step(step, opt):
            if ckpt.maybe_save(step + 1, lambda: {"seed": seed, "step": step + 1, "opt": opt.state_dict(),
                                                  "adapter": get_peft_model_state_dict(agent.model),
                                                  "rng": rng_state(), "curve": curve}):
                raise SystemExit("stopped on request after a checkpoint")

        vlm.train_arm(agent, rows, job.method, job.cfg["train"], seed, log=job.log, on_step=on_step,
                               start=start, opt=opt, curve=curve)
        agent.model.save_pretrained(job.out_dir / f"adapter_{seed}")
        ckpt.clear()
        rollouts = float(np.mean([c["rollouts_per_question"] for c in curve]))
        return {"rollouts_per_question": rollouts, "last_reward": curve[-1]["reward"],
                "tool_rate": float(np.mean([c["tool_rate"] for c in curve])),
                # how often the mechanisms act (audit 02b N3): printed beside the uncalibrated knobs
                "evr_branch_rate": float(np.mean([c.get("evr_branch_rate", 0.0) for c in curve])),
                "cca_fire_rate": float(np.mean([c.get("cca_fire_rate", 0.0) for c in curve]))}
    return {"units": job.units([f"{job.method}_{s}" for s in job.seeds], work)}


def _evaluate_vlm(job) -> dict:
    from . import vlm

    rows = _vlm_rows(job, "test")
    units = {} if job.method in PAPER_TRAINING_FREE else read_json(job.out_dir / "metrics.json").get("units", {})
    records = []
    for seed in job.seeds:
        adapter = None if job.method in PAPER_TRAINING_FREE else job.out_dir / f"adapter_{seed}"
        agent = _vlm_agent(job, adapter_dir=adapter)
        res = vlm.evaluate(agent, rows, use_tool=job.method != "global_only")
        train_info = units.get(f"{job.method}_{seed}", {})
        records.append({"seed": int(seed), "accuracy": res["accuracy"], "grounding_hit": float("nan"),
                        "entropy_sd": res["entropy_sd"],
                        "rollouts_per_question": float(train_info.get("rollouts_per_question", 1.0)),
                        "accuracy_closed": res["accuracy_closed"], "accuracy_open": res["accuracy_open"],
                        "tool_rate": res["tool_rate"],
                        "evr_branch_rate": float(train_info.get("evr_branch_rate", 0.0)),
                        "cca_fire_rate": float(train_info.get("cca_fire_rate", 0.0))})
    return {"records": records}


def _load(job):
    prep = job.prepared_dir(DATASET)
    base = load_arrays(prep / "base.npz")
    return (load_arrays(prep / "train.npz"), load_arrays(prep / "test.npz"),
            [base[f"p{i}"] for i in range(len(base))], read_json(prep / "summary.json"))


def train(job) -> dict:
    if job.cfg["data"][DATASET]["source"] == "hub":
        return _train_vlm(job)
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
    if job.cfg["data"][DATASET]["source"] == "hub":
        return _evaluate_vlm(job)
    _, test, base, _ = _load(job)
    seeds = list(job.seeds)
    if job.method in ("oracle_crop", "base_random_zoom"):   # the base perception, no training
        answer = [np.repeat(p, len(seeds), 0) for p in base]
        mode = "oracle" if job.method == "oracle_crop" else "random"
        res = agent.evaluate(answer, None, test["glob"], test["crops"], test["labels"], test["cells"], mode)
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
