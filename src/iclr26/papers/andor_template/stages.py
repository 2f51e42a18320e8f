"""Stages of card 05, the AND-OR composition template.

    acquire   tiny/smoke: AVA-format rated layouts from a seeded generator (layouts.write_synthetic)
              full: AVA.txt and the part boxes (parts.jsonl) placed by hand (one line says where);
              their sha256 are recorded
    prepare   the one loader (layouts.load) -> layouts.npz: geometry, mean score, expert paradigm
    evaluate  per seed: a split (test; an unlabelled pool of high-rated images whose ratings are then
              not used; labelled sets nested over the label budgets, at tiny holding only the
              `labelled_paradigms`); per budget the row's model, its SRCC/PLCC with the mean ratings,
              SRCC on the new paradigm and random layouts, branch purity, parameters, guidance
"""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
from scipy.stats import pearsonr, spearmanr

from iclr26.core.io import load_arrays, read_json, save_arrays, sha256_file, write_json

from . import layouts
from . import template as T

DATASET = "layouts"
NAN = float("nan")
MLPS = ("mlp", "mlp_pool")   # trained in `train`; mlp_pool also learns from the pool, pseudo-labelled
# rows that reuse the template + expansion fit and differ only in the guidance edit
GUIDE = {"template_expansion": None, "random_move": "random", "random_bin": "random_bin", "thirds_rule": "thirds"}


def acquire(job) -> dict:
    spec = job.cfg["data"][job.dataset]
    if spec["source"] == "synthetic":
        return {"source": "synthetic", **layouts.write_synthetic(job.out_dir, spec, spec["data_seed"])}
    if spec["source"] == "ava":
        where = Path(spec["manual_dir"])
        missing = [n for n in (layouts.RATINGS, layouts.PARTS) if not (where / n).exists()]
        if missing:
            raise FileNotFoundError(f"andor_template full scale: place {missing} in {where} ({spec['manual_step']})")
        info = {"source": "ava"}
        for name in (layouts.RATINGS, layouts.PARTS):
            (job.out_dir / name).write_bytes((where / name).read_bytes())
            info[name] = sha256_file(job.out_dir / name)
            job.log(f"{name}: sha256 {info[name]} (UNVERIFIED: no published digest)")
        return info
    raise ValueError(f"data.{job.dataset}.source must be synthetic or ava, got {spec['source']!r}")


def prepare(job) -> dict:
    df = layouts.load(job.raw_dir())
    save_arrays(job.out_dir / "layouts.npz", geometry=layouts.geometry_of(df), score=df.mean_score.to_numpy(float),
                paradigm=df.paradigm.to_numpy(int), image_id=df.image_id.to_numpy(np.int64))
    return {"images": int(len(df)), "mean_score": float(df.mean_score.mean()),
            "paradigms": {str(p): int((df.paradigm == p).sum()) for p in sorted(df.paradigm.unique())}}


def _inputs(job):
    data = load_arrays(job.prepared_dir(DATASET) / "layouts.npz")
    tc = job.cfg["template"]
    # the sensitivity row uses the card trial's grid instead of the chosen one
    dictionary = T.Dictionary.make(tc["card_bins"] if job.method == "template_expansion_card_bins" else tc["bins"])
    q = T.reference_q(dictionary, tc["reference_n"], tc["reference_seed"], tc["eps"])
    return data, dictionary, q, dictionary.features(data["geometry"])


def train(job) -> dict:
    """The deep baseline: one MLP per (seed, label budget), one unit of work each; its test metrics go
    to evaluate. The templates have nothing slow to train: evaluate fits them (seconds)."""
    if job.method not in MLPS:
        return {}
    cfg = job.cfg
    data, _, _, h = _inputs(job)
    x = np.concatenate([h, data["geometry"]], 1)
    new = new_paradigms(cfg, data)
    keys = {f"s{seed}_{b}": (seed, b) for seed in job.seeds for b in cfg["eval"]["budgets"]}

    def work(key):
        seed, budget = keys[key]
        parts = split(data, cfg, seed)
        lab = parts["labelled"][: cfg["eval"]["budgets"][budget]]
        xs, ys = x[lab], data["score"][lab]
        if job.method == "mlp_pool":   # equal data access: the pool the expansion sees, at the good images' mean
            pool = parts["pool"]
            xs = np.concatenate([xs, x[pool]])
            ys = np.concatenate([ys, np.full(len(pool), pool_pseudo_label(cfg, data, lab))])
        model, n_params = mlp_fit(cfg, xs, ys, seed)
        return {**_metrics(model.predict(x[parts["test"]]), data, parts["test"], new), "n_params": n_params}

    results = job.units(keys, work)
    write_json(job.out_dir / "mlp_results.json", results)
    return {"units": len(results)}


def split(data: dict, cfg: dict, seed: int, restrict: bool = True) -> dict:
    """Test set, unlabelled good pool, and the labelled candidates (a random order: budgets are prefixes)."""
    ev = cfg["eval"]
    rng = np.random.default_rng(seed)
    n = len(data["score"])
    perm = rng.permutation(n)
    test, rest = perm[: ev["n_test"]], perm[ev["n_test"]:]
    high = rest[data["score"][rest] >= np.quantile(data["score"][rest], ev["pool_quantile"])]
    pool = rng.permutation(high)[: ev["n_pool"]]
    rest = np.setdiff1d(rest, pool)
    keep = ev["labelled_paradigms"]
    if restrict and keep is not None:
        rest = rest[np.isin(data["paradigm"][rest], [*keep, -1])]
    return {"test": test, "pool": pool, "labelled": rng.permutation(rest)}


def good_of(cfg: dict, data: dict, lab: np.ndarray) -> np.ndarray:
    """The labelled good images EM learns from: the top `good_fraction` by rating."""
    return lab[data["score"][lab] >= np.quantile(data["score"][lab], 1 - cfg["template"]["good_fraction"])]


def pool_pseudo_label(cfg: dict, data: dict, lab: np.ndarray) -> float:
    """The pool's pseudo-label for the MLP: the mean rating of the labelled good images (the pool is
    selected as high-rated, i.e. implicit 'good' labels)."""
    return float(data["score"][good_of(cfg, data, lab)].mean())


def new_paradigms(cfg: dict, data: dict) -> list[int]:
    keep = cfg["eval"]["labelled_paradigms"]
    if keep is None:
        return []
    return [p for p in np.unique(data["paradigm"]) if p >= 0 and p not in keep]


def _metrics(pred: np.ndarray, data: dict, test: np.ndarray, new: list[int]) -> dict:
    y = data["score"][test]
    out = {"srcc": float(spearmanr(pred, y).statistic), "plcc": float(pearsonr(pred, y).statistic), "srcc_new": NAN}
    if new:
        m = np.isin(data["paradigm"][test], [*new, -1])
        out["srcc_new"] = float(spearmanr(pred[m], y[m]).statistic)
    return out


def frac_new(data: dict, test: np.ndarray, new: list[int]) -> float:
    """Share of test layouts from a paradigm the labelled set lacks (0 when every paradigm is labelled)."""
    return float(np.isin(data["paradigm"][test], new).mean()) if new else 0.0


def nmi(parse: np.ndarray, paradigm: np.ndarray) -> float:
    """Normalised mutual information between parses and expert paradigms (test images with a label);
    unlike purity it does not rise just because there are more branches."""
    from sklearn.metrics import normalized_mutual_info_score

    m = paradigm >= 0
    return float(normalized_mutual_info_score(paradigm[m], parse[m])) if m.any() else NAN


def purity(parse: np.ndarray, paradigm: np.ndarray) -> float:
    """Branch purity against the expert paradigms (test images with a label)."""
    m = paradigm >= 0
    if not m.any():
        return NAN
    total = sum(np.bincount(paradigm[m][parse[m] == b]).max() for b in np.unique(parse[m]))
    return float(total / m.sum())


def fit_template(cfg: dict, data: dict, h: np.ndarray, parts: dict, n: int, seed: int, mode: str,
                 q: np.ndarray, dictionary: T.Dictionary):
    """mode: "none" (labelled good images), "expansion" (+ structural expansion from the pool), or
    "pool_em" (the pool joins EM with the initial branch count: the pool's data without a new branch)."""
    good = good_of(cfg, data, parts["labelled"][:n])
    if mode == "pool_em":
        return T.em(np.concatenate([h[good], h[parts["pool"]]]), q, dictionary, cfg["template"], seed), 0
    tpl = T.em(h[good], q, dictionary, cfg["template"], seed)
    added = 0
    if mode == "expansion":
        tpl, added = T.expand(tpl, h[good], h[parts["pool"]], q, dictionary, cfg["template"], seed)
    return tpl, added


def guidance(tpl: T.Template, data: dict, test: np.ndarray, h: np.ndarray, dictionary: T.Dictionary, cfg: dict,
             seed: int, control: str | None) -> float:
    """Mean change of the raters' expected score after the top prescription on the lowest-scoring test
    layouts. Controls: "random" moves the same part to a uniform random position; "random_bin" to the
    centre of a random term of the same block; "thirds" is a learning-free rule (the main part snapped
    to the nearest thirds point, every layout). Needs the raters' oracle: synthetic data only."""
    spec = cfg["data"][DATASET]
    if spec["source"] != "synthetic" or not cfg["eval"]["n_guide"]:
        return NAN
    worst = test[np.argsort(tpl.score(h[test]))[: cfg["eval"]["n_guide"]]]
    rng = np.random.default_rng(10_000 + seed)
    g = data["geometry"][worst]
    edits = T.prescribe(tpl, h[worst], dictionary)
    if control == "thirds":
        moved = g.copy()
        moved[:, :2] = np.where(g[:, :2] < 0.5, 1 / 3, 2 / 3)
    else:
        if control == "random_bin":
            edits = [None if j is None else int(rng.choice(np.flatnonzero(dictionary.block == dictionary.block[j])))
                     for j in edits]
        moved = np.stack([g[i] if j is None else T.apply_edit(g[i], j, dictionary, rng if control == "random" else None)
                          for i, j in enumerate(edits)])
    return float(np.mean(layouts.expected_score(moved, spec) - layouts.expected_score(g, spec)))


def parse_tree(tpl: T.Template, dictionary: T.Dictionary, parse: np.ndarray, paradigm: np.ndarray) -> dict:
    """The learned AND-OR template, readable: OR root -> branches (AND nodes) -> terms (part, bin centre,
    lambda, gain), each branch with the expert paradigms of the test layouts it parses."""
    known = {-1: "none", **dict(enumerate(layouts.PARADIGMS))}

    def names(p: int) -> str:   # full scale: AVA style ids lie outside -1..2
        return known.get(p, f"paradigm_{p}")

    branches = []
    for b, br in enumerate(tpl.branches):
        mine = paradigm[parse == b]
        terms = []
        for j, lam, gain in zip(br.selected, br.lam, br.gains):
            block, x, y = dictionary.centre(int(j))
            terms.append({"part": block, "x": round(x, 3), "y": round(y, 3), "lambda": round(float(lam), 3),
                          "gain": round(float(gain), 4)})
        branches.append({"branch": b, "test_layouts": int(len(mine)), "terms": terms,
                         "expert_paradigms": {names(int(p)): int((mine == p).sum()) for p in np.unique(mine)}})
    return {"root": "OR", "branches": branches}


def mlp_fit(cfg: dict, x: np.ndarray, y: np.ndarray, seed: int):
    from sklearn.neural_network import MLPRegressor

    m = cfg["mlp"]
    model = MLPRegressor(hidden_layer_sizes=tuple(m["hidden"]), learning_rate_init=m["lr"], max_iter=m["epochs"],
                         batch_size=m["batch_size"], alpha=m["weight_decay"], random_state=seed, tol=0.0,
                         n_iter_no_change=10 ** 6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # max_iter is the fixed budget, not a failure to converge
        model.fit(x, y)
    return model, int(sum(w.size for w in model.coefs_) + sum(b.size for b in model.intercepts_))


def evaluate(job) -> dict:
    cfg, method = job.cfg, job.method
    data, dictionary, q, h = _inputs(job)
    new = new_paradigms(cfg, data)
    trained = read_json(job.out_dir / "mlp_results.json") if method in MLPS else {}
    records = []
    for seed in job.seeds:
        parts = split(data, cfg, seed, restrict=method != "template_all_paradigms")
        test = parts["test"]
        for budget, n in cfg["eval"]["budgets"].items():
            rec = {"seed": seed, "budget": budget, "n_labelled": int(min(n, len(parts["labelled"]))),
                   "purity": NAN, "nmi": NAN, "n_branches": NAN, "guidance_delta": NAN,
                   "frac_new": frac_new(data, test, new)}
            if method in MLPS:
                rec.update(trained[f"s{seed}_{budget}"])
            elif method == "kmeans_geometry":   # structure baseline: k-means on the raw part positions
                from sklearn.cluster import KMeans

                fit_on = np.concatenate([good_of(cfg, data, parts["labelled"][:n]), parts["pool"]])
                k = cfg["eval"]["kmeans_k"]
                km = KMeans(k, n_init=3, random_state=seed).fit(data["geometry"][fit_on])
                parse = km.predict(data["geometry"][test])
                rec.update(srcc=NAN, plcc=NAN, srcc_new=NAN, n_params=int(km.cluster_centers_.size), n_branches=k,
                           purity=purity(parse, data["paradigm"][test]), nmi=nmi(parse, data["paradigm"][test]))
            else:
                expanded = method in GUIDE or method == "template_expansion_card_bins"
                mode = "expansion" if expanded else "pool_em" if method == "template_pool_em" else "none"
                tpl, added = fit_template(cfg, data, h, parts, n, seed, mode, q, dictionary)
                parse = tpl.parse(h[test])
                rec.update(_metrics(tpl.score(h[test]), data, test, new), n_params=tpl.n_params,
                           n_branches=len(tpl.branches), purity=purity(parse, data["paradigm"][test]),
                           nmi=nmi(parse, data["paradigm"][test]),
                           guidance_delta=guidance(tpl, data, test, h, dictionary, cfg, seed,
                                                   control=GUIDE.get(method)))
                rec["branches_added"] = added
                write_json(job.out_dir / f"parse_tree_s{seed}_{budget}.json",
                           parse_tree(tpl, dictionary, parse, data["paradigm"][test]))
            records.append(rec)
            job.log(f"{method} seed {seed} {budget} (n={rec['n_labelled']}): srcc {rec['srcc']:.3f} "
                    f"new {rec['srcc_new']:.3f} purity {rec['purity']:.3f} params {rec['n_params']}")
    return {"records": records}


def figures(cfg: dict, records, out_dir) -> list[Path]:
    import pandas as pd

    from iclr26.core.figures import pyplot, save

    df = pd.DataFrame(records)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.2))
    budgets = list(cfg["eval"]["budgets"])
    for method in ("template", "template_expansion", "template_pool_em", "mlp", "mlp_pool"):
        ys = [df.srcc[(df.method == method) & (df.budget == b)].mean() for b in budgets]
        ax.plot([cfg["eval"]["budgets"][b] for b in budgets], ys, marker="o", label=method)
    ax.set_xscale("log")
    ax.set_xlabel("labelled layouts")
    ax.set_ylabel("SRCC with mean rating")
    ax.legend(fontsize=7)
    path = Path(out_dir) / "srcc_budget.png"
    save(fig, path)
    return [path]
