"""Movies in MovieNet-SSeg's layout (as BaSSL's data loader reads it), the tiny worlds that write
it, and BaSSL's metrics.

Layout (one directory per world; at full scale, MovieNet converted by prepare: convert_movienet and
keyframes.py):
    anno/anno.<split>.ndjson   one line per shot but a movie's last: {"video_id", "shot_id" (4 digits),
                               "num_shot", "boundary_label"} (1: the shot ends a scene), splits
                               pretrain (labels unused), train, val, test (BaSSL's own anno files)
    shots/<video_id>.json      [{"shot_id", "start", "end"}] (seconds; full: MovieNet's shot frames / fps)
    genres/<video_id>.json     [genre, ...] (full: MovieNet's meta "genres")
    features/<video_id>.npy    (num_shot, 3, dim) key-frame features (BaSSL fine-tunes on pre-extracted
                               shot features; the tiny world has no pixels; full: frozen ResNet-50, 2048-d
                               float16)

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
    """One movie. Both worlds make the same random draws in the same order (matched worlds: the same
    seed gives the same scenes, shots, labels and noise; only assumptions A, B, C are toggled)."""
    hyp = world == "hypothesis"
    half = spec["dim"] // 2
    n_scenes = int(rng.integers(*spec["scenes"]))
    shots, labels, feats = [], [], []
    place, story = rng.normal(size=half), rng.normal(size=half)
    t = 0.0
    for s in range(n_scenes):
        nxt_place, nxt_story = rng.normal(size=half), rng.normal(size=half)
        shared = rng.random() < spec["drama_shared_place"]
        if hyp and genre == "drama" and shared:
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
            cut, jump = rng.random() < spec["action_cutin"], rng.normal(size=half)
            if hyp and genre == "action" and cut:
                vis = vis + jump                                # B: visual jump inside a scene
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


def load_split(root: Path, split: str, frames: bool = True) -> list[dict]:
    """Movies of a split, read from the layout: {video_id, genres, labels (num_shot; the last 0),
    starts, ends, durations, mean (num_shot, dim: the key frames' mean, float32), and with frames
    features (num_shot, 3, dim) as stored, memory-mapped}. One loader for the synthetic and the real
    files; the features stay on disk (mmap) and only their key-frame mean is held in memory."""
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
        feats = np.load(Path(root) / "features" / f"{vid}.npy", mmap_mode="r")
        if len(shots) != len(labels[vid]) or len(feats) != len(shots):
            raise ValueError(f"{vid}: {len(labels[vid])} annotated shots, {len(shots)} timed, {len(feats)} featured")
        starts = np.array([s["start"] for s in shots], np.float64)
        ends = np.array([s["end"] for s in shots], np.float64)
        mv = {"video_id": vid, "genres": json.loads((Path(root) / "genres" / f"{vid}.json").read_text()),
              "labels": labels[vid], "starts": starts, "ends": ends, "durations": (ends - starts).astype(np.float32),
              "mean": np.asarray(feats.mean(1), np.float32)}
        if frames:
            mv["features"] = feats
        movies.append(mv)
    return movies


# ----------------------------------------------------------------------------- MovieNet -> layout (full)
def read_shot_file(path: Path, fps: float) -> list[dict]:
    """A MovieNet shot file (scene318/shot_movie318/<id>.txt, the file BaSSL's metric reads): one line
    per shot, "start_frame end_frame kf0 kf1 kf2"; -> [{shot_id, start, end}] in seconds."""
    out = []
    for i, line in enumerate(x for x in Path(path).read_text().splitlines() if x.strip()):
        start, end = (int(v) for v in line.split()[:2])
        out.append({"shot_id": f"{i:04d}", "start": start / fps, "end": end / fps})
    return out


def convert_movienet(src: Path, anno_dir: Path, out: Path, spec: dict, vocabulary) -> dict:
    """MovieNet files -> the layout above (features are written separately, keyframes.py).
    anno_dir: BaSSL's anno files (anno.<split>.ndjson: video_id, shot_id, num_shot, boundary_label),
    copied as they are; per movie of any split, shots/<id>.json from the first of spec.shot_dirs (under
    src) that has <id>.txt, in seconds at the movie's fps (meta/<id>.json "video.fps" when present, else
    spec.fps, the 24 BaSSL's metric assumes), and genres/<id>.json from MovieNet's meta/<id>.json
    "genres". An unknown genre (not in `vocabulary`) or a movie without shot times or meta: ValueError."""
    src, out = Path(src), Path(out)
    for sub in ("anno", "shots", "genres", "features"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    found = {p.name: p for p in Path(anno_dir).rglob("anno.*.ndjson")}
    counts, vids = {}, {}
    for split in SPLITS:
        name = f"anno.{split}.ndjson"
        if name not in found:
            continue
        text = found[name].read_text()
        (out / "anno" / name).write_text(text)
        ids = list(dict.fromkeys(json.loads(x)["video_id"] for x in text.splitlines() if x.strip()))
        counts[split] = len(ids)
        for line in text.splitlines():
            if line.strip():
                row = json.loads(line)
                vids[row["video_id"]] = int(row["num_shot"])
    missing = [s for s in ("pretrain", "train", "test") if s not in counts]
    if missing:
        raise ValueError(f"BaSSL's anno files in {anno_dir} lack anno.{{{','.join(missing)}}}.ndjson")
    problems, unknown = [], set()
    for vid, num_shot in vids.items():
        meta_file = src / spec["meta_dir"] / f"{vid}.json"
        shot_file = next((f for d in spec["shot_dirs"] if (f := src / d / f"{vid}.txt").is_file()), None)
        if not meta_file.is_file() or shot_file is None:
            problems.append(f"{vid}: {'no ' + str(meta_file) if not meta_file.is_file() else ''}"
                            f"{' no shot file in ' + ', '.join(spec['shot_dirs']) if shot_file is None else ''}")
            continue
        meta = json.loads(meta_file.read_text())
        fps = float(((meta.get("video") or {}).get("fps")) or spec["fps"])
        shots = read_shot_file(shot_file, fps)
        if len(shots) != num_shot:
            problems.append(f"{vid}: {len(shots)} shots in {shot_file}, {num_shot} in the anno files")
            continue
        genres = list(meta.get("genres") or [])
        unknown |= {g for g in genres if g.lower() not in vocabulary}
        (out / "shots" / f"{vid}.json").write_text(json.dumps(shots))
        (out / "genres" / f"{vid}.json").write_text(json.dumps(genres))
    if unknown:
        raise ValueError(f"genres without a definition in genre.definitions: {sorted(unknown)}")
    if problems:
        raise ValueError(f"{len(problems)} movies cannot be converted, e.g. {problems[:3]}")
    return {"movies": counts, "videos": len(vids)}


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
        mean = m["mean"]
        dv = np.linalg.norm(mean[1:, :half] - mean[:-1, :half], axis=1)
        dn = np.linalg.norm(mean[1:, half:] - mean[:-1, half:], axis=1)
        g = per_genre.setdefault(m["genres"][0] if m["genres"] else "", ([], [], []))   # the first genre
        for store, values in zip(g, (y[:-1], dv, dn)):
            store.extend(values)
        long = d[:-1] > spec["tau"]
        last_d += list(np.linalg.norm(np.asarray(f[:-1, 2], np.float32) - np.asarray(f[:-1, 0], np.float32),
                                      axis=1)[long])
        lab_long += list(y[:-1][long])

    def auc(y, s):
        return float(roc_auc_score(y, s)) if 0 < np.sum(y) < len(y) else 0.5

    gaps = [auc(y, dn) - auc(y, dv) for y, dv, dn in per_genre.values()]
    return {"dur_ratio": float(np.mean(opens) / np.mean(others)),
            "genre_signal": float(np.max(gaps) - np.min(gaps)),
            "split_signal": auc(lab_long, last_d) - 0.5}


# ----------------------------------------------------------------------------- metrics (BaSSL / LGSS)
def scenes_from_labels(labels) -> list[tuple[int, int]]:
    """[start, end] shot index pairs of the scenes a 0/1 scene-end sequence defines (with the tail)."""
    out, start = [], 0
    for i, lab in enumerate(labels):
        if lab:
            out.append((start, i))
            start = i + 1
    if start < len(labels):
        out.append((start, len(labels) - 1))
    return out


def _cal_miou(a, b) -> float:
    """BaSSL's cal_miou: each interval of a, its best IoU (getRatio) with an interval of b, averaged."""
    def ratio(p, q):
        inter = max(0.0, min(p[1], q[1]) - max(p[0], q[0]))
        return inter / (max(p[1], q[1]) - min(p[0], q[0])) if inter > 0 else 0.0
    return float(np.mean([max(ratio(p, g) for p in b) for g in a]))


def miou(pred_labels, true_labels, starts, ends) -> float:
    """BaSSL's mIoU (finetune/utils/metric.py MovieNetMetric._compute_mIoU), in time: scenes are the
    runs of shots ending at each 1 (get_pair_list: the shots after the last 1 form no scene), each
    spanning [start of its first shot, end of its last] (get_scene_list reads shot_movie318's frames;
    seconds here, the same ratios); IoU without +1 (getRatio); the mean of the gt->pred and pred->gt
    best-match averages. No predicted boundary: 0 (BaSSL); no true boundary: NaN (BaSSL: None)."""
    def intervals(labels):
        out, first = [], 0
        for i, lab in enumerate(labels):
            if lab:
                out.append((starts[first], ends[i]))
                first = i + 1
        return out
    p, g = intervals(pred_labels), intervals(true_labels)
    if not g:
        return float("nan")
    if not p:
        return 0.0
    return 0.5 * (_cal_miou(g, p) + _cal_miou(p, g))


def miou_shots(pred_labels, true_labels) -> float:
    """Our extra: the same matching on shot-index scenes (tail included, IoU counted in shots, +1),
    as LGSS-style code counts it; every shot weighs the same whatever its duration."""
    def best(a, b):
        return float(np.mean([max(max(0, min(e0, e1) - max(s0, s1) + 1) / (max(e0, e1) - min(s0, s1) + 1)
                                  for s1, e1 in b) for s0, e0 in a]))
    p, g = scenes_from_labels(pred_labels), scenes_from_labels(true_labels)
    return 0.5 * (best(g, p) + best(p, g))


def ap_f1(scores, labels, threshold: float = 0.5) -> dict:
    from sklearn.metrics import average_precision_score, f1_score

    scores, labels = np.asarray(scores), np.asarray(labels)
    return {"ap": float(average_precision_score(labels, scores)),
            "f1": float(f1_score(labels, scores >= threshold, zero_division=0))}
