"""Stages of card 11, PC Agent-E: Efficient Agent Training for Computer Use (arXiv 2505.13909).

    acquire   tiny/smoke: MiniDesk tasks in OSWorld's task-JSON layout, train and held-out test
              (the WAA-V2 columns, data.minidesk.test_columns)
              full: the released trajectories, WAA-V2's task list, the base model (full.py)
    prepare   per seed: the scripted human demos (one preferred route per app) with thoughts and,
              at every human step, the teacher's boost responses (human/events_0/); the teacher
              rolled out for direct distillation, successful steps subsampled to the boost arm's
              example count (distill/events_0/), and one rollout per task with every successful step
              kept (distill_1rollout/events_0/); all in PC Tracker's raw layout (task_*.jsonl + .md),
              read back by the one step reader of both scales (data.find_tasks, read_steps);
              the pre-arm mechanism checks (summary.json)
    train     one student per seed and arm, student.epochs epochs over the arm's own examples
              (the paper's rule); human_only_eq_steps: the human data for as many optimizer
              steps as the same seed's boost arm (the equal-steps control); then the student's fit
              to its own training examples (student.fit: train_fit, train_acc)
    evaluate  every row on the held-out tasks: success per WAA-V2 column and in total; the
              records also carry the arm's fit (from its train job) and, for boost, the seed's
              coverage (from prepare's summary.json)

A seed draws the human demos' idiosyncrasies, the teacher's samples, the distillation rollouts and
the student's init; the tasks are fixed (data seed), so every row is paired by seed.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from iclr26.core.io import read_json, write_json

from . import data, full
from . import minidesk as md

DATASET = "minidesk"
STUDENTS = ("human_only", "human_only_eq_steps", "distill", "distill_1rollout", "boost")


def _spec(cfg: dict) -> dict:
    return cfg["data"][DATASET]


def acquire(job) -> dict:
    if full.is_full(job.cfg):
        return full.acquire(job)
    spec = _spec(job.cfg)
    return {"source": "synthetic", **data.write_tasks(job.out_dir, spec, spec["data_seed"])}


def _tasks(job, split: str) -> list[dict]:
    return data.read_tasks(job.raw_dir(DATASET) / split)


def mechanism(lines: list[dict], tasks: dict[str, dict], count: int = 9) -> dict:
    """Pre-arm checks: are the kept boost alternatives valid next actions (on any route) and
    diverse, how many human steps use each route, and the coverage precondition (data.coverage)."""
    env, kept, valid, total, distinct, search_route = md.MiniDesk(10 ** 6), 0, 0, 0, [], 0
    by: dict[int, list[dict]] = {}
    for line in lines:
        by.setdefault(line["traj"], []).append(line)
    for traj in by.values():
        env.reset(options={"task": tasks[traj[0]["task_id"]]})
        for line in sorted(traj, key=lambda x: x["step"]):
            correct, alts = set(env.correct_actions()), set()
            for text in line["boost_responses"][:count]:
                total += 1
                if data.keep_boost(text, line["action"]):
                    kept += 1
                    a = data.split_response(text)[1]
                    valid += a in correct
                    alts.add(a)
                    search_route += a.startswith(("hotkey", "type"))
            distinct.append(len(alts - {line["action"]}))
            env.transition(line["action"])
    human_search = sum(x["action"].startswith(("hotkey", "type")) for x in lines)
    return {"boost_kept_fraction": kept / max(total, 1), "boost_valid_fraction": valid / max(kept, 1),
            "boost_distinct_alternatives_per_step": float(np.mean(distinct)),
            "boost_search_route_fraction": search_route / max(kept, 1),
            "human_search_route_steps": int(human_search), "human_steps": len(lines),
            **data.coverage(lines, tasks, count)}


def prepare(job) -> dict:
    if full.is_full(job.cfg):
        return full.prepare(job)
    cfg = job.cfg
    train_tasks = _tasks(job, "train")
    tmap = {t["id"]: t for t in train_tasks}
    out = {}
    for seed in cfg["seeds"]:
        lines = data.boosted_lines(train_tasks, cfg, seed)
        count = cfg["boost"]["count"]
        budget = len(data.examples(lines, tmap, True, True, boost_count=count)["action"])
        dlines, info = data.distill_lines(train_tasks, cfg, seed, budget)
        d1lines, info1 = data.distill_lines(train_tasks, cfg, seed, None, rollouts=1, stream=1)
        for arm, arm_lines in (("human", lines), ("distill", dlines), ("distill_1rollout", d1lines)):
            data.write_events(job.out_dir / f"seed{seed}" / arm / "events_0", arm_lines, tmap)
        out[f"seed{seed}"] = {"boost_examples": budget, **info, "distill_1rollout": info1,
                              **mechanism(lines, tmap, count)}
        job.log(f"seed {seed}: {out[f'seed{seed}']}")
    write_json(job.out_dir / "summary.json", out)
    return out


def arm_examples(job, seed: int, method: str | None = None) -> dict:
    method = method or job.method
    tmap = {t["id"]: t for t in _tasks(job, "train")}
    folder = job.prepared_dir(DATASET) / f"seed{seed}"
    if method in ("distill", "distill_1rollout"):
        return data.examples(data.read_events(folder / method), tmap, True, False, only_kept=True)
    return data.examples(data.read_events(folder / "human"), tmap, True, method == "boost",
                         boost_count=job.cfg["boost"]["count"])


def _summary(job, seed: int) -> dict:
    """prepare's per-seed counts and mechanism checks (summary.json)."""
    return read_json(job.prepared_dir(DATASET) / "summary.json")[f"seed{seed}"]


def train(job) -> dict:
    if full.is_full(job.cfg):
        return full.train(job)
    import torch

    from . import student

    trained: dict[str, dict] = {}

    def train_all() -> None:
        """Every seed of the job at once (student.train_seeds: the seeds side by side, each as if alone);
        a restarted job retrains them all, so a seed's result does not depend on where the job stopped."""
        seeds = list(job.seeds)
        exs = [arm_examples(job, seed) for seed in seeds]
        steps = [None] * len(seeds)
        if job.method == "human_only_eq_steps":   # the boost arm's step count for this seed
            steps = [student.sft_steps(job.cfg, _summary(job, seed)["boost_examples"]) for seed in seeds]
        for seed, ex, (net, losses) in zip(seeds, exs, student.train_seeds(job.cfg, exs, seeds, steps)):
            torch.save(net.state_dict(), job.out_dir / f"student_s{seed}.pt")
            trained[f"s{seed}"] = {"n_train": len(ex["action"]), "steps": len(losses),
                                   "first_loss": float(np.mean(losses[:10])), "last_loss": float(np.mean(losses[-10:])),
                                   **student.fit(job.cfg, net, ex)}

    def work(key):
        if not trained:
            train_all()
        return trained[key]

    return {"units": job.units([f"s{seed}" for seed in job.seeds], work)}


def evaluate(job) -> dict:
    if full.is_full(job.cfg):
        return full.evaluate(job)
    cfg, records = job.cfg, []
    tests = _tasks(job, "test")
    apps = np.array([t["snapshot"] for t in tests])
    trained = read_json(job.out_dir / "metrics.json")["units"] if job.method in STUDENTS else {}
    nan = float("nan")
    for seed in job.seeds:
        unit = trained.get(f"s{seed}", {})
        if job.method == "teacher":   # no torch: the scripted teacher needs none
            actor = data.teacher_actor(data.Teacher(cfg["teacher"]["eps"], 0.0, np.random.default_rng([seed, 30])))
        else:
            import torch

            from . import student
            net = student.build(cfg, seed)
            if job.method in STUDENTS:
                net.load_state_dict(torch.load(job.out_dir / f"student_s{seed}.pt", weights_only=True))
            actor = student.student_actor(cfg, net)
        success = data.rollout(cfg, tests, actor)
        # the Boost claims' coverage check, measured on this seed's data by prepare (mechanism)
        cover = 100 * _summary(job, seed)["boost_coverage"] if job.method == "boost" else nan
        for app in ("total", *md.APPS):
            pick = np.ones(len(tests), bool) if app == "total" else apps == app
            records.append({"seed": seed, "app": app, "n_tasks": int(pick.sum()),
                            "success": float(100 * success[pick].mean()), "n_train": float(unit.get("n_train", 0)),
                            "boost_coverage": cover, "train_fit": float(unit.get("train_fit", nan)),
                            "train_acc": float(unit.get("train_acc", nan))})
    return {"records": records}


def figures(cfg: dict, records, out_dir) -> list[Path]:
    import pandas as pd

    from iclr26.core.figures import pyplot, save

    from . import PAPER

    df = pd.DataFrame(records)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 3.2))
    width = 0.8 / len(PAPER.methods)
    cols = ("total", *md.APPS)
    for i, method in enumerate(PAPER.methods):
        means = [df[(df["method"] == method) & (df["app"] == c)]["success"].mean() for c in cols]
        ax.bar(np.arange(len(cols)) + i * width, means, width, label=method)
    ax.set_xticks(np.arange(len(cols)) + 0.4 - width / 2, cols, fontsize=7)
    ax.set_ylabel("success (%)")
    ax.legend(fontsize=7)
    return [save(fig, Path(out_dir) / "success_by_app.png")]
