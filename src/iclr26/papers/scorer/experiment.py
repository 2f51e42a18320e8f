"""SCORER: the stage functions and the training loop.

One train job = one method x one block of seeds, trained on the three environments in turn.
All seeds of the block run in lock-step: weights [S, ...], S*E gymnasium sub-envs, one replay
buffer per seed. The metric is the online episodic return, as in the paper: final return = mean
over the episodes ending in the last 10% of steps, AUC = area under the learning curve.
"""
from __future__ import annotations

import pickle
import time
import warnings
from pathlib import Path

import numpy as np

from iclr26.core.errors import ConfigError, DataError
from iclr26.core.io import atomic_path, read_json, write_json

from . import PAPER
from .envs import check_against_gymnasium, describe, make_vec_env, obs_dim

# torch (and .agents, which needs it) is imported inside the training functions only: acquire,
# prepare and evaluate never need it, and its import costs ~2 s of the tiny budget per job.

SPEC_FILE, CHECK_FILE, RESULTS_FILE, CURVES_FILE = "env_spec.json", "env_check.json", "results.json", "curves.npz"


def env_spec(cfg: dict, dataset: str) -> dict:
    try:
        return dict(cfg["data"]["envs"][dataset])
    except KeyError:
        raise ConfigError(f"paper scorer: config has no data.envs.{dataset}") from None


# ----------------------------------------------------------------------------- acquire / prepare
def acquire(job) -> dict:
    """Nothing to download: record the environment as gymnasium (and minatar) define it."""
    info = describe(env_spec(job.cfg, job.dataset))
    write_json(job.out_dir / SPEC_FILE, info)
    return info


def prepare(job) -> dict:
    """Check that the environment used in training is gymnasium's, step by step."""
    spec = env_spec(job.cfg, job.dataset)
    raw = job.raw_dir() / SPEC_FILE
    if not raw.exists():
        raise DataError(f"{raw} is missing: run acquire for {job.dataset} first")
    recorded, now = read_json(raw), describe(spec)
    changed = [k for k in ("env_id", "gymnasium_version", "observation_space", "action_space",
                           "max_episode_steps", "distractor_dims", "impl") if recorded.get(k) != now.get(k)]
    if changed:
        raise DataError(f"{job.dataset}: environment differs from the acquired spec in {', '.join(changed)}")

    data = job.cfg["data"]
    check = check_against_gymnasium(spec, int(data["check_steps"]), int(data["check_envs"]))
    if spec.get("distractor_dims", 0):  # the added dimensions: N(0, 1), appended after the env's own
        env = make_vec_env(spec, 64)
        obs, _ = env.reset(seed=0)
        noise = np.concatenate([obs[:, -spec["distractor_dims"]:]] +
                               [env.step(np.zeros(64, dtype=np.int64))[0][:, -spec["distractor_dims"]:]
                                for _ in range(20)])
        check["distractor_mean"], check["distractor_std"] = float(noise.mean()), float(noise.std())
        check["obs_dim"] = obs_dim(env)
    tol = float(data["check_tolerance"])
    check["tolerance"] = tol
    check["passed"] = check["max_abs_deviation"] <= tol and check["flag_mismatches"] == 0
    write_json(job.out_dir / CHECK_FILE, check)
    if not check["passed"]:
        raise DataError(f"{job.dataset}: training env deviates from gymnasium.make({spec['env_id']!r}): "
                        f"max |diff| {check['max_abs_deviation']:.3g} > {tol:g} or "
                        f"{check['flag_mismatches']} terminated/truncated mismatches")
    return check


# ----------------------------------------------------------------------------- training loop
def epsilon(t: int, tr: dict) -> float:
    """Linear epsilon schedule over env steps (per seed), then constant."""
    frac = min(1.0, t / float(tr["eps_decay_steps"]))
    return tr["eps_start"] + frac * (tr["eps_end"] - tr["eps_start"])


def crossed(t: int, dt: int, every: int) -> bool:
    """True when the env-step counter passed a multiple of `every` during the last vector step
    (at most once per vector step, as DQN_SCORER.py's `timesteps % interval == 0`)."""
    return t // every > (t - dt) // every


def agent_hparams(tr: dict) -> dict:
    keys = ("gamma", "max_grad_norm", "lr", "lr_ratio", "update_order", "arch", "latent", "hidden", "l1norm")
    return {k: tr[k] for k in keys}


def _device(cfg: dict) -> str:
    import torch

    device = str(cfg.get("device", "cpu"))
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device={device} but torch sees no CUDA device")
    return device


def run_env(job, dataset: str, env_index: int, resume: dict | None, save) -> dict:
    """Train job.method for all seeds of the block on one environment; return its episodes."""
    import torch

    from .agents import ReplayBuffer, SeedBatchedAgent

    cfg, tr = job.cfg, job.cfg["train"]
    seeds, device = list(job.seeds), _device(cfg)
    S, E, T = len(seeds), int(tr["num_envs"]), int(tr["total_steps"])
    n_iters = T // E  # vector steps; t = env steps per seed

    env = make_vec_env(env_spec(cfg, dataset), S * E)
    d, n_actions = obs_dim(env), int(env.single_action_space.n)
    obs_is_binary = env.single_observation_space.dtype in (np.bool_, np.uint8)
    agent = SeedBatchedAgent(job.method, d, n_actions, seeds, agent_hparams(tr), device, salt=env_index)
    buffer = ReplayBuffer(S, int(tr["buffer_size"]), d, torch.uint8 if obs_is_binary else torch.float32, device)
    seq = np.random.SeedSequence([*seeds, env_index])  # one stream for the block and this env
    env_seed, rng = int(seq.generate_state(1)[0]), np.random.default_rng(seq.spawn(1)[0])

    if resume is not None:  # everything the loop carries, so the resumed run is the same run
        start, wall, n_updates = resume["it"], resume["wall"], resume["n_updates"]
        agent.load_state_dict(resume["agent"])
        buffer.load_state_dict(resume["buffer"])
        env = pickle.loads(resume["env"])
        rng.bit_generator.state = resume["rng"]
        obs, prev_done, ep_return = resume["obs"], resume["prev_done"], resume["ep_return"]
        episodes = resume["episodes"]
        job.log(f"{dataset}: resumed at vector step {start}/{n_iters}")
    else:
        start, wall, n_updates = 0, 0.0, 0
        obs, _ = env.reset(seed=env_seed)
        prev_done = np.zeros(S * E, dtype=bool)
        ep_return = np.zeros(S * E)
        episodes = []  # (seed index, env step at the episode's end, return)

    def to_torch(x: np.ndarray, dtype=torch.float32) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(x)).to(device=device, dtype=dtype).view(S, E, *x.shape[1:])

    def snapshot(it: int) -> dict:
        return {"dataset": dataset, "it": it, "wall": wall + time.time() - started, "n_updates": n_updates,
                "agent": agent.state_dict(), "buffer": buffer.state_dict(), "env": pickle.dumps(env),
                "rng": rng.bit_generator.state, "obs": obs.copy(), "prev_done": prev_done.copy(),
                "ep_return": ep_return.copy(), "episodes": list(episodes)}

    started = time.time()
    for it in range(start, n_iters):
        t = (it + 1) * E  # env steps per seed after this vector step
        obs_t = to_torch(obs.reshape(S * E, -1))
        # epsilon-greedy on the current Q (per seed, per sub-env)
        greedy = agent.greedy_actions(obs_t).cpu().numpy()
        explore = rng.random((S, E)) < epsilon(it * E, tr)
        actions = np.where(explore, rng.integers(0, n_actions, size=(S, E)), greedy).reshape(-1)

        next_obs, reward, terminated, truncated, _ = env.step(actions)
        # the step after an episode's end is gymnasium's autoreset step: not a transition
        valid = ~prev_done
        buffer.add(obs_t, to_torch(actions, torch.long), to_torch(reward), to_torch(next_obs.reshape(S * E, -1)),
                   to_torch(terminated), valid.reshape(S, E))  # terminated, not truncated, stops bootstrapping

        ep_return += reward
        ended = np.flatnonzero(terminated | truncated)
        episodes.extend((int(i) // E, t, float(ep_return[i])) for i in ended)
        ep_return[ended] = 0.0
        obs, prev_done = next_obs, terminated | truncated

        if t > tr["learning_starts"] and crossed(t, E, int(tr["train_every"])):
            lr_frac = 1.0 - t / T if tr["lr_decay"] else 1.0  # alpha_k = alpha_0 (1 - t/T)
            agent.update(buffer, int(tr["batch_size"]), rng, lr_frac)
            n_updates += 1
        if crossed(t, E, int(tr["target_every"])):
            agent.sync_targets()

        job.log(f"{dataset}: {t}/{T} env steps per seed, {len(episodes)} episodes", every_s=15)
        if save(it + 1, env_index * n_iters + it + 1, lambda: snapshot(it + 1)):
            raise SystemExit(f"scorer/{job.method}: stopped on SIGTERM, checkpoint saved at {dataset} step {it + 1}")
    env.close()
    return {"episodes": np.array(episodes, dtype=np.float64).reshape(-1, 3), "wall": wall + time.time() - started,
            "n_updates": n_updates, "steps_per_seed": n_iters * E}


def episode_metrics(episodes: np.ndarray, n_seeds: int, total: int, tr: dict) -> list[dict]:
    """Per seed: final return (episodes ending in the last 10% of steps), AUC, coarse curve."""
    out = []
    for s in range(n_seeds):
        mine = episodes[episodes[:, 0] == s]
        end, ret = mine[:, 1], mine[:, 2]
        last = end > (1.0 - float(tr["final_fraction"])) * total
        bins_auc = _binned(end, ret, total, int(tr["auc_bins"]))
        out.append({
            "final_return": float(ret[last].mean()) if last.any() else None,
            # area under the learning curve / its length: mean over equal env-step bins
            "auc": float(np.nanmean(bins_auc)) if np.isfinite(bins_auc).any() else None,
            "episodes": int(len(ret)),
            "curve": [None if not np.isfinite(v) else round(float(v), 3)
                      for v in _binned(end, ret, total, int(tr["curve_points"]))],
        })
    return out


def _binned(end: np.ndarray, ret: np.ndarray, total: int, n_bins: int) -> np.ndarray:
    """Mean return of the episodes ending in each of n_bins equal spans of env steps (NaN if none)."""
    idx = np.minimum(((end - 1) * n_bins // total).astype(int), n_bins - 1)
    sums, counts = np.bincount(idx, ret, n_bins), np.bincount(idx, minlength=n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def train(job) -> dict:
    import torch

    # core.job configures torch only when the stage module imported it; this one imports it lazily.
    # Threads follow OMP_NUM_THREADS, which core.job set before this import.
    torch.set_flush_denormal(True)
    cfg, tr = job.cfg, job.cfg["train"]
    if job.method is None or not job.seeds:
        raise ConfigError("scorer train needs a method and a seed block")
    for dataset in PAPER.datasets:  # train only on environments that passed the check in prepare
        check = job.prepared_dir(dataset) / CHECK_FILE
        if not check.exists() or not read_json(check).get("passed"):
            raise DataError(f"{check} is missing or failed: run prepare for {dataset} first")

    ckpt = job.checkpointer()
    state = ckpt.load() or {"done": {}}
    fail_at = tr.get("fail_at_step")

    def save(it: int, global_it: int, state_fn) -> bool:
        stop = ckpt.maybe_save(it, lambda: {**state, "run": state_fn()})
        if fail_at is not None and global_it == int(fail_at):  # tests: a crash right after a checkpoint
            raise RuntimeError(f"simulated preemption at vector step {global_it} (train.fail_at_step)")
        return stop

    for env_index, dataset in enumerate(PAPER.datasets):
        if dataset in state["done"]:
            continue
        run = state.get("run")
        resume = run if run is not None and run["dataset"] == dataset else None
        state["done"][dataset] = run_env(job, dataset, env_index, resume, save)
        state.pop("run", None)
        ckpt.save(state)  # an environment finished: never redo it

    records, curves, metrics = [], {}, {"wall_s": {}, "n_updates": {}, "steps_per_seed": {}}
    for dataset in PAPER.datasets:
        res = state["done"][dataset]
        for seed, m in zip(job.seeds, episode_metrics(res["episodes"], len(job.seeds), res["steps_per_seed"], tr)):
            records.append({"seed": int(seed), "env": dataset, "env_id": env_spec(cfg, dataset)["env_id"], **m})
        curves[f"{dataset}_episodes"] = res["episodes"]  # columns: seed index, env step at end, return
        metrics["wall_s"][dataset] = round(res["wall"], 2)
        metrics["n_updates"][dataset] = res["n_updates"]
        metrics["steps_per_seed"][dataset] = res["steps_per_seed"]
    write_json(job.out_dir / RESULTS_FILE, {"records": records})
    with atomic_path(job.out_dir / CURVES_FILE) as tmp:
        with open(tmp, "wb") as handle:
            np.savez_compressed(handle, seeds=np.array(job.seeds), **curves)
    ckpt.clear()  # the checkpoint holds the replay buffers: large, and no longer needed
    metrics["wall_s_total"] = round(sum(metrics["wall_s"].values()), 2)
    return metrics


# ----------------------------------------------------------------------------- evaluate
def evaluate(job) -> dict:
    """The online returns of training are the paper's metric; read them from the train job."""
    path = job.out_dir / RESULTS_FILE
    if not path.exists():
        raise DataError(f"{path} is missing: run train for {job.method} {job.seeds} first")
    records = read_json(path)["records"]
    expected = {(s, d) for s in job.seeds for d in PAPER.datasets}
    if {(r["seed"], r["env"]) for r in records} != expected:
        raise DataError(f"{path}: records do not cover seeds {job.seeds} x {PAPER.datasets}")
    return {"records": records}


# ----------------------------------------------------------------------------- figures
def figures(cfg: dict, records, out_dir) -> list[Path]:
    """Learning curves: mean over seeds of the binned online return, one line per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    envs = [d for d in PAPER.datasets if d in set(records["env"])]
    total = int(cfg["train"]["total_steps"])
    fig, axes = plt.subplots(1, max(1, len(envs)), figsize=(4.2 * max(1, len(envs)), 3.4), squeeze=False)
    for ax, dataset in zip(axes[0], envs):
        for method in PAPER.methods:
            rows = records[(records["env"] == dataset) & (records["method"] == method)]
            if rows.empty:
                continue
            curves = np.array([[np.nan if v is None else v for v in c] for c in rows["curve"]], dtype=float)
            x = (np.arange(curves.shape[1]) + 0.5) / curves.shape[1] * total
            with warnings.catch_warnings():  # a bin where no seed finished an episode stays a gap
                warnings.simplefilter("ignore", RuntimeWarning)
                ax.plot(x, np.nanmean(curves, axis=0), label=method)
        label = cfg["data"]["envs"][dataset].get("label", dataset)
        ax.set(title=label, xlabel="env steps per seed", ylabel="episodic return (mean over seeds)")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    path = out_dir / "learning_curves.png"
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)
    return [path]

