"""Arrays for pretraining and the downstream tasks, the pre-arm checks, and the frozen-feature kNN
probe (DINO's weighted kNN: cosine similarity, k neighbours, weights exp(sim / T)), with the
metrics of card 12 §6: overall accuracy, balanced accuracy, mean recall of the rarest classes."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from . import majortom as mt


def class_index(codes: np.ndarray) -> int:
    return mt.WORLDCOVER.index(mt.dominant_code(codes))


def build_arrays(root: Path, spec: dict) -> dict[str, np.ndarray]:
    """Pretraining tiles (cells with all three sensors, split `pretrain`) and downstream chips
    (`downstream` cells cut into chip x chip pieces, labelled by their dominant WorldCover class,
    split into train and test by cell), every band standardised with the pretraining set's
    per-band mean and sd of each sensor."""
    labels = mt.read_labels(root)
    pre = sorted(c for c, (s, _) in labels.items() if s == "pretrain")
    down = sorted(c for c, (s, _) in labels.items() if s == "downstream")
    tile = spec.get("tile_px")   # full scale: the centre crop of each 1068 px Major-TOM patch
    coll = {k: mt.read_collection(root, k, set(pre) if k == "s2l1c" else set(pre) | set(down), tile)
            for k in mt.COLLECTIONS}
    pre = [c for c in pre if all(c in coll[k] for k in coll)]
    out = {}
    for k in mt.COLLECTIONS:
        x = np.stack([coll[k][c] for c in pre])
        mean, sd = x.mean((0, 2, 3), keepdims=True), x.std((0, 2, 3), keepdims=True) + 1e-6
        out[k] = ((x - mean) / sd).astype(np.float32)
        out[f"{k}_mean"], out[f"{k}_sd"] = mean[0], sd[0]
    out["label"] = np.array([class_index(labels[c][1]) for c in pre])
    rng = np.random.default_rng(spec["data_seed"])
    down = [c for c in down if c in coll["s2l2a"] and c in coll["s1rtc"]]
    is_train = np.zeros(len(down), bool)
    is_train[rng.permutation(len(down))[: int(round(spec["train_fraction"] * len(down)))]] = True
    chip = spec["chip_px"]
    for part, keep in (("train", is_train), ("test", ~is_train)):
        xs = {k: [] for k in ("s2l2a", "s1rtc")}
        ys = []
        for c in np.array(down)[keep]:
            codes = mt.on_grid([labels[c][1]], tile)[0]
            for y0 in range(0, codes.shape[0] - chip + 1, chip):
                for x0 in range(0, codes.shape[1] - chip + 1, chip):
                    ys.append(class_index(codes[y0:y0 + chip, x0:x0 + chip]))
                    for k in xs:
                        xs[k].append(coll[k][c][:, y0:y0 + chip, x0:x0 + chip])
        for k in xs:
            out[f"{part}_{k}"] = ((np.stack(xs[k]) - out[f"{k}_mean"]) / out[f"{k}_sd"]).astype(np.float32)
        out[f"{part}_label"] = np.array(ys)
    return out


def knn_predict(train_x, train_y, test_x, k: int, temperature: float, n_classes: int) -> np.ndarray:
    """DINO's weighted kNN vote on l2-normalised features: the k train features of highest cosine
    similarity (nearest first), each voting exp(similarity / T) for its class. (numpy in place of
    scikit-learn's brute cosine NearestNeighbors, whose import alone cost more than the search; the
    same neighbours and scores on 24 tiny feature sets. The same day's encoder speed-ups moved the
    features by float rounding, which flipped one near-tie test chip of one seed's S1 record.)"""
    k = min(k, len(train_x))
    unit = [x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), np.finfo(x.dtype).tiny) for x in (train_x, test_x)]
    sim = 1 - np.clip(1 - unit[1] @ unit[0].T, 0, 2)   # cosine distance clipped to [0, 2], as scikit-learn
    ind = np.argpartition(-sim, k - 1, axis=1)[:, :k]
    rows = np.arange(len(test_x))[:, None]
    ind = ind[rows, np.argsort(-sim[rows, ind], axis=1, kind="stable")]   # nearest first
    votes = np.zeros((len(test_x), n_classes))
    np.add.at(votes, (np.broadcast_to(rows, ind.shape), train_y[ind]), np.exp(sim[rows, ind] / temperature))
    return votes.argmax(1)


def subset(labels: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """A seeded random fraction of the training chips (at least one)."""
    n = max(1, int(round(fraction * len(labels))))
    return np.sort(np.random.default_rng([seed, 11]).choice(len(labels), n, replace=False))


def scores(y_true, y_pred, tail_classes) -> dict:
    """Overall accuracy, balanced accuracy (mean recall over the classes present in y_true, as
    scikit-learn's balanced_accuracy_score) and the mean recall of the tail classes present."""
    y_true, y_pred = np.asarray(y_true), np.asarray(y_pred)
    recall = {int(c): float((y_pred[y_true == c] == c).mean()) for c in np.unique(y_true)}
    present = [c for c in tail_classes if c in recall]
    tail = float(np.mean([recall[c] for c in present])) if present else float("nan")
    oa = float((y_true == y_pred).mean())
    # micro_f1: the metric of GEO-Bench's multi-label m-bigearthnet; for single-label chips it equals the OA
    # (recorded so that every record carries the declared metric the full-scale benchmark column reads)
    return {"oa": oa, "balanced_acc": float(np.mean(list(recall.values()))), "tail_acc": tail, "micro_f1": oa}


def tail_classes(train_labels: np.ndarray, n_classes: int, n_tail: int) -> list[int]:
    """The n_tail rarest classes of the downstream training chips (ties: the higher index)."""
    counts = np.bincount(train_labels, minlength=n_classes)
    return [int(c) for c in np.lexsort((-np.arange(n_classes), counts))[:n_tail]]


def raw_features(x: np.ndarray) -> np.ndarray:
    """Per-band mean and sd of a chip: the no-learning reference of the pre-arm checks."""
    return np.concatenate([x.mean((2, 3)), x.std((2, 3))], 1)


def pre_arm_checks(arrays: dict, cfg: dict) -> dict:
    """Run before any arm: (1) the classes are long-tailed (the share of the rarest classes and the
    head/tail ratio of the downstream training chips and of the pretraining tiles); (2) S1 and S2
    both carry the label (raw per-band statistics, kNN, above the majority-class rate); (3) raw
    statistics are far from perfect (room for a learned encoder)."""
    ev, n_cls = cfg["eval"], cfg["data"]["majortom"]["n_classes"]
    y_tr, y_te = arrays["train_label"], arrays["test_label"]
    counts = np.bincount(y_tr, minlength=n_cls)
    tails = tail_classes(y_tr, n_cls, ev["n_tail"])
    out = {"downstream_train_counts": counts.tolist(), "test_counts": np.bincount(y_te, minlength=n_cls).tolist(),
           "pretrain_counts": np.bincount(arrays["label"], minlength=n_cls).tolist(),
           "tail_share": float(counts[tails].sum() / counts.sum()),
           "head_tail_ratio": float(counts.max() / max(1, counts[tails].min())),
           "majority_rate": float((y_te == np.bincount(y_tr).argmax()).mean())}
    for k, name in (("s2l2a", "s2"), ("s1rtc", "s1")):
        pred = knn_predict(raw_features(arrays[f"train_{k}"]), y_tr, raw_features(arrays[f"test_{k}"]),
                           ev["k"], ev["temperature"], n_cls)
        out[f"raw_{name}"] = scores(y_te, pred, tails)
    return out
