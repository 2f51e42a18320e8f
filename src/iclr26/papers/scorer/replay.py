"""The replay buffer: one circular buffer per seed, and the batches sampled from it."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class Batch:
    obs: torch.Tensor         # [S, B, obs_dim] float
    action: torch.Tensor      # [S, B] long
    reward: torch.Tensor      # [S, B]
    next_obs: torch.Tensor    # [S, B, obs_dim]
    terminated: torch.Tensor  # [S, B] float (1 only for a true terminal state, not a time-limit cut)

    def fields(self) -> tuple[torch.Tensor, ...]:
        return (self.obs, self.action, self.reward, self.next_obs, self.terminated)

    def split(self, n: int) -> tuple[Batch, Batch]:
        """The first n and the remaining transitions of every seed's batch."""
        return Batch(*(x[:, :n] for x in self.fields())), Batch(*(x[:, n:] for x in self.fields()))


class ReplayBuffer:
    """One circular buffer per seed, stored as [S, capacity, ...] tensors.

    Seeds may add different numbers of transitions per step (the reset step of gymnasium's
    next-step autoreset is dropped), so each seed keeps its own pointer and size.

    Layout: with float observations a transition is one packed float32 row
    (obs, next_obs, action, reward, terminated), so that adding a step and sampling a batch are one
    index_copy_ and one index_select, not five (at the tiny sizes the per-call cost dominates);
    actions are small integers, exact in float32. Binary observations (MinAtar, full scale) are
    kept as uint8 in separate fields, a quarter of the memory.
    """

    FIELDS = ("obs", "action", "reward", "next_obs", "terminated")

    def __init__(self, n_seeds: int, capacity: int, obs_dim: int, obs_dtype: torch.dtype, device="cpu"):
        self.capacity, self.device, self.obs_dim = int(capacity), device, int(obs_dim)
        self.packed = obs_dtype == torch.float32
        # torch.empty: slots are only read after being written (sampling stays below `size`), and
        # zero-filling 8 x 1e5 x 32 floats twice costs ~1 s per run on the tiny budget
        if self.packed:
            self.data = torch.empty(n_seeds, self.capacity, 2 * self.obs_dim + 3, device=device)
            self.rows = [self.data.flatten(0, 1)]                  # [S*capacity, width]
        else:
            self.obs = torch.empty(n_seeds, self.capacity, obs_dim, dtype=obs_dtype, device=device)
            self.next_obs = torch.empty_like(self.obs)
            self.action = torch.empty(n_seeds, self.capacity, dtype=torch.long, device=device)
            self.reward = torch.empty(n_seeds, self.capacity, device=device)
            self.terminated = torch.empty(n_seeds, self.capacity, device=device)
            self.rows = [x.flatten(0, 1) for x in self._fields()]  # [S*capacity, ...] views of the same memory
        self.ptr = np.zeros(n_seeds, dtype=np.int64)
        self.size = np.zeros(n_seeds, dtype=np.int64)
        self.seed_rows = np.arange(n_seeds)[:, None] * self.capacity  # first row of each seed, flattened

    def field(self, name: str) -> torch.Tensor:
        """One field of every stored slot, [S, capacity, ...] (a view in the packed layout; actions long)."""
        if not self.packed:
            return getattr(self, name)
        d = self.obs_dim
        cols = {"obs": slice(0, d), "next_obs": slice(d, 2 * d), "action": 2 * d, "reward": 2 * d + 1,
                "terminated": 2 * d + 2}[name]
        x = self.data[..., cols]
        return x.long() if name == "action" else x

    def _names(self) -> tuple[str, ...]:
        return ("data",) if self.packed else self.FIELDS

    def _fields(self) -> tuple[torch.Tensor, ...]:
        return tuple(getattr(self, name) for name in self._names())

    def add(self, obs, action, reward, next_obs, terminated, valid: np.ndarray) -> None:
        """All inputs numpy arrays [S*E, ...] (seed-major); `valid` [S, E] marks the transitions to keep."""
        rank = np.cumsum(valid, axis=1) - 1                       # slot of each kept transition
        dst = self.seed_rows + (self.ptr[:, None] + rank) % self.capacity   # its row in the buffer
        keep = None if valid.all() else np.flatnonzero(valid)     # its row in the inputs
        if keep is not None:
            dst = dst[valid]
        dst = torch.from_numpy(dst.reshape(-1)).to(self.device)
        n = len(obs)
        if self.packed:
            parts = (obs.reshape(n, -1), next_obs.reshape(n, -1), action.reshape(n, 1), reward.reshape(n, 1),
                     terminated.reshape(n, 1))
            rows = np.concatenate(parts, axis=1, dtype=np.float32)
            inputs = (rows if keep is None else rows[keep],)
        else:
            inputs = tuple(x if keep is None else x[keep] for x in (obs, action, reward, next_obs, terminated))
        for rows, x in zip(self.rows, inputs):
            rows.index_copy_(0, dst, torch.from_numpy(np.ascontiguousarray(x)).to(self.device, rows.dtype))
        counts = valid.sum(1)
        self.ptr = (self.ptr + counts) % self.capacity
        self.size = np.minimum(self.size + counts, self.capacity)

    def sample(self, batch_size: int, rng: np.random.Generator) -> Batch:
        """Uniform sampling, independently per seed."""
        idx = (rng.random((len(self.size), batch_size)) * self.size[:, None]).astype(np.int64)
        idx += self.seed_rows                                      # row in the flattened [S*capacity] axis
        flat = torch.from_numpy(idx.reshape(-1)).to(self.device)
        if self.packed:
            x = self.rows[0].index_select(0, flat).view(*idx.shape, -1)
            d = self.obs_dim
            return Batch(x[..., :d], x[..., 2 * d].long(), x[..., 2 * d + 1], x[..., d:2 * d], x[..., 2 * d + 2])
        obs, action, reward, next_obs, terminated = (
            rows.index_select(0, flat).view(*idx.shape, *rows.shape[1:]) for rows in self.rows)
        return Batch(obs.float(), action, reward, next_obs.float(), terminated)

    # checkpoint only the filled part: before the buffer wraps, the rest was never written
    def state_dict(self) -> dict:
        n = int(self.size.max())
        return {**{name: x[:, :n].cpu().clone() for name, x in zip(self._names(), self._fields())},
                "ptr": torch.from_numpy(self.ptr.copy()), "size": torch.from_numpy(self.size.copy())}

    def load_state_dict(self, state: dict) -> None:
        for name, x in zip(self._names(), self._fields()):
            n = state[name].shape[1]
            x[:, :n] = state[name].to(self.device)
        self.ptr, self.size = state["ptr"].numpy().copy(), state["size"].numpy().copy()
