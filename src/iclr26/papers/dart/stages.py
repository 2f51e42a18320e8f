"""Stages of DART (card 09): dual-level OT for audio-text retrieval.

    acquire   tiny/smoke: the Clotho-layout generator (data.py); full: Clotho v2.1 from Zenodo
              (development, validation, evaluation: md5-pinned captions CSVs and .7z audio
              archives, unpacked with py7zr or p7zip's 7z),
              the PANNs ResNet38 checkpoint (md5-pinned) and BERT at a pinned commit (full.py)
    prepare   model.encoder mlp (tiny, smoke): captions CSV + clips -> log-mel (core.audio) -> audio
              features; caption vocabulary. pretrained (full): clips -> 32 kHz waveforms, captions ->
              BERT token ids (full.py)
    train     per seed and cell (batch size x pair condition): mlp: audio MLP + text EmbeddingBag
              encoders (training.py); pretrained: ResNet38 + BERT with m-LTM's projection heads
              (encoders.py, full.py; the epoch selected on the validation split); the method's loss
              (iot | dart_no_ram | dart); saves test embeddings
    evaluate  R@1/5/10 audio->text (a hit: any of the clip's 5 captions) and text->audio (each
              caption a query), the Clotho protocol
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from iclr26.core.errors import ConfigError
from iclr26.core.io import load_arrays, read_json, save_arrays, write_json

from . import data
from .metrics import recalls


def acquire(job) -> dict:
    spec = job.cfg["data"][job.dataset]
    if spec["source"] == "zenodo":
        got = data.acquire_zenodo(spec, job.out_dir)
        if pretrained(job.cfg):
            from . import full

            got["encoders"] = full.acquire_encoders(job.cfg, job.out_dir)
        return got
    if spec["source"] != "synthetic":
        raise ConfigError(f"dart: data.clotho.source {spec['source']!r} is not synthetic or zenodo")
    return data.synthesise(spec, job.out_dir)


def pretrained(cfg: dict) -> bool:
    """model.encoder: mlp (the tiny design) or pretrained (ResNet38 + BERT, full scale)."""
    kind = cfg["model"].get("encoder", "mlp")
    if kind not in ("mlp", "pretrained"):
        raise ConfigError(f"dart: model.encoder {kind!r} is not mlp or pretrained")
    return kind == "pretrained"


def prepare(job) -> dict:
    spec = job.cfg["data"][job.dataset]
    if pretrained(job.cfg):
        from . import full

        return full.prepare(job.raw_dir(), job.out_dir, job.cfg, full.splits(job.cfg))
    dev_x, dev_c = data.read_split(job.raw_dir(), spec, "development")
    ev_x, ev_c = data.read_split(job.raw_dir(), spec, "evaluation")
    vocab = sorted({w for caps in dev_c for c in caps for w in data.tokens(c)})
    index = {w: i + 1 for i, w in enumerate(vocab)}          # 0: padding / unknown

    def encode(caps):
        toks = [[index.get(w, 0) for w in data.tokens(c)] for cs in caps for c in cs]
        width = max(len(t) for t in toks)
        return np.array([t + [0] * (width - len(t)) for t in toks], dtype=np.int64).reshape(len(caps), 5, width)

    mean, std = dev_x.mean(0), dev_x.std(0) + 1e-6
    save_arrays(job.out_dir / "features.npz", dev_x=(dev_x - mean) / std, ev_x=(ev_x - mean) / std,
                dev_t=encode(dev_c), ev_t=encode(ev_c))
    write_json(job.out_dir / "vocab.json", vocab)
    return {"development": len(dev_x), "evaluation": len(ev_x), "vocab": len(vocab)}


def cells(cfg: dict) -> list[tuple[int, str]]:
    return [(int(b), c) for b in cfg["train"]["batch_sizes"] for c in cfg["train"]["conditions"]]


def train(job) -> dict:
    import torch

    from . import training

    cfg = job.cfg
    if pretrained(cfg):
        from . import full

        f = full.load(job.prepared_dir("clotho"))

        def fit(method, batch, noise, seed):
            return full.fit(f, method, batch, noise, cfg, seed, job.raw_dir("clotho"), lambda m: job.log(m, 60.0))
    else:
        f = load_arrays(job.prepared_dir("clotho") / "features.npz")
        vocab = len(read_json(job.prepared_dir("clotho") / "vocab.json")) + 1

        def fit(method, batch, noise, seed):
            return training.fit(f, vocab, method, batch, noise, cfg, seed)

    def run(key: str) -> dict:
        seed, batch, cond = key.split("_")
        torch.manual_seed(int(seed))
        a_emb, t_emb, info = fit(job.method, int(batch), float(cfg["train"]["conditions"][cond]), int(seed))
        save_arrays(job.out_dir / f"emb_{key}.npz", audio=a_emb, text=t_emb)
        return info

    keys = [f"{s}_{b}_{c}" for s in job.seeds for b, c in cells(cfg)]
    done = job.units(keys, run)
    write_json(job.out_dir / "train_info.json", done)
    return {"units": len(done)}


def _num(x) -> float:
    """A train_info value; JSON stores nan (IOT and DART w/o RAM have no RAM marginal) as null."""
    return float("nan") if x is None else float(x)


def evaluate(job) -> dict:
    info = read_json(job.out_dir / "train_info.json")
    records = []
    for s in job.seeds:
        for b, c in cells(job.cfg):
            key = f"{s}_{b}_{c}"
            e = load_arrays(job.out_dir / f"emb_{key}.npz")
            records.append({"seed": int(s), "batch": b, "condition": c, **recalls(e["audio"], e["text"]),
                            **{k: _num(info[key].get(k)) for k in ("ram_ratio", "ram_nuis_corr")}})
    return {"records": records}


def figures(cfg: dict, records, out_dir) -> list[Path]:
    import pandas as pd

    from iclr26.core.figures import pyplot, save

    df = pd.DataFrame(records)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    groups = [(b, c) for b, c in cells(cfg)]
    methods = list(dict.fromkeys(df["method"]))
    for i, m in enumerate(methods):
        vals = [df[(df["method"] == m) & (df["batch"] == b) & (df["condition"] == c)]["r1_mean"].mean()
                for b, c in groups]
        ax.bar(np.arange(len(groups)) + i * 0.8 / len(methods), vals, 0.8 / len(methods), label=m)
    ax.set_xticks(np.arange(len(groups)) + 0.4 - 0.4 / len(methods), [f"B={b}, {c}" for b, c in groups])
    ax.set(ylabel="mean R@1 (A->T, T->A)")
    ax.legend(fontsize=7)
    return [save(fig, Path(out_dir) / "recall_grid.png")]
