"""SCORER: the stage functions (glue only).

acquire   records each environment as gymnasium (and minatar) define it
prepare   checks the training env against gymnasium.make, step by step
train     one method x one block of seeds on the three environments in turn (one unit each)
evaluate  the online returns of training are the metric: the train job's records
figures   learning curves
"""
from __future__ import annotations

from iclr26.core.errors import DataError
from iclr26.core.io import load_arrays, read_json, save_arrays, write_json

from . import PAPER
from .envs import check_training_env, describe

# torch (and .training, which needs it) is imported inside train only: acquire, prepare and
# evaluate never need it, and its import costs ~2 s of the tiny budget per job.

SPEC_FILE, CHECK_FILE, RESULTS_FILE = "env_spec.json", "env_check.json", "results.json"
SPEC_KEYS = ("env_id", "gymnasium_version", "observation_space", "action_space", "max_episode_steps", "make_kwargs",
             "distractor_dims", "impl")


def acquire(job) -> dict:
    """Nothing to download: record the environment as gymnasium (and minatar) define it."""
    info = describe(job.cfg["data"][job.dataset])
    write_json(job.out_dir / SPEC_FILE, info)
    return info


def prepare(job) -> dict:
    """Check that the environment used in training is gymnasium's, step by step (the core has
    checked acquire's files against their manifest)."""
    spec = job.cfg["data"][job.dataset]
    recorded, now = read_json(job.raw_dir() / SPEC_FILE), describe(spec)
    changed = [k for k in SPEC_KEYS if recorded.get(k) != now.get(k)]
    if changed:
        raise DataError(f"{job.dataset}: environment differs from the acquired spec in {', '.join(changed)}")

    settings = job.cfg["check"]
    check = check_training_env(spec, int(settings["steps"]), int(settings["envs"]), float(settings["tolerance"]))
    write_json(job.out_dir / CHECK_FILE, check)
    if not check["passed"]:
        raise DataError(f"{job.dataset}: training env deviates from gymnasium.make({spec['env_id']!r}): "
                        f"max |diff| {check['max_abs_deviation']:.3g} > {check['tolerance']:g} or "
                        f"{check['flag_mismatches']} terminated/truncated mismatches")
    return check


def train(job) -> dict:
    from .training import episode_metrics, train_on_env

    # (the core has checked that prepare ran for every slot; it fails on an env that fails its check)
    ckpt = job.checkpointer()

    def one_env(slot: str) -> dict:
        episodes, info = train_on_env(job, slot, PAPER.datasets.index(slot), ckpt)
        save_arrays(episodes_path(job, slot), seeds=job.seeds, episodes=episodes)
        return info

    done = job.units(PAPER.datasets, one_env)
    ckpt.clear()  # the checkpoint holds the replay buffers: large, and no longer needed

    records, metrics = [], {"wall_s": {}, "n_updates": {}, "steps_per_seed": {}}
    for slot, info in done.items():
        episodes = load_arrays(episodes_path(job, slot))["episodes"]
        per_seed = episode_metrics(episodes, len(job.seeds), info["steps_per_seed"], job.cfg["train"])
        records += [{"seed": int(seed), "env": slot, "env_id": job.cfg["data"][slot]["env_id"], **m}
                    for seed, m in zip(job.seeds, per_seed)]
        metrics["wall_s"][slot] = round(info["wall"], 2)
        metrics["n_updates"][slot] = info["n_updates"]
        metrics["steps_per_seed"][slot] = info["steps_per_seed"]
    write_json(job.out_dir / RESULTS_FILE, {"records": records})
    metrics["wall_s_total"] = round(sum(metrics["wall_s"].values()), 2)
    return metrics


def episodes_path(job, slot: str):
    """Every episode of one environment: columns seed index, env step at its end, return."""
    return job.out_dir / "episodes" / f"{slot}.npz"


def evaluate(job) -> dict:
    """The online returns of training are the paper's metric: the train job's records (the core
    has checked that train finished)."""
    return {"records": read_json(job.out_dir / RESULTS_FILE)["records"]}


def figures(cfg: dict, records, out_dir) -> list:
    from .plots import learning_curves

    return [learning_curves(cfg, records, out_dir)]
