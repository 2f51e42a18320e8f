"""Stages of card 17, LDAR: Learning Distraction-Aware Retrieval (arXiv 2509.21865).

    acquire   tiny/smoke: LaRA-schema synthetic documents and queries (data.write_synthetic)
              full: the LaRA files the official repository ships, pinned by commit and sha256
    prepare   per context length: passages, the frozen retriever's similarities, and the frozen
              reader (tiny: its look-ups, and its accuracy-vs-distractors check; full: passage text
              for the LLM, bge-large embeddings on the GPU)                      -> <length>/...
    train     ldar only: one policy per (seed, length, group of task types), REINFORCE on the
              frozen reader's rewards (policy.py), one unit of work each       -> policy_<unit>.pt
    evaluate  every row on the seed's test queries: accuracy (the judged answer), the document
              usage ratio (passages read / passages), passages read; per length and task type, for
              all queries and for the task types the policies are trained on (`trained`: hallu,
              which no policy trains on, is its own column). best_ratio is the fixed ratio with the
              best accuracy on the seed's training queries (chosen without the test queries).

A seed is one train/test split of the queries (the official code's per-type 80/20 shuffle, seeded)
and, for ldar, one policy init: every row is evaluated on the same seed's test queries, so rows
are paired by seed. At full scale the official split is used and seeds vary the policy only.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from iclr26.core.io import write_json

from . import data, methods
from .env import open_env, prepare_tiny

DATASET = "lara"


def lengths(cfg: dict) -> list[str]:
    return list(cfg["data"][DATASET]["lengths"])


def acquire(job) -> dict:
    spec = job.cfg["data"][job.dataset]
    if spec["source"] == "synthetic":
        return {"source": "synthetic", "queries": data.write_synthetic(job.out_dir, spec, spec["data_seed"])}
    if spec["source"] == "ldar_repo":
        from iclr26.core.acquire import snapshot_model

        info = {"source": "ldar_repo", **data.acquire_pinned(job.out_dir, spec, job.log)}
        for section in ("embedder", "model"):  # hub snapshots for the GPU stages (offline there)
            if not Path(job.cfg[section]["source"]).exists():
                info[section] = snapshot_model(job.cfg[section])
        return info
    raise ValueError(f"data.{job.dataset}.source must be synthetic or ldar_repo, got {spec['source']!r}")


def prepare(job) -> dict:
    cfg, out = job.cfg, {}
    for length in lengths(cfg):
        if cfg["data"][DATASET]["source"] == "synthetic":
            out[length] = prepare_tiny(job.raw_dir(), job.out_dir / length, length, cfg)
        else:
            from .full_env import prepare_full

            out[length] = prepare_full(job.raw_dir(), job.out_dir / length, length, cfg, job.log)
        if "distraction_check" in out[length]:
            job.log(f"{length}: reader accuracy with gold + k distractors {out[length]['distraction_check']}")
    write_json(job.out_dir / "summary.json", out)
    return out


def split(cfg: dict, env, seed: int) -> tuple[list[int], list[int]]:
    """The seed's train and test query indices."""
    if cfg["data"][DATASET].get("split") == "official":
        train = [i for i, r in enumerate(env.rows) if r.get("split") == "train"]
        test = [i for i, r in enumerate(env.rows) if r.get("split") == "test"]
        return train, test
    return data.split_queries(env.rows, seed, cfg["data"][DATASET]["train_fraction"])


def groups(cfg: dict) -> dict[str, list[str]]:
    """{policy name: the task types it is trained on} (train.groups)."""
    return {g["name"]: list(g["levels"]) for g in cfg["train"]["groups"]}


def trained_levels(cfg: dict) -> list[str]:
    """The task types some policy is trained on (the claims' level `trained`; hallu is not one)."""
    return [lv for levels in groups(cfg).values() for lv in levels]


def best_ratio(cfg: dict, env, train_idx: list[int]) -> float:
    """The fixed ratio with the highest accuracy on the seed's training queries of the trained task
    types (ties: the smaller ratio). A baseline chosen without the test queries, so it can stand
    for "every fixed ratio" in one comparison."""
    from . import RATIOS

    queries = [q for q in train_idx if env.rows[q]["level"] in trained_levels(cfg)]
    best, best_acc = None, -1.0
    for name in RATIOS:
        ratio = methods.ratio_of(name)
        acc = float(env.rewards(queries, [methods.fixed_ratio(env.sims[q], ratio) for q in queries]).mean())
        if acc > best_acc:
            best, best_acc = ratio, acc
    return best


def group_of(cfg: dict, level: str) -> str:
    return next((g for g, levels in groups(cfg).items() if level in levels), cfg["train"]["fallback_group"])


def units(cfg: dict, seeds) -> dict[str, tuple[int, str, str]]:
    return {f"s{seed}_{length}_{group}": (seed, length, group)
            for seed in seeds for length in lengths(cfg) for group in groups(cfg)}


def train(job) -> dict:
    if job.method != "ldar":  # the baselines and the oracle learn nothing
        return {}
    import torch

    from . import policy

    cfg, envs = job.cfg, {}
    checkpointer = job.checkpointer()

    def work(key):
        seed, length, group = units(cfg, job.seeds)[key]
        env = envs.setdefault(length, open_env(job.prepared_dir(DATASET) / length, cfg))
        train_idx, _ = split(cfg, env, seed)
        queries = [i for i in train_idx if env.rows[i]["level"] in groups(cfg)[group]]
        sims = [env.sims[i] for i in queries]

        def reward(batch, actions):
            picks = [queries[b] for b in batch]
            return env.rewards(picks, [methods.ldar_band(env.sims[q], *a) for q, a in zip(picks, actions)])

        result = policy.train(cfg, sims, reward, seed, log=job.log, checkpoint=checkpointer, unit=key)
        torch.save(result["policy"].state_dict(), job.out_dir / f"policy_{key}.pt")
        checkpointer.clear()
        curve = result["reward_curve"]
        tail = max(1, len(curve) // 10)
        return {"train_queries": len(queries), "env_steps": result["env_steps"],
                "first_reward": float(np.mean(curve[:tail])), "last_reward": float(np.mean(curve[-tail:])),
                "max_importance_weight": result["max_importance_weight"]}

    return {"units": job.units(units(cfg, job.seeds), work)}


def selections(job, env, seed: int, length: str, test: list[int]) -> tuple[list[np.ndarray], dict]:
    """The passages each test query gets under this job's method, and extra per-query numbers."""
    method, cfg = job.method, job.cfg
    sims = [env.sims[q] for q in test]
    if method == "lc":
        return [methods.long_context(s) for s in sims], {}
    if method == "rag":
        return [methods.top_k(s, cfg["eval"]["rag_top_k"]) for s in sims], {}
    if (ratio := methods.ratio_of(method)) is not None:
        return [methods.fixed_ratio(s, ratio) for s in sims], {}
    if method == "best_ratio":
        ratio = best_ratio(cfg, env, split(cfg, env, seed)[0])
        return [methods.fixed_ratio(s, ratio) for s in sims], {"chosen_ratio": np.full(len(test), ratio)}
    if method == "adaptive_k":
        return [methods.adaptive_k(s, cfg["eval"]["adaptive_k_max_fraction"]) for s in sims], {}
    if method == "oracle":
        if hasattr(env, "gold"):
            return [env.gold(q) for q in test], {}
        return env.hindsight_best(test, cfg), {}  # full scale: no gold passages (see full_env)
    if method == "ldar":
        import torch

        from . import policy as pol

        actions = np.zeros((len(test), 2))
        for group in groups(cfg):
            net, _ = pol.build(cfg)
            net.load_state_dict(torch.load(job.out_dir / f"policy_s{seed}_{length}_{group}.pt", weights_only=True))
            mine = [j for j, q in enumerate(test) if group_of(cfg, env.rows[q]["level"]) == group]
            if mine:
                actions[mine] = pol.mean_actions(net, [sims[j] for j in mine])
        return ([methods.ldar_band(s, *a) for s, a in zip(sims, actions)],
                {"q_low": actions[:, 0], "q_high": np.minimum(actions.sum(1), 1.0)})
    raise ValueError(f"unknown method {method!r}")


def evaluate(job) -> dict:
    cfg, records = job.cfg, []
    for length in lengths(cfg):
        env = open_env(job.prepared_dir(DATASET) / length, cfg)
        for seed in job.seeds:
            _, test = split(cfg, env, seed)
            chosen, extra = selections(job, env, seed, length, test)
            reward = env.rewards(test, chosen)
            usage = np.array([len(c) / len(env.sims[q]) for q, c in zip(test, chosen)])
            read = np.array([len(c) for c in chosen], float)
            levels = np.array([env.rows[q]["level"] for q in test])
            for level in ["all", "trained", *cfg["data"][DATASET]["levels"]]:
                pick = (np.ones(len(test), bool) if level == "all" else np.isin(levels, trained_levels(cfg))
                        if level == "trained" else levels == level)
                if not pick.any():
                    continue
                rec = {"seed": seed, "length": length, "level": level, "n_queries": int(pick.sum()),
                       "accuracy": float(reward[pick].mean()), "usage_ratio": float(usage[pick].mean()),
                       "n_passages": float(read[pick].mean())}
                for name, values in extra.items():
                    rec[name] = float(np.mean(values[pick]))
                records.append(rec)
    return {"records": records}


def figures(cfg: dict, records, out_dir) -> list[Path]:
    from . import plots

    return plots.make_all(cfg, records, Path(out_dir))
