"""The full-scale closed loop of card 18: the official Push-T simulator with the low-dim observation.

The simulator is gym-pusht's `gym_pusht/PushT-v0` (LeRobot's gymnasium port of Diffusion Policy's
`PushTEnv`, real-stanford/diffusion_policy `diffusion_policy/env/pusht/pusht_env.py`: the same pymunk
scene, T and goal pose, PD controller k_p 100 / k_v 20 with 100 Hz physics under a 10 Hz action,
the legacy set-state order, reward clip(coverage / 0.95, 0, 1), done when coverage > 0.95). It runs
with `obs_type="state"` (agent x, y, block x, y, angle) and this module builds the official low-dim
observation from it, as `PushTKeypointsEnv` does (agent_keypoints False, keypoint_visible_rate 1):
the block's 9 keypoints in the world frame (a fixed map of points in the block's frame, moved by the
block's pose: rotation by its angle, then its position) flattened, then the agent's xy, 20 numbers
(task `pusht_lowdim`: obs_dim 20).

The 9-point map is the one the demonstrations were recorded with: the official code draws it once
(farthest-point sampling on a rendered T, seed 0) and the zarr's `data/keypoint` holds it moved by
`data/state`'s block pose, so `keypoint_map` recovers it from the data by inverting that rigid
transform (and fails loudly if the data are not rigid images of one map) instead of re-drawing it.

The episodes follow `PushTKeypointsRunner` with the `pusht_lowdim` task config: test seeds
`test_start_seed + i` (100000 + i, i < n_test = 50), each initial state drawn as the official
`PushTEnv.reset` draws it (legacy `np.random.RandomState(seed)`: agent and block positions
`randint`, angle `randn() * 2 pi - pi`; gym-pusht's own reset draws from a different generator, so
the state is passed as `reset_to_state`), at most `max_steps` (300) env steps, the observation
history padded by repeating the first observation (MultiStepWrapper), an env that is done is no
longer stepped. Per episode: the max reward (its mean over episodes is the runner's
`test/mean_score`, the number Diffusion Policy's and BAC's Push-T tables report), the max coverage,
and success (coverage > 0.95 at some step).
"""
from __future__ import annotations

import os

import numpy as np

ENV_ID = "gym_pusht/PushT-v0"


def official_initial_state(seed: int) -> np.ndarray:
    """The initial state the official PushTEnv.reset draws for a seed (legacy RandomState)."""
    rs = np.random.RandomState(seed=seed)
    return np.array([rs.randint(50, 450), rs.randint(50, 450), rs.randint(100, 400), rs.randint(100, 400),
                     rs.randn() * 2 * np.pi - np.pi], dtype=np.float64)


def rotate(points: np.ndarray, angle: np.ndarray) -> np.ndarray:
    """points (..., P, 2) rotated by angle (...) (counter-clockwise, pymunk's convention)."""
    c, s = np.cos(angle)[..., None], np.sin(angle)[..., None]
    x, y = points[..., 0], points[..., 1]
    return np.stack([c * x - s * y, s * x + c * y], -1)


def keypoints_world(local: np.ndarray, block_pose: np.ndarray) -> np.ndarray:
    """local (P, 2), block_pose (E, 3) = x, y, angle -> world keypoints (E, P, 2)."""
    return rotate(np.broadcast_to(local, (len(block_pose), *local.shape)), block_pose[:, 2]) + block_pose[:, None, :2]


def keypoint_map(keypoints: np.ndarray, state: np.ndarray, tolerance_px: float = 0.5) -> tuple[np.ndarray, float]:
    """The block-frame keypoint map (P, 2) that `keypoints` (N, P, 2) are the rigid images of under
    the block poses `state[:, 2:5]`, and the largest reconstruction error in px; raises if it
    exceeds `tolerance_px` (the data would not be images of one map under these poses)."""
    keypoints, state = np.asarray(keypoints, np.float64), np.asarray(state, np.float64)
    local = rotate(keypoints - state[:, None, 2:4], -state[:, 4]).mean(0)
    error = float(np.abs(keypoints_world(local, state[:, 2:5]) - keypoints).max())
    if error > tolerance_px:
        raise ValueError(f"data/keypoint is not a rigid image of one keypoint map under data/state's block pose: "
                         f"max error {error:.3f} px > {tolerance_px} px")
    return local, error


class PushTLowdim:
    """`n` gym-pusht episodes in lockstep with the official low-dim observation.

    reset() -> obs (n, 20); step(targets (n, 2)) -> obs, done (n,), success (n,) (so far). After the
    episodes: `max_reward`, `max_coverage`, `success` per episode."""

    def __init__(self, local_keypoints: np.ndarray, seeds, max_steps: int):
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")          # headless pygame (gym-pusht imports it)
        os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
        import gym_pusht  # noqa: F401  (registers gym_pusht/PushT-v0)
        import gymnasium

        self.local = np.asarray(local_keypoints, np.float64)
        self.seeds = [int(s) for s in seeds]
        self.max_steps = int(max_steps)
        self.envs = [gymnasium.make(ENV_ID, obs_type="state", max_episode_steps=self.max_steps,
                                    disable_env_checker=True) for _ in self.seeds]

    def observe(self, state: np.ndarray) -> np.ndarray:
        kp = keypoints_world(self.local, state[:, 2:5])
        return np.concatenate([kp.reshape(len(state), -1), state[:, :2]], 1).astype(np.float32)

    def reset(self) -> np.ndarray:
        n = len(self.envs)
        self.state = np.stack([env.reset(seed=seed, options={"reset_to_state": official_initial_state(seed)})[0]
                               for env, seed in zip(self.envs, self.seeds)])
        self.done = np.zeros(n, bool)
        self.success = np.zeros(n, bool)
        self.max_reward = np.zeros(n)
        self.max_coverage = np.zeros(n)
        self.steps = np.zeros(n, np.int64)
        return self.observe(self.state)

    def step(self, targets: np.ndarray):
        for i, env in enumerate(self.envs):
            if self.done[i]:
                continue
            state, reward, terminated, truncated, info = env.step(np.asarray(targets[i], np.float64))
            self.state[i] = state
            self.steps[i] += 1
            self.max_reward[i] = max(self.max_reward[i], float(reward))
            self.max_coverage[i] = max(self.max_coverage[i], float(info["coverage"]))
            self.success[i] |= bool(info["is_success"])
            self.done[i] = bool(terminated or truncated or self.steps[i] >= self.max_steps)
        return self.observe(self.state), self.done.copy(), self.success.copy()

    def close(self) -> None:
        for env in self.envs:
            env.close()
