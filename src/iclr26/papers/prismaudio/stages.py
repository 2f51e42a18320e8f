"""Stages of PrismAudio (arXiv 2511.18833): multi-dimensional-reward GRPO for video-to-audio.

    acquire   tiny/smoke: the seeded VGGSound-layout generator (data.py); full: vggsound.csv and
              the pinned tar.gz shards of the hub mirror (core.acquire, resumable, sha256), the
              clips the CSV names extracted to wav (core.audio), the official checkpoints
    prepare   ONE reader for every scale: clips -> log-mel (torchaudio) -> normalised features,
              conditions (the clip's condition file; full: derived, see deviations), reward
              references, the held-out checks; then, per seed, the base generator's flow-matching
              pre-training and the pre-arm checks (reward correlation, headroom, group spread)
    train     GRPO from the seed's base model: single-reward (semantic) Fast-GRPO, multi-reward
              Flow-GRPO (SDE at every step), multi-reward Fast-GRPO; counts NFE and CPU seconds
    evaluate  ODE samples on the clean test clips: four reward dimensions, held-out classifier
              accuracy, Frechet distance, the arm's training cost; one record per seed
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from iclr26.core.acquire import download
from iclr26.core.audio import MelSpec, extract_tar_audio, log_mel, read_clip, read_vggsound_csv
from iclr26.core.errors import DataError
from iclr26.core.io import load_arrays, read_json, save_arrays, write_json

from . import data, rewards

MODES = {"grpo_semantic": "fast", "flow_grpo": "flow", "fast_grpo": "fast"}


def _spec(cfg: dict) -> MelSpec:
    return MelSpec.from_cfg(cfg["data"]["vggsound"]["mel"])


# ----------------------------------------------------------------------------- acquire
def hub_url(hub_id: str, revision: str, file: str) -> str:
    return f"https://huggingface.co/datasets/{hub_id}/resolve/{revision}/{file}"


def acquire(job) -> dict:
    spec = job.cfg["data"][job.dataset]
    if spec["source"] == "synthetic":
        return data.synthesise(spec, job.out_dir)
    if spec["source"] != "hub":
        raise DataError(f"prismaudio: unknown data source {spec['source']!r}")
    base = spec.get("base_url") or None   # a mirror / loopback server laid out as the hub's resolve URLs
    table = spec["table"]
    url = f"{base}/{table['file']}" if base else hub_url(table["hub_id"], table["revision"], table["file"])
    download(url, job.out_dir / "vggsound.csv", table.get("sha256"))
    rows = read_vggsound_csv(job.out_dir / "vggsound.csv")
    wanted = {r["clip"] for r in rows}
    mel = _spec(job.cfg)
    extracted = 0
    for shard in spec["shards"]:
        url = f"{base}/{shard['file']}" if base else shard["url"]
        path = download(url, job.out_dir / "shards" / shard["file"], shard["sha256"],
                        progress=lambda done, total, f=shard["file"]: job.log(f"{f}: {done}/{total} bytes", every_s=60))
        extracted += len(extract_tar_audio(path, wanted, job.out_dir / "clips", mel.sample_rate, 2))
        if not spec.get("keep_shards", False):
            path.unlink()
            path.with_name(path.name + ".done").write_text(shard["sha256"])
    for f in (spec.get("official") or {}).get("files", []):   # acquired and checksummed; not run (deviations)
        url = f"{base}/{f['file']}" if base else f["url"]
        download(url, job.out_dir / "official" / f["file"], f["sha256"])
    return {"rows": len(rows), "clips": extracted, "shards": len(spec["shards"])}


# ----------------------------------------------------------------------------- prepare
def _conditions(raw: Path, rows: list[dict], db: np.ndarray, cfg: dict) -> dict[str, np.ndarray]:
    """Per clip: condition vector [mean video features, sync features, CoT text features] and the
    rewards' references (onset frame, pan). From the clip's condition file when there is one
    (tiny); otherwise derived from the label and the reference clip (full: see deviations)."""
    conds, onsets, pans = [], [], []
    for row, clip_db in zip(rows, db):
        path = raw / "features" / f"{row['clip']}.npz"
        if path.exists():
            f = load_arrays(path)
            video, sync, text = f["video_features"], f["sync_features"], f["text_features"]
            onset, pan = int(f["onset_frame"]), float(f["pan"])
        else:
            # TARGET LEAK (full only, printed in full.yaml's deviations): onset and pan are read
            # from the target clip itself and fed back as conditions (no video features here)
            onset = int(rewards.onset_frame(clip_db[None])[0])
            pan = float(rewards.level_index(clip_db[None])[0])
            frames = clip_db.shape[-1]
            energy = (10.0 ** (clip_db / 10.0)).sum(axis=(0, 1))
            sync = (energy / energy.max()).astype(np.float32)
            code = data.token_vector(row["label"])
            video = np.zeros((frames, int(cfg["video"]["dims"])), np.float32)
            video[:, : len(code)] = code
            video[:, len(code)] = pan
            text = data.text_features(data.cot_text(row["label"], onset, frames, pan))
        conds.append(np.concatenate([video.mean(0), sync, text]))
        onsets.append(onset)
        pans.append(pan)
    return {"cond": np.stack(conds).astype(np.float32), "onset": np.array(onsets), "pan": np.array(pans, np.float32)}


def read_split(raw: Path, cfg: dict, split: str, labels: list[str]) -> dict[str, np.ndarray]:
    """Every clip of `split` that is on disk: log-mel dB (N, 2, M, T), conditions, references."""
    spec = MelSpec.from_cfg(cfg["mel"])
    rows = [r for r in read_vggsound_csv(raw / "vggsound.csv")
            if r["split"] == split and r["label"] in labels and (raw / "clips" / f"{r['clip']}.wav").exists()]
    if cfg.get("max_per_split"):
        rows = rows[: int(cfg["max_per_split"])]
    if not rows:
        raise DataError(f"prismaudio: no {split} clips under {raw / 'clips'}")
    waves = np.stack([read_clip(raw / "clips" / f"{r['clip']}.wav", spec.sample_rate, 2, spec.num_samples)
                      for r in rows])
    db = log_mel(waves, spec)
    return {"db": db, "label": np.array([labels.index(r["label"]) for r in rows]), **_conditions(raw, rows, db, cfg)}


def _labels(raw: Path, cfg: dict) -> list[str]:
    """The n_classes most frequent labels among the clips on disk (ties: alphabetical)."""
    from collections import Counter

    rows = read_vggsound_csv(raw / "vggsound.csv")
    counts = Counter(r["label"] for r in rows if (raw / "clips" / f"{r['clip']}.wav").exists())
    return sorted(counts, key=lambda label: (-counts[label], label))[: int(cfg["n_classes"])]


def prepare(job) -> dict:
    import torch

    cfg, dcfg = job.cfg, job.cfg["data"][job.dataset]
    raw = job.raw_dir()
    labels = _labels(raw, dcfg)
    train, test = read_split(raw, dcfg, "train", labels), read_split(raw, dcfg, "test", labels)
    mean, std = float(train["db"].mean()), float(train["db"].std())
    checks = rewards.fit_checks((train["db"] - mean) / std, train["label"], int(cfg["eval"]["pca_dims"]), 0)
    save_arrays(job.out_dir / "features.npz", mean=mean, std=std,
                templates=rewards.class_templates(train["db"], train["label"], len(labels)),
                **{f"train_{k}": v for k, v in train.items()}, **{f"test_{k}": v for k, v in test.items()}, **checks)
    write_json(job.out_dir / "labels.json", labels)
    prepared = load_prepared(job.out_dir)

    def base_model(key: str) -> dict:
        seed = int(key.split("_")[1])
        torch.manual_seed(seed)
        gen = torch.Generator().manual_seed(seed)
        net = new_net(cfg, prepared)
        tcfg = cfg["pretrain"]
        started = time.process_time()
        losses = flow().pretrain(net, prepared["x_train"], prepared["c_train"], int(tcfg["steps"]),
                                 int(tcfg["batch"]), float(tcfg["lr"]), gen)
        torch.save(net.state_dict(), job.out_dir / f"base_seed{seed}.pt")
        return {"seed": seed, "final_loss": float(np.mean(losses[-20:])), "cpu_s": time.process_time() - started,
                **prearm_checks(net, prepared, cfg, seed)}

    done = job.units([f"seed_{s}" for s in cfg["seeds"]], base_model)
    write_json(job.out_dir / "prearm.json", {str(v["seed"]): v for v in done.values()})
    return {"labels": len(labels), "train": len(train["label"]), "test": len(test["label"]),
            "prearm": {k: {m: round(v[m], 4) for m in PREARM} for k, v in done.items()}}


PREARM = ("max_reward_corr", "min_group_spread", "headroom_semantic", "headroom_temporal", "headroom_spatial",
          "headroom_aesthetic", "headroom_reward")
EVAL_NOISE = 20_000   # + seed: the test noise of every arm's evaluation (and of the base reward below)


def flow():
    from . import flow as module

    return module


def load_prepared(folder: Path) -> dict:
    import torch

    a = load_arrays(folder / "features.npz")
    out = {k: a[k] for k in a}
    for split in ("train", "test"):
        out[f"x_{split}"] = torch.as_tensor(((a[f"{split}_db"] - a["mean"]) / a["std"]).reshape(
            len(a[f"{split}_db"]), -1), dtype=torch.float32)
        out[f"c_{split}"] = torch.as_tensor(a[f"{split}_cond"], dtype=torch.float32)
    out["shape"] = a["train_db"].shape[1:]
    return out


def new_net(cfg: dict, prepared: dict):
    m = cfg["model"]
    return flow().FlowNet(prepared["x_train"].shape[1], prepared["c_train"].shape[1], int(m["hidden"]), int(m["depth"]))


def to_db(prepared: dict, x: np.ndarray, top_db: float) -> np.ndarray:
    """Normalised features -> dB, clamped as real clips are (rewards.clamp_db; audit 06 M2)."""
    db = (x * float(prepared["std"]) + float(prepared["mean"])).reshape(len(x), *prepared["shape"])
    return rewards.clamp_db(db, float(prepared["train_db"].max()), top_db)


def score_split(prepared: dict, cfg: dict, x: np.ndarray, split: str, rows: np.ndarray | None = None) -> dict:
    rows = np.arange(len(x)) if rows is None else rows
    top_db = float(cfg["data"]["vggsound"]["mel"]["top_db"])
    return rewards.scores(to_db(prepared, x, top_db), prepared[f"{split}_label"][rows],
                          prepared[f"{split}_onset"][rows], prepared[f"{split}_pan"][rows], prepared["templates"],
                          top_db)


def prearm_checks(net, prepared: dict, cfg: dict, seed: int) -> dict:
    """Before any arm runs (card 6.6): are the four rewards distinct (not perfectly correlated on
    the base model's samples), is there room to improve each (clean test clips score higher than
    the base's samples), and does the Fast-GRPO window move each reward within a group?"""
    import torch

    fl = flow()
    rcfg = cfg["grpo"]
    gen = torch.Generator().manual_seed(50_000 + seed)
    x = fl.sample_ode(net, prepared["c_test"], int(rcfg["n_steps"]), gen, prepared["x_test"].shape[1]).numpy()
    base, clean = score_split(prepared, cfg, x, "test"), score_split(prepared, cfg, prepared["x_test"].numpy(), "test")
    weights = reward_weights(cfg, "fast_grpo")
    eval_gen = torch.Generator().manual_seed(EVAL_NOISE + seed)     # the evaluation's test noise
    x_eval = fl.sample_ode(net, prepared["c_test"], int(rcfg["n_steps"]), eval_gen, prepared["x_test"].shape[1]).numpy()
    base_reward = float(rewards.weighted(score_split(prepared, cfg, x_eval, "test"), weights).mean())
    corr = np.corrcoef(np.stack([base[d] for d in rewards.DIMS]))
    corr = np.nan_to_num(corr, nan=1.0)
    off = np.abs(corr[~np.eye(len(rewards.DIMS), dtype=bool)])
    idx = torch.arange(min(int(rcfg["prompts"]), len(prepared["c_train"])))
    roll = fl.rollout(net, prepared["c_train"][idx], int(rcfg["group"]), "fast", rcfg, gen)
    rows = idx.repeat_interleave(int(rcfg["group"])).numpy()
    s = score_split(prepared, cfg, roll.x0.numpy(), "train", rows)
    spread = {d: float(s[d].reshape(-1, int(rcfg["group"])).std(1).mean()) for d in rewards.DIMS}
    return {"max_reward_corr": float(off.max()), "min_group_spread": min(spread.values()),
            **{f"spread_{d}": v for d, v in spread.items()},
            **{f"headroom_{d}": float(clean[d].mean() - base[d].mean()) for d in rewards.DIMS},
            "base_reward": base_reward,
            "headroom_reward": float(rewards.weighted(clean, weights).mean()) - base_reward}


# ----------------------------------------------------------------------------- train
def reward_weights(cfg: dict, method: str) -> dict[str, float]:
    return dict(cfg["arms"][method]["weights"])


def train(job) -> dict:
    import torch

    cfg, method = job.cfg, job.method
    prepared = load_prepared(job.prepared_dir("vggsound"))
    weights = reward_weights(cfg, method)
    fl = flow()

    def reward_fn(x0: np.ndarray, rows: np.ndarray) -> np.ndarray:
        return rewards.weighted(score_split(prepared, cfg, x0, "train", rows), weights)

    def run(key: str) -> dict:
        seed = int(key.split("_")[1])
        torch.manual_seed(seed)
        base = new_net(cfg, prepared)
        base.load_state_dict(torch.load(job.prepared_dir("vggsound") / f"base_seed{seed}.pt", weights_only=True))
        wall = time.time()
        policy, counts, curve = fl.train_grpo(base, {"cond": prepared["c_train"]}, reward_fn, MODES[method],
                                              cfg["grpo"], 1000 + seed, job.log)
        torch.save(policy.state_dict(), job.out_dir / f"policy_seed{seed}.pt")
        return {**counts, "wall_s": round(time.time() - wall, 3), "curve": curve}

    done = job.units([f"seed_{s}" for s in job.seeds], run)
    write_json(job.out_dir / "train_counts.json", done)
    return {k: {m: v[m] for m in ("grad_steps", "nfe_fwd", "nfe_bwd", "cpu_s", "wall_s")} for k, v in done.items()}


# ----------------------------------------------------------------------------- evaluate
def evaluate(job) -> dict:
    import torch

    cfg, method = job.cfg, job.method
    prep_dir = job.prepared_dir("vggsound")
    prepared = load_prepared(prep_dir)
    prearm = read_json(prep_dir / "prearm.json")
    counts = read_json(job.out_dir / "train_counts.json") if method in MODES else {}
    weights = reward_weights(cfg, "fast_grpo")   # the multi-dimensional reward scores every arm
    records = []
    for seed in job.seeds:
        net = new_net(cfg, prepared)
        path = job.out_dir / f"policy_seed{seed}.pt" if method in MODES else prep_dir / f"base_seed{seed}.pt"
        net.load_state_dict(torch.load(path, weights_only=True))
        gen = torch.Generator().manual_seed(EVAL_NOISE + seed)   # the same test noise for every arm
        x = flow().sample_ode(net, prepared["c_test"], int(cfg["grpo"]["n_steps"]), gen,
                              prepared["x_test"].shape[1]).numpy()
        s = score_split(prepared, cfg, x, "test")
        c = counts.get(f"seed_{seed}", {})
        reward = float(rewards.weighted(s, weights).mean())
        gain = reward - float(prearm[str(seed)]["base_reward"])
        records.append({
            "seed": int(seed), "split": "test",
            "semantic": float(s["semantic"].mean()), "onset_err": float(s["onset_err"].mean()),
            "pan_err": float(s["pan_err"].mean()), "aesthetic": float(s["aesthetic"].mean()),
            "reward": reward, "reward_gain": gain,
            "gain_frac": gain / float(prearm[str(seed)]["headroom_reward"]),
            "heldout_acc": rewards.heldout_accuracy(prepared, x, prepared["test_label"]),
            "fd": rewards.frechet_distance(prepared, x, prepared["x_test"].numpy()),
            "grad_steps": int(c.get("grad_steps", 0)), "nfe_fwd": int(c.get("nfe_fwd", 0)),
            "nfe_bwd": int(c.get("nfe_bwd", 0)),
            **{m: float(prearm[str(seed)][m]) for m in PREARM},
            # the stored training curves (list columns: in the resume test, not in the golden CSV)
            "curve_reward": [float(v) for v in c.get("curve", [])],
            "curve_nfe": [int(v) for v in c.get("curve_nfe", [])],
        })
    return {"records": records}


def figures(cfg: dict, records, out_dir) -> list[Path]:
    from . import plots

    return plots.make_all(cfg, records, Path(out_dir))
