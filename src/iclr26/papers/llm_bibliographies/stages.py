"""Stages of card 10, LLM bibliographies (arXiv 2601.20704).

    acquire   tiny/smoke: a SciSciNet-format corpus from a seeded generator (corpus.write_synthetic)
              full: the SciSciNet v1 tables (figshare) and the companion's GPT-4o reference lists
              (Zenodo record 15124610), plus the pinned embedding model's snapshot
    prepare   focal papers; the three reference lists (ground truth, LLM, field-matched random);
              graphs, size matching, structural node features and node embeddings per task;
              the pre-classifier description of every list (build.describe)      -> task_*.npz
    train     GCN rows: one GCN per (seed, task), one unit of work each (job.units): the test
              accuracy and F1 at the best validation epoch                      -> gcn_results.json
    evaluate  every row, per seed (one 70/15/15 split by focal paper and one classifier init):
              accuracy and F1 on the test graphs of each binary task. The random forests are fit
              here (seconds; they are `training_free` for the workflow); GCN rows read train's results.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from iclr26.core.io import load_arrays, read_json, save_arrays, write_json

# build and corpus (pandas, networkx) are imported by acquire and prepare only: the train and evaluate
# jobs do not pay for them
from . import classify

DATASET = "scisci"
TASKS = ("gt_llm", "gt_random", "llm_random")
ROWS = {  # method -> (classifier, node features, the LLM source it reads, the tasks it runs on)
    "rf_struct": ("rf", "struct", "headline", TASKS), "rf_embed": ("rf", "embed", "headline", TASKS),
    "gcn_struct": ("gcn", "struct", "headline", TASKS), "gcn_embed": ("gcn", "embed", "headline", TASKS),
    # the metadata row (audit M1): the references' popularity and age alone, no structure, no text
    "rf_meta": ("rf", "meta", "headline", ("gt_llm",)),
    # the structure rows on the same size-matched graphs without the focal -- reference star (audit M4)
    "rf_struct_nostar": ("rf", "struct_nostar", "headline", TASKS),
    "gcn_struct_nostar": ("gcn", "struct_nostar", "headline", ("gt_llm",)),  # GT vs LLM only: CPU budget
    # the paper's control of GT vs GPT: a fixed random vector per PaperID, and fresh draws per node
    "rf_random_vec": ("rf", "random_vec", "headline", ("gt_llm",)),
    "rf_random_vec_fresh": ("rf", "random_vec_fresh", "headline", ("gt_llm",)),
    "rf_embed_low_rank": ("rf", "embed", "low", ("gt_llm",)),
    "rf_embed_high_rank": ("rf", "embed", "high", ("gt_llm",)),
}


def acquire(job) -> dict:
    from . import corpus

    spec = job.cfg["data"][job.dataset]
    if spec["source"] == "synthetic":
        return {"source": "synthetic", **corpus.write_synthetic(job.out_dir, spec, spec["data_seed"])}
    if spec["source"] == "sciscinet":
        from . import full

        info = {"source": "sciscinet", **full.acquire(job.out_dir, spec, job.log)}
        if job.cfg["embed"]["kind"] == "hub" and not Path(job.cfg["embed"]["source"]).exists():
            from iclr26.core.acquire import snapshot_model

            info["embed"] = snapshot_model(job.cfg["embed"])
        return info
    raise ValueError(f"data.{job.dataset}.source must be synthetic or sciscinet, got {spec['source']!r}")


def llm_sources(cfg: dict) -> dict[str, object]:
    """{headline | low | high: the key of the LLM lists} (tiny: recommender ranks; full: GPT-4o only)."""
    spec = cfg["data"][DATASET]
    if spec["source"] == "synthetic":
        return {"headline": cfg["llm"]["headline_rank"], "low": cfg["llm"]["sweep"]["low"],
                "high": cfg["llm"]["sweep"]["high"]}
    return {"headline": spec["llm"]["rank_label"]}


def task_name(task: str, which: str) -> str:
    return task if which == "headline" else f"{task}_{which}"


def prepare(job) -> dict:
    from . import build, corpus

    cfg, raw, out = job.cfg, job.raw_dir(), job.out_dir
    spec = cfg["data"][DATASET]
    if spec["source"] == "synthetic":
        tables = build.read_tables(raw)
        focal = corpus.choose_focal(tables["papers"], spec, spec["data_seed"])
    else:  # full: the companion's focal papers are those of its GPT-4o lists
        llm = build.llm_lists_full(raw, spec["llm"])
        focal = np.array(sorted(next(iter(llm.values()))))
        tables = build.read_tables(raw, focal)
    refs = corpus.stream_rows(raw / corpus.REFERENCES, ["Citing_PaperID", "Cited_PaperID"], corpus.ids_in(focal))
    gt = {int(f): np.zeros(0, np.int64) for f in focal}
    gt.update({int(f): g.Cited_PaperID.to_numpy(np.int64) for f, g in refs.groupby("Citing_PaperID")})
    if spec["source"] == "synthetic":
        llm = build.llm_lists_tiny(raw, tables, focal, gt, cfg, spec["data_seed"], job.log)
    # focal papers with a list from every source (the companion keeps papers with existing references)
    focal = np.array([f for f in focal if len(gt[int(f)]) >= 2
                      and all(len(v.get(int(f), ())) >= 1 for v in llm.values())])
    rnd = build.random_lists(focal, gt, tables["field"], spec["data_seed"])
    sources = llm_sources(cfg)
    nodes = set(int(f) for f in focal)
    for lists in (gt, rnd, *llm.values()):
        for f in focal:
            nodes.update(int(r) for r in lists[int(f)])
    adj = build.adjacency_among(raw, nodes)
    ids = np.array(sorted(nodes), np.int64)
    emb = _embeddings(job, raw, ids)
    meta = tables["papers"] if spec["source"] == "synthetic" else build.read_tables(raw, ids)["papers"]
    meta = meta[meta.PaperID.isin(ids)]
    cites, year = dict(zip(meta.PaperID, meta.Citation_Count)), dict(zip(meta.PaperID, meta.Year))
    # node metadata for the metadata row: log(1 + citations) and publication year
    node_meta = np.array([[np.log1p(cites.get(int(i), 0)), year.get(int(i), np.nan)] for i in ids], np.float32)
    save_arrays(out / "embeddings.npz", ids=ids, emb=emb, meta=node_meta)
    pairs = {"gt_random": (gt, rnd)}
    for which, key in sources.items():
        pairs[task_name("gt_llm", which)] = (gt, llm[key])
        if which == "headline":
            pairs["llm_random"] = (llm[key], rnd)
    star, features = bool(cfg["graph"]["star"]), {}  # node features of each distinct graph, across tasks
    for name, (a, b) in pairs.items():
        nostar = star and name in TASKS  # the no-star structure rows run on the headline tasks
        build.save_task(out, name, build.task_arrays(name, focal, a, b, adj, spec["data_seed"], star, nostar,
                                                     features))
    # the mechanism check, before any classifier: how each source's lists differ
    by_id = {int(i): emb[k] for k, i in enumerate(ids)}
    described = {"gt": gt, "random": rnd, **{f"llm_{w}": llm[k] for w, k in sources.items()}}
    summary = {"focal": int(len(focal)), "nodes": int(len(ids)), "embedding_dim": int(emb.shape[1])}
    for name, lists in described.items():
        d = build.describe(focal, lists, gt, adj, by_id, cites, year)
        save_arrays(out / f"describe_{name}.npz", **d)
        summary[name] = {k: float(np.nanmean(v)) for k, v in d.items()}
        job.log(f"{name}: " + ", ".join(f"{k} {v:.3f}" for k, v in summary[name].items()))
    write_json(out / "summary.json", summary)
    return summary


def _embeddings(job, raw: Path, ids: np.ndarray) -> np.ndarray:
    from . import build
    from .embed import embed

    return embed(build.texts_of(raw, ids), job.cfg, job.log)


def _tasks(method: str) -> list[str]:
    # the random-vector controls are the paper's control of GT vs GPT; the rank sweep is GT vs LLM only
    _, _, which, tasks = ROWS[method]
    return [task_name(t, which) for t in tasks]


class _Inputs:
    """A prepared task's arrays and the node embeddings, loaded once per job."""

    def __init__(self, prepared: Path):
        self.prepared, self.tasks, self.matrices = prepared, {}, {}
        stored = load_arrays(prepared / "embeddings.npz")
        self.emb, self.row = stored["emb"], {int(i): k for k, i in enumerate(stored["ids"])}
        self.meta = stored["meta"]

    def task(self, name: str) -> dict:
        if name not in self.tasks:
            self.tasks[name] = load_arrays(self.prepared / f"task_{name}.npz")
        return self.tasks[name]

    def features(self, name: str, data: dict, feats: str, seed: int) -> np.ndarray:
        """A task's node features, built once per job and shared by its seeds, except the fresh
        random vectors, which are drawn per seed (the fixed per-PaperID vectors are the same every seed)."""
        if feats == "random_vec_fresh":
            return classify.node_matrix(data, feats, self.emb, self.row, seed, self.meta)
        if (name, feats) not in self.matrices:
            self.matrices[name, feats] = classify.node_matrix(data, feats, self.emb, self.row, seed, self.meta)
        return self.matrices[name, feats]


def _fit(cfg: dict, method: str, inputs: _Inputs, task: str, seed: int) -> dict:
    """One classifier of a row on one task and seed: test accuracy and F1."""
    kind, feats, _, _ = ROWS[method]
    data = inputs.task(task)
    if feats == "struct_nostar":
        if "struct_nostar" in data:
            data = {**data, "edges": data["edges_nostar"], "edge_offsets": data["edge_offsets_nostar"]}
        else:  # graph.star=false: the headline graphs have no star already
            feats = "struct"
    parts = classify.split(data["pair"], seed, tuple(cfg["eval"]["split"]))
    x = inputs.features(task, data, feats, seed)
    if kind == "rf":
        result = classify.random_forest(classify.graph_vectors(data, feats, x), data["labels"], parts, cfg["rf"], seed)
    else:
        result = classify.gcn(data, x, parts, cfg["gcn"], seed)
    return {"n_test_graphs": int(len(parts[2])), **result}


def train(job) -> dict:
    """GCN rows: one unit of work per (seed, task); the results go to evaluate."""
    if ROWS[job.method][0] != "gcn" or ROWS[job.method][2] not in llm_sources(job.cfg):
        return {}
    inputs = _Inputs(job.prepared_dir(DATASET))
    keys = {f"s{seed}_{task}": (seed, task) for seed in job.seeds for task in _tasks(job.method)}
    results = job.units(keys, lambda key: _fit(job.cfg, job.method, inputs, keys[key][1], keys[key][0]))
    write_json(job.out_dir / "gcn_results.json", results)
    return {"units": len(results)}


def evaluate(job) -> dict:
    cfg, prepared = job.cfg, job.prepared_dir(DATASET)
    kind, _, which, _ = ROWS[job.method]
    if which not in llm_sources(cfg):  # full scale: no rank sweep (one GPT-4o)
        return {"records": []}
    inputs = _Inputs(prepared)
    trained = read_json(job.out_dir / "gcn_results.json") if kind == "gcn" else {}
    records = []
    for seed in job.seeds:
        for task in _tasks(job.method):
            result = trained[f"s{seed}_{task}"] if kind == "gcn" else _fit(cfg, job.method, inputs, task, seed)
            records.append({"seed": seed, "task": "gt_llm" if which != "headline" else task, "source": "",
                            **result})
        if job.method == "rf_struct":
            records.extend(_describe_records(prepared, seed, cfg))
    return {"records": records}


def _describe_records(prepared: Path, seed: int, cfg: dict) -> list[dict]:
    """The lists' description on this seed's test focal papers (records of task `describe`)."""
    data = load_arrays(prepared / "task_gt_llm.npz")
    test_focal = np.unique(data["pair"][classify.split(data["pair"], seed, tuple(cfg["eval"]["split"]))[2]])
    out = []
    for path in sorted(prepared.glob("describe_*.npz")):
        d = load_arrays(path)
        out.append({"seed": seed, "task": "describe", "source": path.stem.removeprefix("describe_"),
                    **{k: float(np.nanmean(v[test_focal])) for k, v in d.items()}})
    return out


def figures(cfg: dict, records, out_dir) -> list[Path]:
    from . import plots

    return plots.make_all(cfg, records, Path(out_dir))

