"""Stages of card 14, encoder redundancy in multi-encoder MLLMs (arXiv 2507.03262).

    acquire   tiny/smoke: MiniMME train, val and test splits written as VLMEvalKit TSVs
              (minimme.write_tsv); full: VLMEvalKit's benchmark TSVs at their pinned URLs and md5s
              (core.acquire.download_pinned) and the model snapshots at pinned commits (full.py)
    prepare   tiny/smoke: minimme.to_arrays -> arrays.npz, and the pre-arm probe: a logistic regression
              on each encoder's input view per category (which encoder CAN read what);
              full: the same row reader (minimme.iter_rows) streams each TSV into items (JSON lines)
              and image files, no pixel arrays (each model family preprocesses its own resolution)
    train     tiny/smoke, per seed and world (asymmetric; control: every encoder sees the full image):
              stage 1, each encoder pretrained separately with its own head; stage 2, the frozen
              encoders' features concatenated and a fresh adapter + "LLM" trained (the full model), and
              re-trained subsets (dual, single) on the same pretrained encoders;
              full: nothing is trained (the paper masks released checkpoints): checks the snapshots
    evaluate  evaluation-only masked passes over all 2^n - 1 kept subsets (zero ablation as the
              authors' code; mean ablation a probe), CUR / IG per category (analysis.py), subsets
              chosen on validation items and scored on test items, the control world's IG, the
              variants' accuracy as % of the full model; full: full.evaluate_full
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from iclr26.core.io import load_arrays, save_arrays, write_json

from . import analysis, minimme

DATASET = "minimme"
SPLITS = ("train", "val", "test")


def _synthetic(cfg) -> bool:
    return cfg["data"][DATASET]["source"] == "synthetic"


def acquire(job) -> dict:
    spec = job.cfg["data"][job.dataset]
    if spec["source"] == "synthetic":
        g = spec["generator"]
        out = {split: minimme.write_tsv(job.out_dir / f"{split}.tsv", g[f"n_{split}_per_category"],
                                        spec["data_seed"] + i, g["noise"])
               for i, split in enumerate(SPLITS)}
        return {"source": "synthetic", **out}
    if spec["source"] == "vlmevalkit":
        from . import full

        return full.acquire_full(job)
    raise ValueError(f"data.{job.dataset}.source must be synthetic or vlmevalkit, got {spec['source']!r}")


def prepare(job) -> dict:
    spec = job.cfg["data"][job.dataset]
    if spec["source"] != "synthetic":   # stream every benchmark into items + image files (no pixels in RAM)
        out = {name: minimme.write_items(job.raw_dir() / f"{name}.tsv", job.out_dir / f"{name}.jsonl", b["group"])
               for name, b in spec["benchmarks"].items()}
        write_json(job.out_dir / "checks.json", {})
        return {"benchmarks": out}
    size = job.cfg["model"]["image_size"]
    arrays = {}
    for s in SPLITS:
        tab = minimme.to_arrays(job.raw_dir() / f"{s}.tsv", size)
        arrays.update({f"{s}_{k}": v for k, v in tab.items() if k != "skipped"})
    save_arrays(job.out_dir / "arrays.npz", **arrays)
    checks = probe_views(arrays, job.cfg)
    job.log(f"pre-arm checks: {checks}")
    write_json(job.out_dir / "checks.json", checks)
    return {s: int(len(arrays[f"{s}_y"])) for s in SPLITS} | {"checks": checks}


def probe_views(arrays: dict, cfg: dict) -> dict:
    """Pre-arm check: held-out accuracy of a logistic regression (scikit-learn) that reads ONE encoder's
    input view (what its architecture lets it see, before any learned layer) and predicts the answer,
    per category. Chance: 0.25 (MCQ), 0.1 (the open digit)."""
    import torch
    from sklearn.linear_model import LogisticRegression

    from .model import ENCODERS, Encoder

    n = cfg["eval"]["probe_items"]
    out = {}
    for kind in ENCODERS:
        enc = Encoder(kind, 1, cfg["model"]["noise_sigma"])
        views = {}
        for split in ("train", "test"):
            with torch.no_grad():
                v = enc.input_view(torch.as_tensor(arrays[f"{split}_x"]), torch.Generator().manual_seed(0))
            views[split] = v.flatten(1).numpy()
        out[kind] = {}
        for cat in minimme.CATEGORIES:
            tr = np.flatnonzero(arrays["train_category"] == cat)[:n]
            te = np.flatnonzero(arrays["test_category"] == cat)[:n]
            clf = LogisticRegression(max_iter=300).fit(views["train"][tr], arrays["train_y"][tr])
            out[kind][cat] = round(float((clf.predict(views["test"][te]) == arrays["test_y"][te]).mean()), 3)
    return out


def _tensors(arrays: dict, split: str) -> dict:
    import torch

    return {k: torch.as_tensor(arrays[f"{split}_{k}"]) for k in ("x", "q", "allowed", "y")}


WORLDS = {"asymmetric": "native", "control": "full"}


def _encoders(cfg, view, seed: int | None = None):
    """The four encoders of a world; with `seed`, each initialised from its own seed."""
    import torch

    from .model import ENCODERS, Encoder

    m = cfg["model"]
    out = []
    for i, k in enumerate(ENCODERS):
        if seed is not None:
            torch.manual_seed(1000 * seed + i)
        out.append(Encoder(k, m["width"], m["noise_sigma"], view))
    return out


def _head(cfg, n_enc):
    from .model import Head

    m = cfg["model"]
    return Head(m["width"] * n_enc, m["proj_dim"], m["hidden"], len(minimme.QUESTIONS), len(minimme.ANSWERS))


def _variants(cfg, world):
    return cfg["variants"] if world == "asymmetric" else {"full": cfg["variants"]["full"]}


def _feats(encs, x, seed):
    import torch

    from .model import features

    return torch.cat([features(e, x, 20_000 + seed) for e in encs], 1)


def _enc_feats(encs, x, seed) -> list:
    """Each encoder's features alone, as _feats computes them (each encoder draws from its own
    generator, so a variant's concatenation is a slice of these; tested)."""
    from .model import features

    return [features(e, x, 20_000 + seed) for e in encs]


def train(job) -> dict:
    if not _synthetic(job.cfg):
        from . import full

        return full.check_snapshots(job)
    import torch

    from iclr26.core.io import read_json

    from . import model

    cfg = job.cfg
    arrays = load_arrays(job.prepared_dir(DATASET) / "arrays.npz")
    data = _tensors(arrays, "train")
    names = list(model.ENCODERS)
    t = cfg["train"]
    cache = {}   # (world, seed) -> each frozen encoder's training features, shared by the stage-2 units

    def work(key):
        kind, world, seed = key.split("__")
        seed = int(seed[1:])
        encs = _encoders(cfg, WORLDS[world], seed)
        if kind == "encoders":   # stage 1: each encoder alone with its own head
            info = {}
            for i, enc in enumerate(encs):
                head = _head(cfg, 1)
                r = model.pretrain_encoder(enc, head, data, cfg, 1000 * seed + i)
                z = model.features(enc, data["x"], 20_000 + seed)
                cache.setdefault((world, seed), {})[i] = z
                solo = model.correct(head, z, data, [(1,)], cfg["model"]["width"])[0]
                info[names[i]] = {**r, "train_acc": float(solo.mean()),
                                  "macs": model.count_macs(enc, data["x"]),
                                  "head_macs": model.count_macs(head, z, data["q"], data["allowed"]),
                                  "params": int(sum(p.numel() for p in enc.parameters()))}
            torch.save([e.state_dict() for e in encs], job.out_dir / f"{key}.pt")
            job.log(f"{key}: {info}")
            return info
        variant = kind   # stage 2: frozen encoders, a fresh adapter + LLM on their concatenation
        pre = read_json(job.out_dir / "units" / f"encoders__{world}__s{seed}.json")["result"]
        for e, sd in zip(encs, torch.load(job.out_dir / f"encoders__{world}__s{seed}.pt", weights_only=True)):
            e.load_state_dict(sd)
        used = [names.index(n) for n in _variants(cfg, world)[variant]]
        got = cache.get((world, seed), {})
        if len(got) < len(encs):   # resumed after stage 1: compute them again (the same values)
            got = cache[(world, seed)] = dict(enumerate(_enc_feats(encs, data["x"], seed)))
        z = torch.cat([got[i] for i in used], 1)
        torch.manual_seed(seed)
        head = _head(cfg, len(used))
        info = model.train_head(head, z, data, cfg, seed)
        torch.save(head.state_dict(), job.out_dir / f"{key}.pt")
        head_macs = model.count_macs(head, z, data["q"], data["allowed"])
        enc_macs = sum(pre[names[i]]["macs"] for i in used)
        items, pre_items = t["steps"] * t["batch_size"], t["pretrain_steps"] * t["batch_size"]
        info.update({
            "params": int(sum(p.numel() for p in head.parameters())) + sum(pre[names[i]]["params"] for i in used),
            "macs": enc_macs + head_macs,
            "train_macs": sum(3 * (pre[names[i]]["macs"] + pre[names[i]]["head_macs"]) * pre_items for i in used)
            + enc_macs * len(data["y"]) + 3 * head_macs * items})
        job.log(f"{key}: {info}")
        return info

    keys = [f"encoders__{w}__s{s}" for s in job.seeds for w in WORLDS]
    keys += [f"{v}__{w}__s{s}" for s in job.seeds for w in WORLDS for v in _variants(cfg, w)]
    return {"units": job.units(keys, work)}


def evaluate(job) -> dict:
    if not _synthetic(job.cfg):
        from . import full

        return full.evaluate_full(job)
    import torch

    from iclr26.core.io import read_json

    from . import model

    cfg = job.cfg
    width = cfg["model"]["width"]
    arrays = load_arrays(job.prepared_dir(DATASET) / "arrays.npz")
    data = {s: _tensors(arrays, s) for s in SPLITS}
    cats = {s: arrays[f"{s}_category"] for s in SPLITS}
    names = list(model.ENCODERS)
    records = []
    for seed in job.seeds:
        world_recs = {}
        accs, train_accs, costs = {}, {}, {}
        for world, view in WORLDS.items():
            encs = _encoders(cfg, view)
            for e, sd in zip(encs, torch.load(job.out_dir / f"encoders__{world}__s{seed}.pt", weights_only=True)):
                e.load_state_dict(sd)
            world_recs[world] = []
            feats = {s: _enc_feats(encs, data[s]["x"], seed + 7 * k) for k, s in enumerate(SPLITS)}
            for variant, vnames in _variants(cfg, world).items():
                used = [names.index(n) for n in vnames]
                head = _head(cfg, len(used))
                head.load_state_dict(torch.load(job.out_dir / f"{variant}__{world}__s{seed}.pt", weights_only=True))
                # train (k = 0) draws with `seed`, as trained on
                z = {s: torch.cat([feats[s][i] for i in used], 1) for s in SPLITS}
                if world == "asymmetric":
                    costs[variant] = read_json(job.out_dir / "units" / f"{variant}__{world}__s{seed}.json")["result"]
                    all_kept = [tuple([1] * len(used))]
                    accs[variant] = {g: float(a[0]) for g, a in analysis.group_acc(
                        model.correct(head, z["test"], data["test"], all_kept, width), cats["test"]).items()}
                    train_accs[variant] = {g: float(a[0]) for g, a in analysis.group_acc(
                        model.correct(head, z["train"], data["train"], all_kept, width), cats["train"]).items()}
                if variant != "full":
                    continue
                keeps = model.keep_masks(len(used))
                mean = z["train"][: cfg["eval"]["mean_images"]].mean(0)
                for ablation in (cfg["eval"]["ablations"] if world == "asymmetric" else ["zero"]):
                    corr = {s: model.correct(head, z[s], data[s], keeps, width, ablation, mean)
                            for s in ("val", "test")}
                    world_recs[world] += analysis.mask_records(
                        corr["test"], cats["test"], corr["val"], cats["val"], keeps, tuple(vnames), ablation, seed,
                        minimme.CHANCE, world)
        records += world_recs["asymmetric"] + world_recs["control"]
        records += analysis.control_records(world_recs["asymmetric"], world_recs["control"], seed)
        records += analysis.variant_records(accs, train_accs, costs, seed)
    return {"records": records}


def figures(cfg: dict, records, out_dir) -> list[Path]:
    """Overall accuracy against the number of masked encoders (max / min / mean over subsets), per
    ablation, and the CUR of each encoder per category (zero ablation), mean over seeds, for the
    asymmetric and the control world."""
    from iclr26.core.figures import pyplot, save

    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.2))
    world = records["world"] if "world" in records else ""
    deg = records[(records["kind"] == "degrade") & (records["category"] == "overall") & (world != "control")]
    for abl, style in (("zero", "-"), ("mean", "--")):
        for stat in ("max", "mean", "min"):
            d = deg[(deg["ablation"] == abl) & (deg["stat"] == stat)].groupby("n_masked")["acc"].mean()
            axes[0].plot(d.index, d.values, style, marker="o", label=f"{stat} ({abl})")
    axes[0].set_xlabel("encoders masked")
    axes[0].set_ylabel("overall accuracy")
    axes[0].legend(fontsize=6)
    for ax, w in zip(axes[1:], ("asymmetric", "control")):
        c = records[(records["kind"] == "cur") & (records["ablation"] == "zero") & (world == w)]
        cats = [g for g in ("general", "knowledge", "ocr", "vision") if (c["category"] == g).any()]
        encs = list(dict.fromkeys(c["encoder"]))
        for i, e in enumerate(encs):
            vals = [c[(c["category"] == g) & (c["encoder"] == e)]["cur"].astype(float).mean() for g in cats]
            ax.bar(np.arange(len(cats)) + i * 0.8 / max(len(encs), 1), vals, 0.8 / max(len(encs), 1), label=e)
        ax.set_xticks(np.arange(len(cats)) + 0.3, cats)
        ax.axhline(0, color="k", lw=0.5)
        ax.set_ylabel(f"CUR (zero ablation, {w} world)")
        ax.legend(fontsize=6)
    fig.tight_layout()
    return [save(fig, Path(out_dir) / "masking.png")]
