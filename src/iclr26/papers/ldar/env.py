"""The environment of one context length: queries, their similarity vectors, and the frozen reader
that turns a set of passages into a judged answer (the reward).

prepare writes one folder per length; `open_env` reads it back:
    rows.json       the queries (LaRA fields, plus `split` where the official split is used)
    sims.npz        flat question-passage cosines and per-query offsets (document order)
    reader.npz      tiny: the frozen reader's precomputed look-ups (tiny_env.Episode), flat
    passages.json   full: each query's passages, for the LLM
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from iclr26.core.io import read_json, write_json

from .flat import load_flat, save_flat


class TinyEnv:
    """Reward = the frozen tiny reader's exact-match answer (tiny_env)."""

    def __init__(self, folder: Path, cfg: dict):
        from .tiny_env import Reader

        self.rows = read_json(folder / "rows.json")
        self.sims = load_flat(folder / "sims.npz")["sims"]
        flat = load_flat(folder / "reader.npz")
        meta = read_json(folder / "reader.json")
        self.id_to_value = meta["id_to_value"]
        self.episodes = [{"scores": s, "values": v[0].astype(int), "gold": g[0].astype(bool), **m}
                         for s, v, g, m in zip(flat["scores"], flat["values"], flat["gold"], meta["episodes"])]
        r = cfg["reader"]
        self.reader = Reader(r["dim"], r["sharpness"], r["null_score"], seed=r["seed"])

    def gold(self, i: int) -> np.ndarray:
        return np.flatnonzero(self.episodes[i]["gold"])

    def rewards(self, queries, selections) -> np.ndarray:
        """Judged answers for each (query index, passage indices) pair."""
        from .tiny_env import correct

        out = np.zeros(len(queries))
        for j, (q, sel) in enumerate(zip(queries, selections)):
            mask = np.zeros((1, len(self.sims[q])), bool)
            mask[0, sel] = True
            out[j] = correct(self.reader, self.episodes[q], mask, self.id_to_value)[0]
        return out

    def tokens(self, q: int, sel) -> int:
        return int(len(sel))


def prepare_tiny(raw: Path, out: Path, length: str, cfg: dict) -> dict:
    """Passages, retriever similarities and the frozen reader's look-ups of every query of one
    length; and the check the card asks for before any policy is trained: the reader's accuracy
    with the gold passages plus k random distractors, for growing k."""
    from . import data, tiny_env

    spec = cfg["data"]["lara"]
    rows = data.load_queries(raw, length, spec["types"], spec["levels"])
    r = cfg["reader"]
    reader = tiny_env.Reader(r["dim"], r["sharpness"], r["null_score"], seed=r["seed"])
    vocab: dict[str, int] = {}
    episodes, sims, docs = [], [], {}
    for row in rows:
        key = (row["type"], row["file"])
        if key not in docs:
            docs[key] = tiny_env.split_passages(data.load_document(raw, row))
        passages = docs[key]
        episodes.append(tiny_env.Episode.build(reader, row, passages, vocab))
        sims.append(tiny_env.tfidf_similarities(row["question"], passages, cfg["retriever"]["buckets"]))
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "rows.json", rows)
    save_flat(out / "sims.npz", sims=sims)
    pad = [np.concatenate([e["scores"], np.full((2 - len(e["scores"]), e["scores"].shape[1]), -np.inf)])
           for e in episodes]
    save_flat(out / "reader.npz", scores=pad, values=[e["values"][None] for e in episodes],
              gold=[e["gold"][None].astype(np.int8) for e in episodes])
    id_to_value = [None] * len(vocab)
    for k, v in vocab.items():
        id_to_value[v] = k
    write_json(out / "reader.json", {"id_to_value": id_to_value, "episodes": [
        {k: e[k] for k in ("level", "truth", "answer", "names")} for e in episodes]})
    env = TinyEnv(out, cfg)
    return {"queries": len(rows), "documents": len(docs), "passages": int(np.mean([len(s) for s in sims])),
            "distraction_check": distraction_curve(env, r["check_distractors"], seed=r["seed"])}


def distraction_curve(env, grid, seed: int) -> dict:
    """Reader accuracy per level with the gold passages plus k random other passages."""
    rng = np.random.default_rng(seed)
    curve = {}
    for k in grid:
        per_level: dict[str, list[float]] = {}
        for q, row in enumerate(env.rows):
            gold = env.gold(q)
            others = np.setdiff1d(np.arange(len(env.sims[q])), gold)
            sel = np.concatenate([gold, rng.choice(others, min(k, len(others)), replace=False)])
            per_level.setdefault(row["level"], []).append(float(env.rewards([q], [sel])[0]))
        curve[str(k)] = {lv: round(float(np.mean(v)), 4) for lv, v in per_level.items()}
    return curve


def open_env(folder: Path, cfg: dict):
    if cfg["data"]["lara"]["source"] == "synthetic":
        return TinyEnv(folder, cfg)
    from .full_env import FullEnv

    return FullEnv(folder, cfg)
