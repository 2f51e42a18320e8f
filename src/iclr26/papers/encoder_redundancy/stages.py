"""Stages of card 14, encoder redundancy in multi-encoder MLLMs (arXiv 2507.03262).

    acquire   tiny/smoke: MiniMME train and test splits written as VLMEvalKit MCQ TSVs (minimme.write_tsv);
              full: VLMEvalKit's benchmark TSVs at their pinned URLs and md5s (core.acquire.download_pinned)
    prepare   the same loader for both (minimme.read_tsv) -> arrays.npz; the pre-arm check at tiny/smoke:
              a logistic-regression probe on each encoder's input view per category (does the
              generator give the categories different encoder needs, and which?)
    train     per seed: the full multi-encoder model and each re-trained encoder subset (variants),
              trained from scratch with the same step budget -> <variant>_s<seed>.pt
    evaluate  evaluation-only masked passes of the full model over all 2^n - 1 kept subsets (zero and
              mean ablation), CUR / IG per category (analysis.py); the variants' accuracy as % of the
              full model, parameters, MACs per item, training seconds
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from iclr26.core.io import load_arrays, save_arrays, write_json

from . import analysis, minimme

DATASET = "minimme"


def acquire(job) -> dict:
    spec = job.cfg["data"][job.dataset]
    if spec["source"] == "synthetic":
        g = spec["generator"]
        out = {split: minimme.write_tsv(job.out_dir / f"{split}.tsv", g[f"n_{split}_per_category"],
                                        spec["data_seed"] + i, g["noise"])
               for i, split in enumerate(("train", "test"))}
        return {"source": "synthetic", **out}
    if spec["source"] == "vlmevalkit":
        from iclr26.core.acquire import download_pinned

        return {"source": "vlmevalkit", "files": {name: download_pinned(b, job.out_dir / f"{name}.tsv")
                                                  for name, b in spec["benchmarks"].items()}}
    raise ValueError(f"data.{job.dataset}.source must be synthetic or vlmevalkit, got {spec['source']!r}")


def prepare(job) -> dict:
    spec = job.cfg["data"][job.dataset]
    size = job.cfg["model"]["image_size"]
    if spec["source"] == "synthetic":
        parts = {s: minimme.read_tsv(job.raw_dir() / f"{s}.tsv", size) for s in ("train", "test")}
    else:   # every benchmark is test data; its rows take the benchmark's group as category
        tabs = [minimme.read_tsv(job.raw_dir() / f"{n}.tsv", size, category_map=None) for n in spec["benchmarks"]]
        for tab, b in zip(tabs, spec["benchmarks"].values()):
            tab["category"] = np.full(len(tab["answer"]), b["group"])
        parts = {"test": {k: np.concatenate([t[k] for t in tabs]) for k in tabs[0] if k != "skipped"}}
    arrays = {}
    for split, tab in parts.items():
        arrays.update({f"{split}_x": tab["image"], f"{split}_q": minimme.question_ids(tab["question"]),
                       f"{split}_o": minimme.answer_ids(tab["options"]), f"{split}_y": tab["answer"],
                       f"{split}_category": tab["category"]})
    save_arrays(job.out_dir / "arrays.npz", **arrays)
    checks = probe_views(arrays, job.cfg) if "train_x" in arrays else {}
    job.log(f"pre-arm checks: {checks}")
    write_json(job.out_dir / "checks.json", checks)
    return {split: int(len(tab["answer"])) for split, tab in parts.items()} | {"checks": checks}


def probe_views(arrays: dict, cfg: dict) -> dict:
    """Pre-arm check: held-out accuracy of a logistic regression (scikit-learn) that reads ONE encoder's
    input view (what its architecture lets it see, before any learned layer) and predicts the answer,
    per category. Chance is 1 / (number of answers of the category)."""
    import torch
    from sklearn.linear_model import LogisticRegression
    from torch.nn import functional as F

    from .model import ENCODERS, Encoder

    n = cfg["eval"]["probe_items"]
    out = {}
    for kind in ENCODERS:
        enc = Encoder(kind, 1, cfg["model"]["noise_sigma"])
        views = {}
        for split in ("train", "test"):
            x = torch.as_tensor(arrays[f"{split}_x"])
            with torch.no_grad():
                if kind == "global":
                    v = F.avg_pool2d(x, 4)
                elif kind == "edge":
                    from .model import _grey
                    g = F.conv2d(_grey(x), enc.sobel, padding=1)
                    v = F.avg_pool2d(g.pow(2).sum(1, keepdim=True).sqrt(), 2)
                elif kind == "fine":
                    from .model import _grey
                    v = _grey(x)
                else:
                    gen = torch.Generator().manual_seed(0)
                    v = F.avg_pool2d(x + enc.noise * torch.randn(x.shape, generator=gen), 2)
            views[split] = v.flatten(1).numpy()
        out[kind] = {}
        for cat in minimme.CATEGORIES:
            tr = np.flatnonzero(arrays["train_category"] == cat)[:n]
            te = np.flatnonzero(arrays["test_category"] == cat)[:n]
            ytr = arrays["train_o"][tr, arrays["train_y"][tr]]
            yte = arrays["test_o"][te, arrays["test_y"][te]]
            clf = LogisticRegression(max_iter=300).fit(views["train"][tr], ytr)
            out[kind][cat] = round(float((clf.predict(views["test"][te]) == yte).mean()), 3)
    return out


def _tensors(arrays: dict, split: str) -> dict:
    import torch

    return {"x": torch.as_tensor(arrays[f"{split}_x"]), "q": torch.as_tensor(arrays[f"{split}_q"]),
            "o": torch.as_tensor(arrays[f"{split}_o"]), "y": torch.as_tensor(arrays[f"{split}_y"])}


FULL_NOT_WIRED = ("full-scale masked evaluation of the hub checkpoints (model.checkpoints) is not wired: each "
                  "family needs its own code base to mask an encoder (NVlabs/Eagle, cambrian-mllm/cambrian, "
                  "deepseek-ai/DeepSeek-VL)")


def train(job) -> dict:
    if job.cfg["data"][DATASET]["source"] != "synthetic":
        raise NotImplementedError(FULL_NOT_WIRED)
    import torch

    from iclr26.core.runtime import pick_device

    from . import model

    device = pick_device(job.cfg.get("device"))
    arrays = load_arrays(job.prepared_dir(DATASET) / "arrays.npz")
    data = _tensors(arrays, "train")
    nq, na = len(minimme.QUESTIONS), len(minimme.ANSWERS)

    def work(key):
        variant, seed = key.rsplit("_s", 1)
        torch.manual_seed(int(seed))   # the initialisation depends on the seed only, not on earlier units
        net = model.build(job.cfg["variants"][variant], job.cfg, nq, na)
        info = model.train(net, data, job.cfg, int(seed), device)
        info["params"] = int(sum(p.numel() for p in net.parameters()))
        info["macs"] = model.count_macs(net.cpu(), data["x"], data["q"], data["o"])
        info["train_macs"] = 3 * info["macs"] * job.cfg["train"]["steps"] * job.cfg["train"]["batch_size"]
        torch.save(net.state_dict(), job.out_dir / f"{key}.pt")
        job.log(f"{key}: {info}")
        return info

    keys = [f"{v}_s{s}" for s in job.seeds for v in job.cfg["variants"]]
    return {"units": job.units(keys, work)}


def evaluate(job) -> dict:
    if job.cfg["data"][DATASET]["source"] != "synthetic":
        raise NotImplementedError(FULL_NOT_WIRED)
    import torch

    from iclr26.core.io import read_json
    from iclr26.core.runtime import pick_device

    from . import model

    cfg = job.cfg
    device = pick_device(cfg.get("device"))
    arrays = load_arrays(job.prepared_dir(DATASET) / "arrays.npz")
    data, cats = _tensors(arrays, "test"), arrays["test_category"]
    nq, na = len(minimme.QUESTIONS), len(minimme.ANSWERS)
    records = []
    for seed in job.seeds:
        accs, costs = {}, {}
        for variant, names in cfg["variants"].items():
            net = model.build(names, cfg, nq, na)
            net.load_state_dict(torch.load(job.out_dir / f"{variant}_s{seed}.pt", weights_only=True))
            costs[variant] = read_json(job.out_dir / "units" / f"{variant}_s{seed}.json")["result"]
            if variant == "full":   # evaluation-only masked passes of the trained full model
                keeps = model.keep_masks(len(names))
                for ablation in cfg["eval"]["ablations"]:
                    corr = model.correct(net, data, keeps, ablation, seed, device)
                    records += analysis.mask_records(corr, cats, keeps, tuple(names), ablation, seed)
                    if ablation == cfg["eval"]["ablations"][0]:
                        accs[variant] = {g: float(a[0]) for g, a in analysis.group_acc(corr, cats).items()}
            else:
                corr = model.correct(net, data, [tuple([1] * len(names))], "zero", seed, device)
                accs[variant] = {g: float(a[0]) for g, a in analysis.group_acc(corr, cats).items()}
        records += analysis.variant_records(accs, costs, seed)
    return {"records": records}


def figures(cfg: dict, records, out_dir) -> list[Path]:
    """Overall accuracy against the number of masked encoders (max / min / mean over subsets), per
    ablation, and the CUR of each encoder per category (zero ablation), mean over seeds."""
    from iclr26.core.figures import pyplot, save

    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
    deg = records[(records["kind"] == "degrade") & (records["category"] == "overall")]
    for abl, style in (("zero", "-"), ("mean", "--")):
        for stat in ("max", "mean", "min"):
            d = deg[(deg["ablation"] == abl) & (deg["stat"] == stat)].groupby("n_masked")["acc"].mean()
            axes[0].plot(d.index, d.values, style, marker="o", label=f"{stat} ({abl})")
    axes[0].set_xlabel("encoders masked")
    axes[0].set_ylabel("overall accuracy")
    axes[0].legend(fontsize=6)
    c = records[(records["kind"] == "cur") & (records["ablation"] == "zero")]
    cats = [g for g in ("general", "knowledge", "ocr", "vision") if (c["category"] == g).any()]
    encs = list(dict.fromkeys(c["encoder"]))
    for i, e in enumerate(encs):
        vals = [c[(c["category"] == g) & (c["encoder"] == e)]["cur"].astype(float).mean() for g in cats]
        axes[1].bar(np.arange(len(cats)) + i * 0.8 / max(len(encs), 1), vals, 0.8 / max(len(encs), 1), label=e)
    axes[1].set_xticks(np.arange(len(cats)) + 0.3, cats)
    axes[1].axhline(0, color="k", lw=0.5)
    axes[1].set_ylabel("CUR (zero ablation)")
    axes[1].legend(fontsize=6)
    fig.tight_layout()
    return [save(fig, Path(out_dir) / "masking.png")]
