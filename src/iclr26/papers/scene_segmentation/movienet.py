"""Movies in MovieNet-SSeg's layout (as BaSSL's data loader reads it), the tiny worlds that write
it, and BaSSL's metrics.

Layout (one directory per world; the real MovieNet-SSeg files at full scale):
    anno/anno.<split>.ndjson   one line per shot but a movie's last: {"video_id", "shot_id" (4 digits),
                               "num_shot", "boundary_label"} (1: the shot ends a scene), splits
                               pretrain (labels unused), train, val, test
    shots/<video_id>.json      [{"shot_id", "start", "end"}] (seconds)
    genres/<video_id>.json     [genre, ...]
    features/<video_id>.npy    (num_shot, 3, dim) key-frame features (BaSSL fine-tunes on pre-extracted
                               shot features; the tiny world has no pixels)

Tiny worlds (card 15 section 6). 'hypothesis' switches on
    A  the shot that opens a scene is shorter (duration x boundary_shortening);
    B  genre conventions: in drama consecutive scenes share the place (visual) half and only the
       narrative half changes; in action the narrative half changes little at a boundary
       (action_story) and visual cut-ins jump inside scenes;
    C  documentary long takes (> long_take s) that end a scene pan toward the next scene: the last
       key frame is drifted toward it, so the 3-frame mean blurs the cue and a split exposes it.
'null_world' switches all three off: durations do not depend on boundaries, every genre changes both
halves at a boundary, no cut-ins, no drift. The same code writes both.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

SPLITS = ("pretrain", "train", "val", "test")


def movie(rng, genre: str, world: str, spec: dict) -> dict:
    hyp = world == "hypothesis"
    half = spec["dim"] // 2
    n_scenes = int(rng.integers(*spec["scenes"]))
    shots, labels, feats = [], [], []
    place, story = rng.normal(size=half), rng.normal(size=half)
    t = 0.0
    for s in range(n_scenes):
        nxt_place, nxt_story = rng.normal(size=half), rng.normal(size=half)
        if hyp and genre == "drama" and rng.random() < spec["drama_shared_place"]:
            nxt_place = place                                   # B: change without a visual change
        if hyp and genre == "action":
            a = spec["action_story"]                            # B: the narrative half barely moves
            nxt_story = np.sqrt(1 - a * a) * story + a * nxt_story
        n = max(2, int(rng.lognormal(np.log(spec["shots_per_scene"]), 0.4)))
        for i in range(n):
            d = float(rng.lognormal(np.log(spec["median_shot_s"][genre]), 0.5))
            end = i == n - 1
            if hyp and i == 0 and s > 0:
                d *= spec["boundary_shortening"]                # A
            vis = place + spec["shot_noise"] * rng.normal(size=half)   # camera set-up of the shot
            narr = story + spec["shot_noise"] * rng.normal(size=half)
            if hyp and genre == "action" and rng.random() < spec["action_cutin"]:
                vis = vis + rng.normal(size=half)               # B: visual jump inside a scene
            drift = hyp and genre == "documentary" and end and s < n_scenes - 1 and d > spec["long_take"]
            frames = []
            for k in range(3):
                f = np.concatenate([vis, narr])
                if drift and k == 2:                            # C: the take pans toward the next scene
                    f = (1 - spec["drift"]) * f + spec["drift"] * np.concatenate([nxt_place, nxt_story])
                frames.append(f + spec["noise"] * rng.normal(size=spec["dim"]))
            shots.append({"start": round(t, 3), "end": round(t + d, 3)})
            t += d
            labels.append(int(end and s < n_scenes - 1))
            feats.append(frames)
        place, story = nxt_place, nxt_story
    return {"shots": shots, "labels": labels, "features": np.asarray(feats, np.float32)}


def write_world(out: Path, world: str, spec: dict, seed: int) -> dict:
    """All splits of one world: movies of mixed genres (round robin), written in the layout above."""
    rng = np.random.default_rng(seed)
    genres = list(spec["median_shot_s"])
    counts = {}
    for split in SPLITS:
        movies = []
        for j in range(spec["movies"][split]):
            genre = genres[j % len(genres)]
            movies.append((f"tt{seed:02d}{SPLITS.index(split)}{j:03d}", [genre], movie(rng, genre, world, spec)))
        write_split(out, split, movies)
        counts[split] = len(movies)
    return counts


def write_split(out: Path, name: str, movies: list) -> None:
    """movies: (video_id, genres, movie dict)."""
    (out / "anno").mkdir(parents=True, exist_ok=True)
    for sub in ("shots", "genres", "features"):
        (out / sub).mkdir(exist_ok=True)
    lines = []
    for vid, genres, m in movies:
        n = len(m["shots"])
        for i, lab in enumerate(m["labels"][:-1]):
            lines.append(json.dumps({"video_id": vid, "shot_id": f"{i:04d}", "num_shot": n, "boundary_label": lab}))
        (out / "shots" / f"{vid}.json").write_text(json.dumps(
            [{"shot_id": f"{i:04d}", **s} for i, s in enumerate(m["shots"])]))
        (out / "genres" / f"{vid}.json").write_text(json.dumps(genres))
        np.save(out / "features" / f"{vid}.npy", m["features"])
    (out / "anno" / f"anno.{name}.ndjson").write_text("\n".join(lines) + "\n")


def load_split(root: Path, split: str) -> list[dict]:
    """Movies of a split, read from the layout: {video_id, genres, labels (num_shot; the last 0),
    durations, features (num_shot, 3, dim)}. One loader for the synthetic and the real files."""
    order, labels = [], {}
    for line in (Path(root) / "anno" / f"anno.{split}.ndjson").read_text().splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        vid = row["video_id"]
        if vid not in labels:
            order.append(vid)
            labels[vid] = np.zeros(int(row["num_shot"]), np.int64)
        labels[vid][int(row["shot_id"])] = int(row.get("boundary_label", 0))
    movies = []
    for vid in order:
        shots = json.loads((Path(root) / "shots" / f"{vid}.json").read_text())
        feats = np.load(Path(root) / "features" / f"{vid}.npy").astype(np.float32)
        if len(shots) != len(labels[vid]) or len(feats) != len(shots):
            raise ValueError(f"{vid}: {len(labels[vid])} annotated shots, {len(shots)} timed, {len(feats)} featured")
        movies.append({"video_id": vid, "genres": json.loads((Path(root) / "genres" / f"{vid}.json").read_text()),
                       "labels": labels[vid], "features": feats,
                       "durations": np.array([s["end"] - s["start"] for s in shots], np.float32)})
    return movies


# ----------------------------------------------------------------------------- mechanism checks
def mechanism_checks(movies: list[dict], spec: dict) -> dict:
    """Whether the signal each addition uses is in the data (card 15: checked before the arms run).
    dur_ratio: mean duration of scene-opening shots over that of the others (< 1: A present).
    genre_signal: across genres, the spread of (narrative-half minus visual-half) boundary AUC of the
        change between consecutive shots (> 0: which half to trust depends on genre, B).
    split_signal: among long shots (> split.tau s), the ROC AUC minus 0.5 with which the change from the
        first to the last key frame inside the shot tells scene-ending shots (> 0: a within-shot cue
        that only a split exposes, C)."""
    from sklearn.metrics import roc_auc_score

    opens, others = [], []
    per_genre: dict[str, tuple[list, list, list]] = {}
    last_d, lab_long = [], []
    for m in movies:
        y, f, d = m["labels"], m["features"], m["durations"]
        opening = np.r_[0, y[:-1]].astype(bool)
        opening[0] = False
        opens += list(d[opening])
        others += list(d[~opening])
        half = f.shape[-1] // 2
        mean = f.mean(1)
        dv = np.linalg.norm(mean[1:, :half] - mean[:-1, :half], axis=1)
        dn = np.linalg.norm(mean[1:, half:] - mean[:-1, half:], axis=1)
        g = per_genre.setdefault(m["genres"][0], ([], [], []))
        for store, values in zip(g, (y[:-1], dv, dn)):
            store.extend(values)
        long = d[:-1] > spec["tau"]
        last_d += list(np.linalg.norm(f[:-1, 2] - f[:-1, 0], axis=1)[long])
        lab_long += list(y[:-1][long])

    def auc(y, s):
        return float(roc_auc_score(y, s)) if 0 < np.sum(y) < len(y) else 0.5

    gaps = [auc(y, dn) - auc(y, dv) for y, dv, dn in per_genre.values()]
    return {"dur_ratio": float(np.mean(opens) / np.mean(others)),
            "genre_signal": float(np.max(gaps) - np.min(gaps)),
            "split_signal": auc(lab_long, last_d) - 0.5}


# ----------------------------------------------------------------------------- metrics (BaSSL / LGSS)
def scenes_from_labels(labels) -> list[tuple[int, int]]:
    """[start, end] shot index pairs of the scenes a 0/1 scene-end sequence defines."""
    out, start = [], 0
    for i, lab in enumerate(labels):
        if lab:
            out.append((start, i))
            start = i + 1
    if start < len(labels):
        out.append((start, len(labels) - 1))
    return out


def miou(pred_labels, true_labels) -> float:
    """LGSS / BaSSL mIoU: each ground-truth scene's best IoU with a predicted scene, averaged, and
    the same from predicted to ground truth; the mean of the two."""
    def best(a, b):
        vals = []
        for s0, e0 in a:
            ious = [max(0, min(e0, e1) - max(s0, s1) + 1) / (max(e0, e1) - min(s0, s1) + 1) for s1, e1 in b]
            vals.append(max(ious))
        return float(np.mean(vals))
    p, g = scenes_from_labels(pred_labels), scenes_from_labels(true_labels)
    return 0.5 * (best(g, p) + best(p, g))


def ap_f1(scores, labels, threshold: float = 0.5) -> dict:
    from sklearn.metrics import average_precision_score, f1_score

    scores, labels = np.asarray(scores), np.asarray(labels)
    return {"ap": float(average_precision_score(labels, scores)),
            "f1": float(f1_score(labels, scores >= threshold, zero_division=0))}
