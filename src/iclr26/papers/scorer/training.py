"""The training loop (one method, one block of seeds, one environment) and its metrics.

All seeds of the block run in lock-step: weights [S, ...], S*E gymnasium sub-envs, one replay
buffer per seed. The metric is the online episodic return, as in the paper: final return = mean
over the episodes ending in the last 10% of steps, AUC = area under the learning curve.
"""
from __future__ import annotations

import functools
import time

import numpy as np
import torch

from iclr26.core.runtime import pick_device

from .agents import SeedBatchedAgent
from .envs import EnvStateError, env_state, make_vec_env, obs_dim, restore_env_state
from .replay import ReplayBuffer


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


def train_on_env(job, slot: str, env_index: int, ckpt) -> tuple[np.ndarray, dict]:
    """Train job.method for all seeds of the block on one environment, resuming from `ckpt` when it
    holds this slot's run. Returns the episodes [seed index, env step at the end, return] and info."""
    cfg, tr = job.cfg, job.cfg["train"]
    seeds, device = list(job.seeds), pick_device(cfg.get("device"))
    S, E, T = len(seeds), int(tr["num_envs"]), int(tr["total_steps"])
    n_iters = T // E  # vector steps; t = env steps per seed

    env = make_vec_env(cfg["data"][slot], S * E)
    d, n_actions = obs_dim(env), int(env.single_action_space.n)
    obs_is_binary = env.single_observation_space.dtype in (np.bool_, np.uint8)
    agent = SeedBatchedAgent(job.method, d, n_actions, seeds, agent_hparams(tr), device, salt=env_index)
    buffer = ReplayBuffer(S, int(tr["buffer_size"]), d, torch.uint8 if obs_is_binary else torch.float32, device)
    seq = np.random.SeedSequence([*seeds, env_index])  # one stream for the block and this env
    env_seed, rng = int(seq.generate_state(1)[0]), np.random.default_rng(seq.spawn(1)[0])

    def to_torch(x: np.ndarray, dtype=torch.float32) -> torch.Tensor:  # rows [S*E, ...], seed-major
        return torch.from_numpy(np.ascontiguousarray(x)).to(device=device, dtype=dtype)

    resume = ckpt.load()
    if resume is not None and resume["slot"] == slot:
        try:  # the env first: a state it does not restore leaves the rest of the loop untouched
            env = restore_env_state(env, tensors_to_numpy(resume["env"]))
        except EnvStateError as err:
            job.log(f"{slot}: refusing the checkpoint's env state ({err}); starting this environment fresh")
            resume, env = None, make_vec_env(cfg["data"][slot], S * E)   # as never touched
    if resume is not None and resume["slot"] == slot:  # everything the loop carries: the same run
        start, wall, n_updates = resume["it"], resume["wall"], resume["n_updates"]
        agent.load_state_dict(resume["agent"])
        buffer.load_state_dict(resume["buffer"])
        rng.bit_generator.state = resume["rng"]
        obs, prev_done = resume["obs"].numpy().copy(), resume["prev_done"].numpy().copy()
        obs_t = to_torch(obs)
        ep_return = resume["ep_return"].numpy().copy()
        episodes = [tuple(row) for row in resume["episodes"].tolist()]
        job.log(f"{slot}: resumed at vector step {start}/{n_iters}")
    else:
        start, wall, n_updates = 0, 0.0, 0
        obs, _ = env.reset(seed=env_seed)
        obs = obs.reshape(S * E, -1)  # the env's observations (the buffer keeps them); obs_t: the network's input
        obs_t = to_torch(obs)
        prev_done = np.zeros(S * E, dtype=bool)
        ep_return = np.zeros(S * E)
        episodes = []  # (seed index, env step at the episode's end, return)

    def snapshot(it: int) -> dict:  # tensors and plain data only
        return {"slot": slot, "it": it, "wall": wall + time.time() - started, "n_updates": n_updates,
                "agent": agent.state_dict(), "buffer": buffer.state_dict(),
                "env": numpy_to_tensors(env_state(env)), "rng": rng.bit_generator.state,
                "obs": torch.from_numpy(obs.copy()), "prev_done": torch.from_numpy(prev_done.copy()),
                "ep_return": torch.from_numpy(ep_return.copy()),
                "episodes": torch.tensor(episodes, dtype=torch.float64).reshape(-1, 3)}

    started = time.time()
    with torch.inference_mode():  # no autograd anywhere (the gradients are written out)
        for it in range(start, n_iters):
            t = (it + 1) * E  # env steps per seed after this vector step
            # epsilon-greedy on the current Q (per seed, per sub-env)
            greedy = agent.greedy_actions(obs_t.view(S, E, -1)).cpu().numpy()
            explore = rng.random((S, E)) < epsilon(it * E, tr)
            actions = np.where(explore, rng.integers(0, n_actions, size=(S, E)), greedy).reshape(-1)

            next_obs, reward, terminated, truncated, _ = env.step(actions)
            next_obs = next_obs.reshape(S * E, -1)
            # the step after an episode's end is gymnasium's autoreset step: not a transition
            buffer.add(obs, actions, reward, next_obs, terminated,
                       (~prev_done).reshape(S, E))  # terminated, not truncated, stops bootstrapping

            ep_return += reward
            ended = np.flatnonzero(terminated | truncated)
            episodes.extend((int(i) // E, t, float(ep_return[i])) for i in ended)
            ep_return[ended] = 0.0
            obs, prev_done = next_obs, terminated | truncated
            obs_t = to_torch(obs)

            if t > tr["learning_starts"] and crossed(t, E, int(tr["train_every"])):
                lr_frac = 1.0 - t / T if tr["lr_decay"] else 1.0  # alpha_k = alpha_0 (1 - t/T)
                agent.update(buffer, int(tr["batch_size"]), rng, lr_frac)
                n_updates += 1
            if crossed(t, E, int(tr["target_every"])):
                agent.sync_targets()

            job.log(f"{slot}: {t}/{T} env steps per seed, {len(episodes)} episodes", every_s=15)
            if ckpt.maybe_save(it + 1, functools.partial(snapshot, it + 1)):
                raise SystemExit(f"scorer/{job.method}: stopped on SIGTERM, checkpoint saved at {slot} step {it + 1}")
    env.close()
    info = {"wall": wall + time.time() - started, "n_updates": n_updates, "steps_per_seed": n_iters * E}
    return np.array(episodes, dtype=np.float64).reshape(-1, 3), info


def numpy_to_tensors(tree):
    """numpy arrays -> tensors in dicts and lists of plain data (what torch.load(weights_only=True) reads)."""
    if isinstance(tree, dict):
        return {k: numpy_to_tensors(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [numpy_to_tensors(v) for v in tree]
    return torch.from_numpy(np.array(tree)) if isinstance(tree, np.ndarray) else tree


def tensors_to_numpy(tree):
    if isinstance(tree, dict):
        return {k: tensors_to_numpy(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [tensors_to_numpy(v) for v in tree]
    return tree.numpy() if isinstance(tree, torch.Tensor) else tree


# ----------------------------------------------------------------------------- metrics
def episode_metrics(episodes: np.ndarray, n_seeds: int, total: int, tr: dict) -> list[dict]:
    """Per seed: final return (episodes ending in the last 10% of steps), AUC, coarse curve."""
    out = []
    for s in range(n_seeds):
        mine = episodes[episodes[:, 0] == s]
        end, ret = mine[:, 1], mine[:, 2]
        last = end > (1.0 - float(tr["final_fraction"])) * total
        bins_auc = binned_returns(end, ret, total, int(tr["auc_bins"]))
        out.append({
            "final_return": float(ret[last].mean()) if last.any() else None,
            # area under the learning curve / its length: mean over equal env-step bins
            "auc": float(np.nanmean(bins_auc)) if np.isfinite(bins_auc).any() else None,
            "episodes": int(len(ret)),
            "curve": [None if not np.isfinite(v) else round(float(v), 3)
                      for v in binned_returns(end, ret, total, int(tr["curve_points"]))],
        })
    return out


def binned_returns(end: np.ndarray, ret: np.ndarray, total: int, n_bins: int) -> np.ndarray:
    """Mean return of the episodes ending in each of n_bins equal spans of env steps (NaN if none)."""
    idx = np.minimum(((end - 1) * n_bins // total).astype(int), n_bins - 1)
    sums, counts = np.bincount(idx, ret, n_bins), np.bincount(idx, minlength=n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
