"""Movies in MovieNet-SSeg's layout (as BaSSL's data loader reads it), the tiny worlds that write
it, and BaSSL's metrics.

Layout (one directory per world; at full scale, MovieNet converted by prepare: convert_movienet and
keyframes.py):
    anno/anno.<split>.ndjson   one line per shot but a movie's last: {"video_id", "shot_id" (4 digits),
                               "num_shot", "boundary_label"} (1: the shot ends a scene), splits
                               pretrain (labels unused), train, val, test (BaSSL's own anno files)
    shots/<video_id>.json      [{"shot_id", "start", "end", "duration" (optional; else end - start)}]
                               (seconds; full: MovieNet's shot frames / the movie's fps, duration
                               (end - start + 1) frames: MovieNet's end frames are inclusive)
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
        durations = np.array([s.get("duration", s["end"] - s["start"]) for s in shots], np.float32)
        if not np.all(durations > 0):
            raise ValueError(f"{vid}: shot {int(np.argmin(durations))} lasts {durations.min()} s (must be > 0)")
        mv = {"video_id": vid, "genres": json.loads((Path(root) / "genres" / f"{vid}.json").read_text()),
              "labels": labels[vid], "starts": starts, "ends": ends, "durations": durations,
              "mean": np.asarray(feats.mean(1), np.float32)}
        if frames:
            mv["features"] = feats
        movies.append(mv)
    return movies


# ----------------------------------------------------------------------------- MovieNet -> layout (full)
LABELLED = ("train", "val", "test")


def read_shot_file(path: Path, fps: float) -> list[dict]:
    """A MovieNet shot file (scene318/shot_movie318/<id>.txt, the file BaSSL's metric reads): one line
    per shot, "start_frame end_frame kf0 kf1 kf2", end frames inclusive (a shot 0-48 is followed by one
    starting at 49) -> [{shot_id, start, end, duration}] in seconds: start and end are the frames / fps
    (BaSSL's get_scene_list reads the same two numbers for mIoU), duration (end - start + 1) / fps, so a
    one-frame shot lasts 1/fps, never 0. An end before its start: ValueError naming the line."""
    out = []
    for i, line in enumerate(x for x in Path(path).read_text().splitlines() if x.strip()):
        start, end = (int(v) for v in line.split()[:2])
        if end < start:
            raise ValueError(f"{path}: shot {i} ends at frame {end} before its start {start}")
        out.append({"shot_id": f"{i:04d}", "start": start / fps, "end": end / fps, "duration": (end - start + 1) / fps})
    return out


def read_video_info(path: Path) -> dict[str, float]:
    """MovieNet's movie1K.video_info.v1.json, {imdb_id: {"fps": ..., ...}} -> {imdb_id: fps}."""
    return {vid: float(v["fps"]) for vid, v in json.loads(Path(path).read_text()).items()
            if isinstance(v, dict) and v.get("fps")}


def convert_movienet(src: Path, anno_dir: Path, out: Path, spec: dict, vocabulary, log=print) -> dict:
    """MovieNet files -> the layout above (features are written separately, keyframes.py).
    anno_dir: BaSSL's anno files (anno.<split>.ndjson: video_id, shot_id, num_shot, boundary_label);
    per movie, shots/<id>.json from the first of spec.shot_dirs (under src) that has <id>.txt, in seconds
    at the movie's fps from MovieNet's video-info file (src/spec.video_info), and genres/<id>.json from
    MovieNet's meta/<id>.json "genres". A movie that cannot be converted (no shot file, meta file or fps;
    a shot file whose line count differs from num_shot; a bad line) is, in the pretrain split, left out
    (one log line each, with both counts, and counted; BaSSL never reads shot files for pretraining), and
    in a labelled split an error (one line naming every such movie: its shot times, used by the duration
    signals and mIoU, are uncertain; BaSSL's metric indexes the shot file by shot id and checks nothing).
    The anno files are written without the left-out movies; out/conversion.json records the counts.
    An unknown genre (not in `vocabulary`): ValueError."""
    src, out = Path(src), Path(out)
    for sub in ("anno", "shots", "genres", "features"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    found = {p.name: p for p in Path(anno_dir).rglob("anno.*.ndjson")}
    missing = [s for s in ("pretrain", "train", "test") if f"anno.{s}.ndjson" not in found]
    if missing:
        raise ValueError(f"BaSSL's anno files in {anno_dir} lack anno.{{{','.join(missing)}}}.ndjson")
    info_file = src / spec["video_info"]
    if not info_file.is_file():
        raise FileNotFoundError(f"no MovieNet video-info file {info_file} ({{imdb_id: {{'fps': ...}}}})")
    fps_of = read_video_info(info_file)
    rows, num_shot = {}, {}
    for split in SPLITS:
        if f"anno.{split}.ndjson" in found:
            rows[split] = [json.loads(x) for x in found[f"anno.{split}.ndjson"].read_text().splitlines() if x.strip()]
            for row in rows[split]:
                num_shot[row["video_id"]] = int(row["num_shot"])
    problems, unknown = {}, set()
    for vid, n in num_shot.items():
        meta_file = src / spec["meta_dir"] / f"{vid}.json"
        shot_file = next((f for d in spec["shot_dirs"] if (f := src / d / f"{vid}.txt").is_file()), None)
        why = [w for w, bad in ((f"no {meta_file}", not meta_file.is_file()),
                                (f"no shot file in {', '.join(spec['shot_dirs'])}", shot_file is None),
                                (f"no fps in {info_file.name}", vid not in fps_of)) if bad]
        if not why:
            try:
                shots = read_shot_file(shot_file, fps_of[vid])
            except ValueError as err:
                why = [str(err)]
        if not why and len(shots) != n:
            why = [f"{len(shots)} shots in {shot_file}, {n} in the anno files"]
        if why:
            problems[vid] = "; ".join(why)
            continue
        meta = json.loads(meta_file.read_text())
        genres = list(meta.get("genres") or [])
        unknown |= {g for g in genres if g.lower() not in vocabulary}
        (out / "shots" / f"{vid}.json").write_text(json.dumps(shots))
        (out / "genres" / f"{vid}.json").write_text(json.dumps(genres))
    if unknown:
        raise ValueError(f"genres without a definition in genre.definitions: {sorted(unknown)}")
    labelled = {row["video_id"] for split in LABELLED for row in rows.get(split, [])}
    bad = [f"{vid} ({why})" for vid, why in problems.items() if vid in labelled]
    if bad:
        raise ValueError(f"{len(bad)} labelled movies cannot be converted: {'; '.join(bad)}")
    for vid, why in problems.items():
        log(f"pretraining movie {vid} left out: {why}")
    counts = {}
    for split, split_rows in rows.items():
        kept = [r for r in split_rows if r["video_id"] not in problems]
        (out / "anno" / f"anno.{split}.ndjson").write_text("".join(json.dumps(r) + "\n" for r in kept))
        counts[split] = len(dict.fromkeys(r["video_id"] for r in kept))
    result = {"movies": counts, "videos": len(num_shot) - len(problems), "left_out": len(problems),
              "left_out_movies": problems}
    (out / "conversion.json").write_text(json.dumps(result, indent=1))
    return result


# ----------------------------------------------------------------------------- mechanism checks
def mechanism_checks(movies: list[dict], spec: dict) -> dict:
    """Whether the signal each addition uses is in the data (card 15: checked before the arms run).
    dur_ratio: mean duration of scene-opening shots over that of the others (< 1: A present).
    genre_signal: across genres, the spread of (narrative-half minus visual-half) boundary AUC of the
        change between consecutive shots (> 0: which half to trust depends on genre, B).
    split_signal: among long shots (> split.tau s), the ROC AUC minus 0.5 with which the change from the
        first to the last key frame inside the shot tells scene-ending shots (> 0: a within-shot cue
        that only a split exposes, C)."""
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
        return roc_auc(s, y) if 0 < np.sum(y) < len(y) else 0.5

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


def _counts_at_thresholds(scores, labels) -> tuple[np.ndarray, np.ndarray]:
    """sklearn's confusion_matrix_at_thresholds (binary, no weights): true and false positives at each
    distinct score, highest first (ties share one threshold)."""
    s, y = np.asarray(scores, float), np.asarray(labels) != 0
    order = np.argsort(s, kind="mergesort")[::-1]
    s, y = s[order], y[order]
    thr = np.r_[np.where(np.diff(s))[0], y.size - 1]
    tps = np.cumsum(y * 1.0)[thr]
    return tps, 1 + thr - tps


def average_precision(scores, labels) -> float:
    """sklearn's average_precision_score (binary, no sample weights), in numpy: precision at each
    distinct score threshold, summed over the recall steps. Importing sklearn costs a job more CPU than
    its metrics; test_metrics_match_sklearn checks that the two agree."""
    tps, fps = _counts_at_thresholds(scores, labels)
    precision = tps / (tps + fps)
    recall = tps / tps[-1] if tps[-1] > 0 else np.ones_like(tps)
    precision, recall = np.r_[precision[::-1], 1.0], np.r_[recall[::-1], 0.0]
    return float(max(0.0, -np.sum(np.diff(recall) * precision[:-1])))


def roc_auc(scores, labels) -> float:
    """sklearn's roc_auc_score (binary, no weights; both classes present), in numpy: its roc_curve
    (collinear points dropped, (0, 0) prepended) and the trapezoid rule (test_metrics_match_sklearn)."""
    tps, fps = _counts_at_thresholds(scores, labels)
    if len(fps) > 2:
        keep = np.where(np.r_[True, np.logical_or(np.diff(fps, 2), np.diff(tps, 2)), True])[0]
        tps, fps = tps[keep], fps[keep]
    tps, fps = np.r_[0.0, tps], np.r_[0.0, fps]
    return float(np.trapezoid(tps / tps[-1], fps / fps[-1]))


def ap_f1(scores, labels, threshold: float = 0.5) -> dict:
    """Boundary AP (sklearn's average_precision_score, as BaSSL's SklearnAPMetric) and F1 of the scores
    thresholded at `threshold` (0 when there is no true or predicted boundary, sklearn's zero_division=0)."""
    scores, labels = np.asarray(scores), np.asarray(labels) != 0
    pred = scores >= threshold
    tp, fp, fn = int(np.sum(pred & labels)), int(np.sum(pred & ~labels)), int(np.sum(~pred & labels))
    return {"ap": average_precision(scores, labels),
            "f1": float(2 * tp / (2 * tp + fp + fn)) if tp else 0.0}
