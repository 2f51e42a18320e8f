"""prepare: release files -> the three reference lists per focal paper -> size-matched graph pairs
per task, with structural node features and node embeddings, saved as flat arrays.

Sources: `gt` (SciSciNet's references of the focal paper), `llm_r<r>` (tiny: the rank-r recommender
of recommender.py; full: GPT-4o's existing references from the companion's Zenodo record),
`random` (field-matched reshuffle: each focal paper gets as many references as it has, drawn from
the references of the focal papers of its own field, as the paper's random baseline preserves
out-degree and field distribution).

Tasks (binary): gt vs llm (per recommender rank at tiny), gt vs random, llm vs random. In each task
the two graphs of a focal paper are size-matched (graphs.size_match) and get labels 0 / 1.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from iclr26.core.io import save_arrays

from . import corpus, graphs


def tfidf(texts: list[str], dim: int, seed: int, vocab_min_df: int = 2) -> np.ndarray:
    """TF-IDF of the texts, then a fixed seeded Gaussian random projection to `dim` (scikit-learn):
    the tiny stand-in for a text embedding model (no download), rows L2-normalised."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.random_projection import GaussianRandomProjection

    x = TfidfVectorizer(min_df=vocab_min_df, sublinear_tf=True).fit_transform(texts)
    z = GaussianRandomProjection(n_components=dim, random_state=seed).fit_transform(x)
    z = np.asarray(z, dtype=np.float32)
    return z / np.maximum(np.linalg.norm(z, axis=1, keepdims=True), 1e-8)


def read_tables(raw: Path, ids=None) -> dict:
    """Papers (the columns we use) and each paper's top-level field (PaperFields has a row per field
    and subfield of a paper; SciSciNet_Fields' Field_Type says which is 'Top', as the companion's
    03_sample.py keeps); only the rows of `ids` if given."""
    keep = None if ids is None else corpus.ids_in(ids)
    papers = corpus.stream_rows(raw / corpus.PAPERS, corpus.PAPER_COLUMNS, keep)
    fields = corpus.stream_rows(raw / corpus.FIELDS, ["PaperID", "FieldID"], keep)
    types = corpus.stream_rows(raw / corpus.FIELD_TYPES, ["FieldID", "Field_Type"])
    top = set(types.FieldID[types.Field_Type == "Top"].tolist())
    fields = fields[fields.FieldID.isin(top)].drop_duplicates("PaperID")
    return {"papers": papers, "field": dict(zip(fields.PaperID, fields.FieldID))}


def texts_of(raw: Path, ids: np.ndarray) -> list[str]:
    keep = corpus.ids_in(ids)
    titles = corpus.stream_rows(raw / corpus.DETAILS, ["PaperID", "PaperTitle"], keep)
    title = dict(zip(titles.PaperID, titles.PaperTitle.fillna("")))
    abstract = {}
    if (raw / corpus.ABSTRACTS).exists():
        ab = corpus.stream_rows(raw / corpus.ABSTRACTS, ["PaperID", "Abstract"], keep)
        abstract = dict(zip(ab.PaperID, ab.Abstract.fillna("")))
    return [f"{title.get(i, '')} {abstract.get(i, '')}".strip() for i in ids]


def random_lists(focal: np.ndarray, gt: dict[int, np.ndarray], field: dict, seed: int) -> dict[int, np.ndarray]:
    """Field-matched random baseline: each focal paper's out-degree, references drawn from the pooled
    references of the focal papers of the same field (its own excluded)."""
    rng = np.random.default_rng(seed)
    pools: dict = {}
    for f in focal:
        pools.setdefault(field.get(f), []).extend(int(r) for r in gt[f])
    out = {}
    for f in focal:
        pool = np.array(sorted(set(pools[field.get(f)]) - {int(f)} - set(gt[f].tolist())))
        n = min(len(gt[f]), len(pool))
        out[int(f)] = rng.choice(pool, size=n, replace=False) if n else np.zeros(0, np.int64)
    return out


def llm_lists_tiny(raw: Path, tables: dict, focal: np.ndarray, gt: dict, cfg: dict, seed: int, log) -> dict:
    """{rank: {focal: ids}} from the recommender of each rank, trained without the focal lists."""
    from . import recommender

    spec = cfg["llm"]
    ids = tables["papers"].PaperID.to_numpy()
    row = {int(p): k for k, p in enumerate(ids)}
    text = tfidf(texts_of(raw, ids), spec["text_dim"], spec["text_seed"])
    focal_set = set(int(f) for f in focal)
    pairs = corpus.stream_rows(raw / corpus.REFERENCES, ["Citing_PaperID", "Cited_PaperID"],
                               lambda c: ~np.isin(c.Citing_PaperID.to_numpy(), list(focal_set)))
    citing = np.array([row[int(i)] for i in pairs.Citing_PaperID])
    cited = np.array([row[int(i)] for i in pairs.Cited_PaperID])
    rng = np.random.default_rng(seed + 1)
    out = {}
    for rank in spec["ranks"]:
        model = recommender.train(text, citing, cited, rank, spec, seed)
        rows = np.array([row[int(f)] for f in focal])
        counts = np.array([len(gt[f]) for f in focal])
        lists = recommender.generate(model, text, rows, counts, spec["temperature"], seed)
        kept = {}
        for f, picks in zip(focal, lists):
            exists = rng.random(len(picks)) < spec["existence_rate"]  # the existence check keeps about half
            kept[int(f)] = ids[picks[exists]]
        out[rank] = kept
        log(f"recommender rank {rank}: trained on {len(citing)} citations (focal lists excluded)")
    return out


def llm_lists_full(raw: Path, spec: dict) -> dict:
    """GPT-4o's existing references (companion Zenodo record): {label: {focal: matched SciSciNet ids}};
    references without a SciSciNet match (non-existent) are dropped, as the paper's graphs do."""
    cols = spec["columns"]
    use = [cols["focal"], cols["matched"]] + ([cols["exists"]] if cols.get("exists") else [])
    df = pd.read_csv(raw / spec["file"], usecols=use)
    if cols.get("exists"):
        df = df[df[cols["exists"]] == 1]
    df = df.dropna(subset=[cols["focal"], cols["matched"]])
    lists = {int(f): g[cols["matched"]].astype(np.int64).unique() for f, g in df.groupby(cols["focal"])}
    return {spec["rank_label"]: lists}


def adjacency_among(raw: Path, nodes: set[int]) -> dict[int, set[int]]:
    """Citation links among `nodes`, streamed from PaperReferences (rows with both ends in nodes)."""
    wanted = np.array(sorted(nodes), dtype=np.int64)
    edges = corpus.stream_rows(raw / corpus.REFERENCES, ["Citing_PaperID", "Cited_PaperID"],
                               lambda c: np.isin(c.Citing_PaperID.to_numpy(np.int64), wanted)
                               & np.isin(c.Cited_PaperID.to_numpy(np.int64), wanted))
    adj: dict[int, set[int]] = {}
    for a, b in zip(edges.Citing_PaperID.to_numpy(np.int64), edges.Cited_PaperID.to_numpy(np.int64)):
        adj.setdefault(int(a), set()).add(int(b))
        adj.setdefault(int(b), set()).add(int(a))
    return adj


def task_arrays(name: str, focal: np.ndarray, lists_a: dict, lists_b: dict, adj: dict, seed: int,
                star: bool = True, nostar: bool = False, cache: dict | None = None) -> dict:
    """Size-matched graph pairs of one task as flat arrays (class 0 = lists_a, class 1 = lists_b).
    `star`: the graphs link the focal node to every listed reference (graphs.build); `nostar`: also
    the structural features of the same size-matched graphs without those edges (`*_nostar` arrays).
    `cache`: node features by graph, shared across the tasks of one prepare (graphs.cached_features)."""
    cache = {} if cache is None else cache
    rng = np.random.default_rng([seed, sum(map(ord, name))])
    node_ids, offsets, labels, pair = [], [0], [], []
    out = {v: {"struct": [], "agg": [], "edges": [], "edge_offsets": [0]} for v in ("", "_nostar")}
    for k, f in enumerate(focal):
        ga, gb = graphs.build(f, lists_a[int(f)], adj, star), graphs.build(f, lists_b[int(f)], adj, star)
        ga, gb = graphs.size_match(ga, gb, int(f), rng)
        for label, g in ((0, ga), (1, gb)):
            node_ids.extend(g.nodes)
            offsets.append(offsets[-1] + g.number_of_nodes())
            labels.append(label)
            pair.append(k)
            for variant, h in (("", g), *((("_nostar", graphs.without_star(g, int(f))),) if nostar else ())):
                feats = graphs.cached_features(h, cache)
                arrays = out[variant]
                arrays["struct"].append(feats)
                arrays["agg"].append(graphs.aggregate(feats, h.number_of_edges()))
                arrays["edges"].append(graphs.edge_index(h))
                arrays["edge_offsets"].append(arrays["edge_offsets"][-1] + arrays["edges"][-1].shape[1])
    result = {"node_ids": np.array(node_ids, np.int64), "offsets": np.array(offsets), "labels": np.array(labels),
              "pair": np.array(pair)}
    for variant, arrays in out.items():
        if arrays["struct"]:
            result.update({f"struct{variant}": np.concatenate(arrays["struct"]),
                           f"agg{variant}": np.stack(arrays["agg"]),
                           f"edges{variant}": np.concatenate(arrays["edges"], axis=1),
                           f"edge_offsets{variant}": np.array(arrays["edge_offsets"])})
    return result


def describe(focal, lists: dict, gt: dict, adj: dict, emb: dict, cites: dict, year: dict) -> dict:
    """Per focal paper, before any classifier (the mechanism check): similarity of the list to the
    focal paper, the references' log citations, links among the references, overlap with the true
    list, and the share of references that postdate the focal paper."""
    out = {k: [] for k in ("focal_cos", "log_citations", "edge_density", "gt_overlap", "future_share", "n_refs")}
    for f in focal:
        refs = [int(r) for r in lists[int(f)] if int(r) != int(f)]
        if not refs:
            for key in out:
                out[key].append(np.nan)
            continue
        e = np.stack([emb[r] for r in refs])
        out["focal_cos"].append(float(e.mean(0) @ emb[int(f)] / max(np.linalg.norm(e.mean(0)), 1e-8)))
        out["log_citations"].append(float(np.mean([np.log1p(cites.get(r, 0)) for r in refs])))
        members = set(refs)
        links = sum(len(adj.get(r, set()) & members) for r in refs) / 2
        out["edge_density"].append(float(links / max(1, len(refs) * (len(refs) - 1) / 2)))
        out["gt_overlap"].append(float(len(members & set(int(x) for x in gt[int(f)])) / len(refs)))
        out["future_share"].append(float(np.mean([year.get(r, 0) > year[int(f)] for r in refs])))
        out["n_refs"].append(float(len(refs)))
    return {k: np.array(v) for k, v in out.items()}


def save_task(out: Path, name: str, arrays: dict) -> Path:
    return save_arrays(out / f"task_{name}.npz", **arrays)
