"""Stages of card 15, video scene segmentation with genre and duration signals (BaSSL-lite base).

acquire   tiny/smoke: per world (hypothesis: assumptions A, B, C on; null: off) and seed, synthetic
          movies written in MovieNet-SSeg's layout (movienet.write_world); both worlds from the same
          seed, so they differ only in A, B, C. full: BaSSL's anno.tar (core.acquire.download; its
          sha256 is checked where the config pins one, else the digest of the download is recorded:
          trust on first use) and torchvision's ResNet-50 IMAGENET1K_V2 weights (pinned url and
          sha256); MovieNet's key frames, meta files, video-info file and scene318 folder are checked
          where they were placed by hand (160 GB and a Google Drive step: one line says what goes where).
prepare   full: MovieNet's files -> the layout (movienet.convert_movienet: BaSSL's anno files, shot
          times from the shot files at each movie's fps from MovieNet's video-info file, genres from the
          meta files; pretraining movies that cannot be converted are left out and counted, labelled
          ones stop prepare) and the key-frame features
          (keyframes.py: frozen ResNet-50, one unit per movie); then, at every scale, the data checks
          per world and seed (movienet.mechanism_checks), before any arm runs.
train     per row, world and seed, one unit: BaSSL-lite pretraining on the pretrain split (the row's
          variant: genre prior, duration anchors, shuffled genres), fine-tuning on train, boundary
          scores of the test split, each reading the row has (bassl.py). test_split retrains bassl's
          model (same seed: the same model) so that every job reads only its own outputs.
evaluate  BaSSL's metrics (AP, mIoU in time, F1 at 0.5) of each reading's scores, per world and seed.
"""
from __future__ import annotations

import json
import tarfile
from pathlib import Path

import numpy as np

from iclr26.core.io import load_arrays, save_arrays

from . import movienet

DATASET = "movienet"
# row -> pretraining variant (genre prior, duration anchors), test-time split, genres shuffled across movies
ROWS = {"bassl": ("base", False, False), "genre_prior": ("genre", False, False),
        "genre_shuffled": ("genre", False, True), "duration_anchor": ("duration", False, False),
        "test_split": ("base", True, False), "all_three": ("genre_duration", True, False)}
VARIANTS = {"base": (False, False), "genre": (True, False), "duration": (False, True),
            "genre_duration": (True, True)}


def world_dirs(cfg: dict, raw: Path, prepared: Path, seed: int) -> dict[str, Path]:
    """Where each world's files in the layout are: the synthetic worlds as acquire wrote them; MovieNet
    as prepare converted it."""
    spec = cfg["data"][DATASET]
    if spec["source"] == "synthetic":
        return {w: Path(raw) / w / f"s{seed}" for w in spec["worlds"]}
    return {"movienet": Path(prepared) / "movienet"}


def row_dirs(job, seed: int) -> dict[str, Path]:
    """The worlds a row runs in: every world, but the shuffled-genre control only in
    controls.genre_shuffled_worlds (its question, whether the genre prior's gain needs the right genre,
    lives where genre carries a signal)."""
    dirs = world_dirs(job.cfg, job.raw_dir(DATASET), job.prepared_dir(DATASET), seed)
    if job.method == "genre_shuffled":
        dirs = {w: d for w, d in dirs.items() if w in job.cfg["controls"]["genre_shuffled_worlds"]}
    return dirs


def acquire(job) -> dict:
    spec = job.cfg["data"][job.dataset]
    if spec["source"] == "synthetic":
        out = {}
        for world in spec["worlds"]:
            for seed in job.cfg["seeds"]:
                d = world_dirs(job.cfg, job.out_dir, job.out_dir, seed)[world]
                out[f"{world}_s{seed}"] = movienet.write_world(d, world, spec, spec["data_seed"] + seed)
        return {"source": "synthetic", "movies": out}
    if spec["source"] == "movienet":
        return _acquire_movienet(job, spec)
    raise ValueError(f"data.{job.dataset}.source must be synthetic or movienet, got {spec['source']!r}")


def _acquire_movienet(job, spec: dict) -> dict:
    from iclr26.core.acquire import download, download_pinned
    from iclr26.core.errors import DataError
    from iclr26.core.io import sha256_file

    from .keyframes import pin_matches_url

    src = Path(spec["root"])
    need = [spec["frames_dir"], spec["meta_dir"], spec["shot_dirs"][0]]
    missing = [d for d in need if not (src / d).is_dir()] + [f for f in [spec["video_info"]] if not (src / f).is_file()]
    if missing:
        raise FileNotFoundError(
            f"scene_segmentation: place MovieNet in {src} (data.movienet.root, env ICLR26_MOVIENET_DIR): "
            f"{spec['frames_dir']}/<imdb_id>/shot_XXXX_img_{{0,1,2}}.jpg from {spec['frames_zip']} (BaSSL's "
            f"download script), {spec['shot_dirs'][0]}/ from the scene318 Google Drive folder of BaSSL's README, "
            f"{spec['meta_dir']}/<imdb_id>.json from MovieNet's meta annotations, {spec['video_info']} "
            f"({{imdb_id: {{\"fps\": ...}}}}) from MovieNet's annotation downloads; missing: {missing}")
    enc = spec["encoder"]
    if not pin_matches_url(enc["url"], str(enc.get("sha256") or "")):
        raise DataError(f"data.movienet.encoder: sha256 {enc.get('sha256')} does not start with the hash in "
                        f"{enc['url']} (torchvision's file-name hash)")
    weights = download_pinned(enc, job.out_dir / "weights" / enc["url"].rsplit("/", 1)[-1],
                              progress=lambda done, total: job.log(f"weights: {done} of {total} bytes", every_s=60))
    anno = spec["anno"]
    tar = download(anno["download_url"], job.out_dir / "anno.tar", anno.get("sha256"),
                   progress=lambda done, total: job.log(f"anno.tar: {done} of {total} bytes", every_s=60))
    digest = sha256_file(tar)
    if not anno.get("sha256"):
        job.log(f"UNVERIFIED anno.tar: no pinned sha256; the downloaded file has sha256 {digest} (recorded)")
    with tarfile.open(tar) as archive:
        archive.extractall(job.out_dir / "anno_files", filter="data")
    link = job.out_dir / "movienet_src"
    if not link.exists():
        link.symlink_to(src.resolve(), target_is_directory=True)
    return {"source": "movienet", "root": str(src), "encoder": weights,
            "anno": {"url": anno["download_url"], "sha256": digest, "verified": bool(anno.get("sha256"))}}


def prepare(job) -> dict:
    """Full: MovieNet -> the layout and the key-frame features. Every scale: the data checks of every
    world and seed (test split), before any arm runs."""
    cfg = job.cfg
    if cfg["data"][DATASET]["source"] == "movienet":
        _prepare_movienet(job, cfg)
    units = {f"{w}_s{seed}": d for seed in cfg["seeds"]
             for w, d in world_dirs(cfg, job.raw_dir(), job.out_dir, seed).items()}

    def work(key: str) -> dict:
        return movienet.mechanism_checks(movienet.load_split(units[key], "test"), {"tau": cfg["split"]["tau"]})

    return job.units(units, work)


def _prepare_movienet(job, cfg: dict) -> None:
    from iclr26.core.runtime import pick_device

    from . import keyframes

    spec, raw, out = cfg["data"][DATASET], job.raw_dir(), job.out_dir / "movienet"
    conv = movienet.convert_movienet(raw / "movienet_src", raw / "anno_files", out, spec, cfg["genre"]["definitions"],
                                     log=job.log)
    job.log(f"converted: movies per split {conv['movies']}; {conv['left_out']} pretraining movies left out "
            f"(listed in {out / 'conversion.json'})")
    kept = sorted({json.loads(x)["video_id"] for p in (out / "anno").glob("anno.*.ndjson")
                   for x in p.read_text().splitlines() if x.strip()})   # the converted movies only
    shots = {vid: len(json.loads((out / "shots" / f"{vid}.json").read_text())) for vid in kept}
    state = {}

    def extract(vid: str) -> dict:
        if "model" not in state:
            state["device"] = pick_device(cfg.get("device"))
            state["model"] = keyframes.load_encoder(raw / "weights" / spec["encoder"]["url"].rsplit("/", 1)[-1],
                                                    state["device"])
        feats = keyframes.extract_movie(state["model"], raw / "movienet_src" / spec["frames_dir"], vid, shots[vid],
                                        spec["encoder"], state["device"])
        keyframes.save_features(out / "features" / f"{vid}.npy", feats)
        job.log(f"{vid}: {shots[vid]} shots", every_s=60)
        return {"num_shot": shots[vid]}

    job.units(shots, extract, folder="features")


def _genres(movies: list[dict], cfg: dict, shuffle_seed: int | None) -> np.ndarray:
    from . import bassl

    g = np.stack([bassl.genre_vector(m["genres"], cfg["genre"]["definitions"], cfg["genre"]["dim"]) for m in movies])
    if shuffle_seed is not None:   # the shuffled-genre control: each movie gets another movie's genre prior
        g = g[np.random.default_rng(shuffle_seed).permutation(len(g))]
    return g


def train(job) -> dict:
    """The row's model per world and seed: BaSSL-lite pretraining (its variant), fine-tuning, and the
    boundary scores of the test split under each reading the row has:
    main          the row's own scoring (test_split, all_three: long shots split, max over segments);
    last          (split rows) the same split, each shot read at its last segment (the card's reading);
    random_half   (split rows) a control: only a random half of the long shots split (max reading);
    genre_mean    (genre rows) every test movie given the mean genre prior of the training movies."""
    from iclr26.core.runtime import pick_device

    from . import bassl

    cfg = job.cfg
    device = pick_device(cfg.get("device"))
    variant, use_split, shuffle = ROWS[job.method]
    use_genre, duration = VARIANTS[variant]
    tau = cfg["split"]["tau"]
    units = {f"{w}_s{seed}": (seed, d) for seed in job.seeds for w, d in row_dirs(job, seed).items()}

    def work(key: str) -> dict:
        seed, d = units[key]
        shuffled = (lambda k: 7919 * seed + k) if shuffle else (lambda k: None)
        pre_movies = movienet.load_split(d, "pretrain", frames=False)
        pre = bassl.pretrain(pre_movies, _genres(pre_movies, cfg, shuffled(1)), cfg, seed, use_genre, duration, device)
        del pre_movies
        train_movies = movienet.load_split(d, "train", frames=False)
        g_train = _genres(train_movies, cfg, shuffled(2))
        bassl.finetune(pre["model"], train_movies, g_train, cfg, seed)
        test = movienet.load_split(d, "test")
        g = _genres(test, cfg, shuffled(3))
        readings = {"main": bassl.score(pre["model"], test, g, cfg, tau if use_split else None)}
        if use_split:
            readings["last"] = bassl.score(pre["model"], test, g, cfg, tau, reading="last")
            rng = np.random.default_rng(seed + 104729)
            half = [rng.random(len(m["labels"])) < 0.5 for m in test]
            readings["random_half"] = bassl.score(pre["model"], test, g, cfg, tau, split=half)
        if use_genre:
            mean = np.repeat(g_train.mean(0, keepdims=True), len(test), 0).astype(np.float32)
            readings["genre_mean"] = bassl.score(pre["model"], test, mean, cfg, tau if use_split else None)
        save_arrays(job.out_dir / f"scores_{key}.npz",
                    **{f"{r}__{m['video_id']}": s for r, scores in readings.items() for m, s in zip(test, scores)})
        return {"pseudo_precision": pre["pseudo_precision"] if pre["labelled"] else float("nan")}

    return job.units(units, work)


EXTRA = {"last": ("ap_last", "miou_last"), "random_half": ("ap_random_half",), "genre_mean": ("ap_genre_mean",)}


def _scores(scores, labels, movies) -> dict:
    """AP and F1 pooled over the test shots but each movie's last (BaSSL's SklearnAPMetric, torchmetrics
    F1 at 0.5); mIoU in time per movie, averaged (BaSSL's MovieNetMetric); mIoU in shots (our extra)."""
    t, sh = [], []
    for s, y, m in zip(scores, labels, movies):
        pred = (s >= 0.5).astype(int)
        t.append(movienet.miou(pred, y, m["starts"][:-1], m["ends"][:-1]))
        sh.append(movienet.miou_shots(list(pred) + [0], list(y) + [0]))
    return {**movienet.ap_f1(np.concatenate(scores), np.concatenate(labels)),
            "miou": float(np.nanmean(t)), "miou_shots": float(np.mean(sh))}


def _reading(arrays: dict, name: str, test: list[dict], labels: list) -> dict:
    return _scores([arrays[f"{name}__{m['video_id']}"][:-1] for m in test], labels, test)


def evaluate(job) -> dict:
    records = []
    for seed in job.seeds:
        for world, d in row_dirs(job, seed).items():
            key = f"{world}_s{seed}"
            arrays = load_arrays(job.out_dir / f"scores_{key}.npz")
            test = movienet.load_split(d, "test", frames=False)
            labels = [m["labels"][:-1] for m in test]

            main = _reading(arrays, "main", test, labels)
            rec = {"seed": seed, "world": world, **main}
            for name, metrics in EXTRA.items():   # a row without this reading: it equals the main one
                got = _reading(arrays, name, test, labels) if f"{name}__{test[0]['video_id']}" in arrays else main
                rec.update({k: got[k.replace("_" + name, "")] for k in metrics})
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
