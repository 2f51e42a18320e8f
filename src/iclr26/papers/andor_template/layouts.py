"""Rated layouts in the AVA release format, and the tiny generator that writes them.

Files (one loader reads both scales):
  AVA.txt      the AVA release's ratings file: `index image_id c1 .. c10 tag1 tag2 challenge_id`,
               c_k = number of votes for score k (Murray et al., CVPR 2012)
  parts.jsonl  one line per image: {"image_id", "width", "height", "parts": [{"label", "box": [x0, y0,
               x1, y1]}], "paradigm"}: part boxes (main subject, secondary subject, horizon) in pixels;
               `paradigm` is the expert composition label where one exists (-1: none)

Tiny: three hidden expert paradigms (rule of thirds, central symmetry, diagonal); "good" layouts are a
paradigm's configuration plus Gaussian jitter, the rest uniform random layouts; ten simulated raters
score each layout from its distance to the nearest paradigm configuration (`quality`), an oracle
used only to simulate raters and to measure guidance.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

RATINGS, PARTS = "AVA.txt", "parts.jsonl"
PART_LABELS = ("main", "secondary", "horizon")
PARADIGMS = ("rule_of_thirds", "central_symmetry", "diagonal")
T1, T2 = 1 / 3, 2 / 3


def configurations() -> list[tuple[int, np.ndarray]]:
    """(paradigm, geometry) of every paradigm configuration; geometry = main cx, cy, secondary cx, cy,
    horizon height (all in [0, 1])."""
    out = []
    for mx in (T1, T2):
        for my in (T1, T2):
            for hy in (T1, T2):   # thirds: main on a thirds point, secondary at the opposite one
                out.append((0, np.array([mx, my, 1 - mx, 1 - my, hy])))
    out.append((1, np.array([0.5, 0.5, 0.5, 0.82, 0.5])))          # central symmetry
    for flip in (False, True):                                    # diagonal: both on one diagonal
        a, b = (0.22, 0.78) if not flip else (0.78, 0.22)
        out.append((2, np.array([a, 0.22, b, 0.78, 0.85])))
    return out


CONFIGS = configurations()
CONFIG_GEOMETRY = np.stack([g for _, g in CONFIGS])


def quality(geometry: np.ndarray) -> np.ndarray:
    """Oracle quality: minus the distance to the nearest paradigm configuration. geometry: (n, 5)."""
    d = np.linalg.norm(geometry[:, None, :] - CONFIG_GEOMETRY[None], axis=-1)
    return -d.min(axis=1)


def expected_score(geometry: np.ndarray, spec: dict) -> np.ndarray:
    """A rater's expected score 1 + 9 sigmoid(slope (quality + offset)) (no rater noise)."""
    q = quality(geometry)
    return 1 + 9 / (1 + np.exp(-spec["rater_slope"] * (q + spec["rater_offset"])))


def write_synthetic(out: Path, spec: dict, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    n = int(spec["n_images"])
    good = rng.random(n) < spec["good_fraction"]
    paradigm = np.where(good, rng.integers(0, len(PARADIGMS), n), -1)
    geometry = rng.uniform(0.03, 0.97, (n, 5))
    for i in np.flatnonzero(good):
        options = [g for p, g in CONFIGS if p == paradigm[i]]
        sigma = rng.uniform(*spec["jitter"])
        geometry[i] = np.clip(options[rng.integers(len(options))] + rng.normal(0, sigma, 5), 0.02, 0.98)
    mean = expected_score(geometry, spec)
    votes = np.clip(np.rint(mean[:, None] + rng.normal(0, spec["rater_noise"], (n, spec["n_raters"]))), 1, 10)
    counts = np.stack([(votes == k).sum(1) for k in range(1, 11)], 1)
    ids = np.arange(n) + int(spec["id_offset"])
    with open(out / RATINGS, "w") as f:
        for k in range(n):
            f.write(" ".join(map(str, [k + 1, ids[k], *counts[k], 0, 0, int(spec["challenge_id"])])) + "\n")
    with open(out / PARTS, "w") as f:
        for k in range(n):
            w, h = (640, 480) if rng.random() < 0.5 else (480, 640)
            f.write(json.dumps({"image_id": int(ids[k]), "width": w, "height": h,
                                "parts": _boxes(geometry[k], w, h, rng), "paradigm": int(paradigm[k])}) + "\n")
    return {"images": n, "good": int(good.sum())}


def _boxes(g: np.ndarray, w: int, h: int, rng) -> list[dict]:
    parts = []
    for label, (cx, cy) in (("main", g[0:2]), ("secondary", g[2:4])):
        bw, bh = rng.uniform(0.05, 0.25, 2)
        parts.append({"label": label, "box": [round((cx - bw / 2) * w, 2), round((cy - bh / 2) * h, 2),
                                              round((cx + bw / 2) * w, 2), round((cy + bh / 2) * h, 2)]})
    parts.append({"label": "horizon", "box": [0.0, round(g[4] * h - 1, 2), float(w), round(g[4] * h + 1, 2)]})
    return parts


def load(raw: Path) -> pd.DataFrame:
    """image_id, mean_score, n_votes, challenge_id, geometry g0..g4 (part centres / frame), paradigm.

    Images without a main subject in parts.jsonl are dropped; a missing secondary part or horizon is
    placed at the frame centre (the full-scale detector may find none)."""
    cols = ["index", "image_id", *[f"c{k}" for k in range(1, 11)], "tag1", "tag2", "challenge_id"]
    ratings = pd.read_csv(raw / RATINGS, sep=r"\s+", header=None, names=cols)
    counts = ratings[[f"c{k}" for k in range(1, 11)]].to_numpy(float)
    ratings["n_votes"] = counts.sum(1)
    ratings["mean_score"] = counts @ np.arange(1, 11) / np.maximum(ratings.n_votes, 1)
    rows = []
    with open(raw / PARTS) as f:
        for line in f:
            rec = json.loads(line)
            w, h = float(rec["width"]), float(rec["height"])
            found = {p["label"]: p["box"] for p in rec["parts"]}
            if "main" not in found:
                continue
            g = [0.5] * 5
            for k, label in enumerate(("main", "secondary")):
                if label in found:
                    x0, y0, x1, y1 = found[label]
                    g[2 * k], g[2 * k + 1] = (x0 + x1) / 2 / w, (y0 + y1) / 2 / h
            if "horizon" in found:
                g[4] = (found["horizon"][1] + found["horizon"][3]) / 2 / h
            rows.append({"image_id": int(rec["image_id"]), "paradigm": int(rec.get("paradigm", -1)),
                         **{f"g{k}": float(np.clip(v, 0, 1)) for k, v in enumerate(g)}})
    parts = pd.DataFrame(rows)
    df = ratings[ratings.n_votes > 0].merge(parts, on="image_id")
    return df[["image_id", "mean_score", "n_votes", "challenge_id", "g0", "g1", "g2", "g3", "g4", "paradigm"]]


def geometry_of(df: pd.DataFrame) -> np.ndarray:
    return df[["g0", "g1", "g2", "g3", "g4"]].to_numpy(float)
