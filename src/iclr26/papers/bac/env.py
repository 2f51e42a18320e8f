"""The tiny task of card 18 (section 6.1): "reach around the T", in the Push-T low-dim schema.

A T-shaped block with Push-T's geometry (gym-pusht `add_tee`: a 120 x 30 bar and a 30 x 90 stem,
scale 30, length 4) sits at a random pose; the agent (a disc of Push-T's radius 15) starts on the
bar's side and must reach a goal just past the stem's tip without touching the T. A scripted expert
goes around the LEFT or the RIGHT end of the bar with probability 1/2 each, so the demonstrations
are two-mode (the reason for a diffusion policy): the average of the modes runs into the bar.

The block does not move, so no physics engine is needed: the dynamics are a speed-limited
kinematic agent that moves toward its target position (Push-T's action is a target position for a
PD-controlled agent), and contact is a point-in-inflated-polygon test, vectorised over episodes in
numpy (pymunk would add nothing here and cannot vectorise over episodes). This is the card's
fallback task: a scripted two-mode demonstrator for the real Push-T (which must push the T into a
goal pose) did not fit the tiny budget.

Observations follow Push-T low-dim exactly: the 9 keypoints of the T (world frame, flattened) and
the agent's xy, 20 numbers; actions are 2-D target positions. The zarr store has the official keys
`data/keypoint (N, 9, 2)`, `data/state (N, 5)` = agent x, y, block x, y, angle, `data/action (N, 2)`,
`meta/episode_ends`, so `load_zarr` reads the official `pusht_cchi_v7_replay.zarr` as well.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

SCALE, LENGTH, AGENT_RADIUS = 30.0, 4.0, 15.0
# the two boxes of the T in block coordinates (gym-pusht add_tee): bar, then stem
BAR = (-LENGTH * SCALE / 2, 0.0, LENGTH * SCALE / 2, SCALE)           # x0, y0, x1, y1
STEM = (-SCALE / 2, SCALE, SCALE / 2, LENGTH * SCALE)
# 9 keypoints: the T's 8 corners and the stem tip's midpoint (Push-T uses 9 points on its shapes)
KEYPOINTS = np.array([[BAR[0], BAR[1]], [BAR[2], BAR[1]], [BAR[2], BAR[3]], [STEM[2], STEM[1]],
                      [STEM[2], STEM[3]], [STEM[0], STEM[3]], [STEM[0], STEM[1]], [BAR[0], BAR[3]],
                      [0.0, STEM[3]]], dtype=np.float64)
GOAL = np.array([0.0, STEM[3] + 35.0])
# the expert's waypoints for the right-hand mode (x mirrored for the left-hand one)
WAYPOINTS = np.array([[95.0, -25.0], [95.0, 60.0], [50.0, 150.0], GOAL])


def rotation(theta: np.ndarray) -> np.ndarray:
    c, s = np.cos(theta), np.sin(theta)
    return np.stack([np.stack([c, -s], -1), np.stack([s, c], -1)], -2)  # (..., 2, 2)


def to_world(points: np.ndarray, pose: np.ndarray) -> np.ndarray:
    """points (E, P, 2) in block coordinates, pose (E, 3) = x, y, angle -> world (E, P, 2)."""
    return np.einsum("eij,epj->epi", rotation(pose[:, 2]), points) + pose[:, None, :2]


def to_block(points: np.ndarray, pose: np.ndarray) -> np.ndarray:
    """world (E, 2) -> block coordinates (E, 2)."""
    return np.einsum("eji,ej->ei", rotation(pose[:, 2]), points - pose[:, :2])


def collides(agent: np.ndarray, pose: np.ndarray) -> np.ndarray:
    """True where the agent's disc overlaps the T (distance from the centre to a box < radius)."""
    p = to_block(agent, pose)
    hit = np.zeros(len(agent), bool)
    for x0, y0, x1, y1 in (BAR, STEM):
        dx = np.maximum(np.maximum(x0 - p[:, 0], 0.0), p[:, 0] - x1)
        dy = np.maximum(np.maximum(y0 - p[:, 1], 0.0), p[:, 1] - y1)
        hit |= np.hypot(dx, dy) < AGENT_RADIUS
    return hit


class ReachAroundT:
    """Vectorised episodes. reset(rng, n) -> obs (n, 20); step(targets) -> obs, done, success."""

    def __init__(self, spec: dict):
        self.spec = spec

    def reset(self, rng: np.random.Generator, n: int) -> np.ndarray:
        s = self.spec
        centre = np.array(s["block_centre"], float)
        self.pose = np.column_stack([centre + rng.uniform(-s["block_jitter"], s["block_jitter"], (n, 2)),
                                     rng.uniform(-s["max_angle"], s["max_angle"], n)])
        start = np.column_stack([rng.uniform(*s["start_x"], n), rng.uniform(*s["start_y"], n)])
        self.agent = to_world(start[:, None], self.pose)[:, 0]
        self.goal = to_world(np.broadcast_to(GOAL, (n, 1, 2)), self.pose)[:, 0]
        self.done = np.zeros(n, bool)
        self.success = np.zeros(n, bool)
        self.t = 0
        return self.obs()

    def keypoints(self) -> np.ndarray:
        return to_world(np.broadcast_to(KEYPOINTS, (len(self.pose), 9, 2)), self.pose)

    def state(self) -> np.ndarray:
        return np.column_stack([self.agent, self.pose])

    def obs(self) -> np.ndarray:
        return np.concatenate([self.keypoints().reshape(len(self.pose), -1), self.agent], 1)

    def step(self, target: np.ndarray):
        move = target - self.agent
        dist = np.linalg.norm(move, axis=1, keepdims=True)
        move = move * np.minimum(1.0, self.spec["max_speed"] / np.maximum(dist, 1e-9))
        live = ~self.done
        self.agent = np.where(live[:, None], self.agent + move, self.agent)
        crashed = live & collides(self.agent, self.pose)
        reached = live & ~crashed & (np.linalg.norm(self.agent - self.goal, axis=1) < self.spec["goal_radius"])
        self.success |= reached
        self.done |= crashed | reached
        self.t += 1
        if self.t >= self.spec["max_steps"]:
            self.done[:] = True
        return self.obs(), self.done.copy(), self.success.copy()


def expert_episodes(spec: dict, n_episodes: int, seed: int) -> dict[str, np.ndarray]:
    """Scripted two-mode demonstrations: per episode, left or right with probability 1/2; the
    expert's target is its position plus a speed-limited step toward the next waypoint, with
    Gaussian noise. Episodes that touch the T are redrawn. Returns the zarr arrays."""
    rng = np.random.default_rng(seed)
    keypoints, states, actions, ends, modes = [], [], [], [], []
    env = ReachAroundT(spec)
    for _ in range(20 * n_episodes):
        if len(ends) == n_episodes:
            break
        env.reset(rng, 1)
        side = rng.choice([-1.0, 1.0])
        way = to_world((WAYPOINTS * [side, 1.0])[None], env.pose)[0]
        k, ep_kp, ep_state, ep_act = 0, [], [], []
        while not env.done[0]:
            while k < len(way) - 1 and np.linalg.norm(way[k] - env.agent[0]) < spec["expert_step"]:
                k += 1
            direction = way[k] - env.agent[0]
            step = direction * min(1.0, spec["expert_step"] / max(np.linalg.norm(direction), 1e-9))
            target = env.agent[0] + step + rng.normal(0.0, spec["expert_noise"], 2)
            ep_kp.append(env.keypoints()[0])
            ep_state.append(env.state()[0])
            ep_act.append(target)
            env.step(target[None])
        if env.success[0]:
            keypoints += ep_kp
            states += ep_state
            actions += ep_act
            ends.append(len(actions))
            modes.append(side)
    if len(ends) < n_episodes:
        raise ValueError(f"the expert succeeded in {len(ends)} of {20 * n_episodes} tries: max_steps too small?")
    return {"data/keypoint": np.array(keypoints, np.float32), "data/state": np.array(states, np.float32),
            "data/action": np.array(actions, np.float32), "meta/episode_ends": np.array(ends, np.int64),
            "meta/mode": np.array(modes, np.float32)}


def write_zarr(path: Path, arrays: dict[str, np.ndarray]) -> None:
    import zarr

    root = zarr.open_group(str(path), mode="w", zarr_format=2)  # the official store is zarr v2
    for key, value in arrays.items():
        root.create_array(key, data=value)


def load_zarr(path: Path) -> dict[str, np.ndarray]:
    """The Push-T low-dim arrays (official or synthetic store): obs (N, 20), action (N, 2), ends."""
    import zarr

    root = zarr.open_group(str(path), mode="r")
    kp = np.asarray(root["data/keypoint"][:], np.float32)
    state = np.asarray(root["data/state"][:], np.float32)
    # the official PushTLowdimDataset: obs = keypoints flattened, then the agent's xy
    obs = np.concatenate([kp.reshape(len(kp), -1), state[:, :2]], 1)
    return {"obs": obs, "action": np.asarray(root["data/action"][:], np.float32),
            "episode_ends": np.asarray(root["meta/episode_ends"][:], np.int64)}


def windows(ends: np.ndarray, horizon: int, n_obs: int, n_act: int, episodes=None) -> np.ndarray:
    """Index windows (W, horizon) into the step arrays, padded by repeating the first/last step as the
    official SequenceSampler does (pad_before = n_obs - 1, pad_after = n_act - 1)."""
    starts = np.concatenate([[0], ends[:-1]])
    out = []
    for e in (range(len(ends)) if episodes is None else episodes):
        lo, hi = starts[e], ends[e]
        for s in range(-(n_obs - 1), hi - lo - horizon + n_act):
            out.append(np.clip(np.arange(s, s + horizon), 0, hi - lo - 1) + lo)
    return np.array(out, np.int64)
