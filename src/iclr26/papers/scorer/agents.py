"""Networks batched over seeds, the replay buffer, and the four agents' updates.

Notation follows the paper (Sec. 3, Algorithm 1):
    perception (follower)  z = f_phi(s)
    control    (leader)    Q_theta(z, a)
    target                 Y = r + gamma * (1 - terminated) * max_a' Q_theta-(f_phi-(s'), a')
    TD error               delta = Y - Q_theta(f_phi(s), a)
    leader loss            L_L(theta) = mean delta^2               (MSBE, phi frozen: stop-grad on z)
    follower loss          L_F(phi)   = mean delta^2 - (mean delta)^2   (TD-error variance, theta frozen)

Every tensor carries a leading seed axis S: S independent agents train in lock-step, each with its
own weights, optimiser moments, replay buffer and gradient-norm clipping. A loss is summed over
seeds, so the gradient for seed s is exactly the gradient of seed s's own loss.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

METHODS = ("dqn", "dqn_per_layer_lr", "scorer_msbe", "scorer")


# ----------------------------------------------------------------------------- networks
class SeedLinear(nn.Module):
    """S independent Linear layers: x [S, B, in] -> [S, B, out] with one batched matmul."""

    def __init__(self, n_in: int, n_out: int, gain: float, generators: list[torch.Generator]):
        super().__init__()
        weights = []
        for gen in generators:  # orthogonal init per seed, from that seed's own generator
            w = torch.empty(n_out, n_in)
            nn.init.orthogonal_(w, gain=gain, generator=gen)
            weights.append(w.T)
        self.weight = nn.Parameter(torch.stack(weights))                 # [S, in, out]
        self.bias = nn.Parameter(torch.zeros(len(generators), 1, n_out))  # zero bias, as in the code

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(self.bias, x, self.weight)


def l1_norm(x: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """The official code's L1Norm: divide by the mean absolute value of the features."""
    return x / x.abs().mean(-1, keepdim=True).clamp_min(eps)


class Perception(nn.Module):
    """The follower f_phi. classic: Linear(obs,64)+tanh (Table 12). minatar: L1Norm -> 2x(Linear+ReLU)
    -> L1Norm (Table 12 and DQN_SCORER.py)."""

    def __init__(self, obs_dim: int, latent: int, arch: str, generators, l1norm: bool = False):
        super().__init__()
        self.arch, self.l1norm = arch, l1norm
        g = math.sqrt(2)
        if arch == "classic":
            self.layers = nn.ModuleList([SeedLinear(obs_dim, latent, g, generators)])
            self.act = torch.tanh
        elif arch == "minatar":
            self.layers = nn.ModuleList([SeedLinear(obs_dim, latent, g, generators),
                                         SeedLinear(latent, latent, g, generators)])
            self.act = torch.relu
        else:
            raise ValueError(f"unknown arch {arch!r}")

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = l1_norm(obs) if self.arch == "minatar" else obs
        for layer in self.layers:
            x = self.act(layer(x))
        return l1_norm(x) if (self.arch == "minatar" or self.l1norm) else x


class Control(nn.Module):
    """The leader Q_theta: Linear(latent, hidden)+act -> Linear(hidden, n_actions), last gain 0.01."""

    def __init__(self, latent: int, hidden: int, n_actions: int, arch: str, generators):
        super().__init__()
        self.hidden = SeedLinear(latent, hidden, math.sqrt(2), generators)
        self.out = SeedLinear(hidden, n_actions, 0.01, generators)
        self.act = torch.tanh if arch == "classic" else torch.relu

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.out(self.act(self.hidden(z)))


def seed_generators(seeds, salt: int = 0) -> list[torch.Generator]:
    return [torch.Generator().manual_seed(int(s) * 7919 + salt) for s in seeds]


# ----------------------------------------------------------------------------- objectives
def msbe(delta: torch.Tensor) -> torch.Tensor:
    """Mean squared Bellman error per seed: mean_j delta_j^2. delta [S, B] -> [S]."""
    return delta.pow(2).mean(-1)


def td_variance(delta: torch.Tensor) -> torch.Tensor:
    """The follower's objective: batch variance of the TD errors, mean delta^2 - (mean delta)^2.

    Invariant to a constant shift of all TD errors: the follower is not asked to fit the mean
    (the leader's output bias does that), only to make the errors uniform across the batch.
    """
    return delta.pow(2).mean(-1) - delta.mean(-1).pow(2)


def clip_grad_norm_per_seed_(grads: list[torch.Tensor], max_norm: float) -> torch.Tensor:
    """optax.clip_by_global_norm applied to each seed's gradients separately; returns the norms."""
    norms = torch.sqrt(sum(g.pow(2).flatten(1).sum(1) for g in grads))  # [S]
    if max_norm and max_norm > 0:
        scale = torch.where(norms < max_norm, torch.ones_like(norms), max_norm / norms)
        for g in grads:
            g.mul_(scale.view(-1, *([1] * (g.dim() - 1))))
    return norms


# ----------------------------------------------------------------------------- replay buffer
@dataclass
class Batch:
    obs: torch.Tensor         # [S, B, obs_dim] float
    action: torch.Tensor      # [S, B] long
    reward: torch.Tensor      # [S, B]
    next_obs: torch.Tensor    # [S, B, obs_dim]
    terminated: torch.Tensor  # [S, B] float (1 only for a true terminal state, not a time-limit cut)


class ReplayBuffer:
    """One circular buffer per seed, stored as [S, capacity, ...] tensors.

    Seeds may add different numbers of transitions per step (the reset step of gymnasium's
    next-step autoreset is dropped), so each seed keeps its own pointer and size.
    """

    def __init__(self, n_seeds: int, capacity: int, obs_dim: int, obs_dtype: torch.dtype, device="cpu"):
        self.capacity, self.device = int(capacity), device
        self.obs = torch.zeros(n_seeds, self.capacity, obs_dim, dtype=obs_dtype, device=device)
        self.next_obs = torch.zeros_like(self.obs)
        self.action = torch.zeros(n_seeds, self.capacity, dtype=torch.long, device=device)
        self.reward = torch.zeros(n_seeds, self.capacity, device=device)
        self.terminated = torch.zeros(n_seeds, self.capacity, device=device)
        self.ptr = np.zeros(n_seeds, dtype=np.int64)
        self.size = np.zeros(n_seeds, dtype=np.int64)

    def add(self, obs, action, reward, next_obs, terminated, valid: np.ndarray) -> None:
        """All inputs [S, E, ...]; `valid` [S, E] marks the transitions to keep."""
        rank = np.cumsum(valid, axis=1) - 1                       # slot of each kept transition
        pos = (self.ptr[:, None] + rank) % self.capacity
        s_idx, e_idx = np.nonzero(valid)
        s_t, p_t = torch.from_numpy(s_idx).to(self.device), torch.from_numpy(pos[s_idx, e_idx]).to(self.device)
        e_t = torch.from_numpy(e_idx).to(self.device)
        self.obs[s_t, p_t] = obs[s_t, e_t].to(self.obs.dtype)
        self.next_obs[s_t, p_t] = next_obs[s_t, e_t].to(self.obs.dtype)
        self.action[s_t, p_t] = action[s_t, e_t]
        self.reward[s_t, p_t] = reward[s_t, e_t]
        self.terminated[s_t, p_t] = terminated[s_t, e_t]
        counts = valid.sum(1)
        self.ptr = (self.ptr + counts) % self.capacity
        self.size = np.minimum(self.size + counts, self.capacity)

    def sample(self, batch_size: int, rng: np.random.Generator) -> Batch:
        """Uniform sampling, independently per seed."""
        idx = (rng.random((len(self.size), batch_size)) * self.size[:, None]).astype(np.int64)
        idx_t = torch.from_numpy(idx).to(self.device)
        s_t = torch.arange(len(self.size), device=self.device)[:, None]
        return Batch(self.obs[s_t, idx_t].float(), self.action[s_t, idx_t], self.reward[s_t, idx_t],
                     self.next_obs[s_t, idx_t].float(), self.terminated[s_t, idx_t])

    # checkpoint only the filled part: before the buffer wraps, most of it is zeros
    def state_dict(self) -> dict:
        n = int(self.size.max())
        return {"obs": self.obs[:, :n].cpu().clone(), "next_obs": self.next_obs[:, :n].cpu().clone(),
                "action": self.action[:, :n].cpu().clone(), "reward": self.reward[:, :n].cpu().clone(),
                "terminated": self.terminated[:, :n].cpu().clone(), "ptr": self.ptr.copy(), "size": self.size.copy()}

    def load_state_dict(self, state: dict) -> None:
        n = state["obs"].shape[1]
        for key in ("obs", "next_obs", "action", "reward", "terminated"):
            getattr(self, key)[:, :n] = state[key].to(self.device)
        self.ptr, self.size = state["ptr"].copy(), state["size"].copy()


# ----------------------------------------------------------------------------- agents
class SeedBatchedAgent:
    """One of the four methods for S seeds at once.

    dqn              joint MSBE on (phi, theta), one Adam at lr alpha
    dqn_per_layer_lr joint MSBE, encoder lr r*alpha, head lr alpha (same timescales as SCORER, no game)
    scorer_msbe      Stackelberg split, follower minimises MSBE (ablation)
    scorer           Stackelberg split, follower minimises the TD-error variance (the paper's method)
    """

    def __init__(self, method: str, obs_dim: int, n_actions: int, seeds, hp: dict, device="cpu", salt=0):
        if method not in METHODS:
            raise ValueError(f"unknown method {method!r}; methods: {', '.join(METHODS)}")
        self.method, self.hp, self.device = method, hp, device
        self.gamma = float(hp["gamma"])
        self.max_grad_norm = float(hp.get("max_grad_norm") or 0.0)
        self.update_order = hp.get("update_order", "follower_first")
        if self.update_order not in ("follower_first", "leader_first"):
            raise ValueError(f"update_order must be follower_first or leader_first, not {self.update_order!r}")
        arch = hp.get("arch", "classic")
        gens = seed_generators(seeds, salt)  # perception first, then control, per seed: a fixed order
        self.perception = Perception(obs_dim, hp["latent"], arch, gens, hp.get("l1norm", False)).to(device)
        self.control = Control(hp["latent"], hp["hidden"], n_actions, arch, gens).to(device)
        self.perception_target = copy.deepcopy(self.perception).requires_grad_(False)
        self.control_target = copy.deepcopy(self.control).requires_grad_(False)

        lr, ratio = float(hp["lr"]), float(hp["lr_ratio"])
        phi, theta = list(self.perception.parameters()), list(self.control.parameters())
        if method == "dqn":
            self.optimizers = {"joint": self._adam([(phi + theta, lr)])}
        elif method == "dqn_per_layer_lr":
            self.optimizers = {"joint": self._adam([(phi, ratio * lr), (theta, lr)])}
        else:  # two players, two optimisers; the follower is the faster one (alpha_phi = r * alpha_theta)
            self.optimizers = {"follower": self._adam([(phi, ratio * lr)]), "leader": self._adam([(theta, lr)])}

    @staticmethod
    def _adam(groups) -> torch.optim.Adam:
        opt = torch.optim.Adam([{"params": p, "lr": lr, "base_lr": lr} for p, lr in groups], lr=groups[0][1])
        return opt

    @property
    def is_stackelberg(self) -> bool:
        return self.method in ("scorer", "scorer_msbe")

    # -- acting
    @torch.no_grad()
    def greedy_actions(self, obs: torch.Tensor) -> torch.Tensor:
        """obs [S, E, obs_dim] -> argmax_a Q(f(s), a), [S, E]."""
        return self.control(self.perception(obs)).argmax(-1)

    # -- pieces of the objectives
    @torch.no_grad()
    def td_target(self, batch: Batch) -> torch.Tensor:
        """Y = r + gamma (1 - terminated) max_a' Q_theta-(f_phi-(s'), a'), target copies of both players."""
        q_next = self.control_target(self.perception_target(batch.next_obs))
        return batch.reward + self.gamma * (1.0 - batch.terminated) * q_next.max(-1).values

    def td_error(self, batch: Batch, target: torch.Tensor, z: torch.Tensor | None = None) -> torch.Tensor:
        z = self.perception(batch.obs) if z is None else z
        q_sa = self.control(z).gather(-1, batch.action.unsqueeze(-1)).squeeze(-1)
        return target - q_sa  # delta_j

    def _step(self, opt: torch.optim.Optimizer, loss: torch.Tensor, params: list, lr_frac: float) -> None:
        grads = list(torch.autograd.grad(loss, params))
        clip_grad_norm_per_seed_(grads, self.max_grad_norm)
        for p, g in zip(params, grads):
            p.grad = g
        for group in opt.param_groups:  # linear decay to 0: alpha_k = alpha_0 (1 - t/T)
            group["lr"] = group["base_lr"] * lr_frac
        opt.step()

    # -- the updates
    def dqn_update(self, batch: Batch, lr_frac: float) -> dict:
        """Monolithic DQN (and per-layer-lr DQN): one joint MSBE gradient step on (phi, theta)."""
        loss = msbe(self.td_error(batch, self.td_target(batch))).sum()
        params = list(self.perception.parameters()) + list(self.control.parameters())
        self._step(self.optimizers["joint"], loss, params, lr_frac)
        return {"loss": loss.item() / len(batch.reward)}

    def follower_update(self, batch: Batch, target: torch.Tensor, lr_frac: float) -> float:
        """Algorithm 1, step 1: phi <- phi - alpha_phi grad_phi L_F(phi; theta_bar), leader frozen.

        The gradient is taken w.r.t. phi only, so theta receives no update (it is a constant here).
        """
        delta = self.td_error(batch, target)
        loss = (td_variance(delta) if self.method == "scorer" else msbe(delta)).sum()
        self._step(self.optimizers["follower"], loss, list(self.perception.parameters()), lr_frac)
        return loss.item() / len(delta)

    def leader_update(self, batch: Batch, target: torch.Tensor, lr_frac: float) -> float:
        """Algorithm 1, step 2: theta <- theta - alpha_theta grad_theta L_L(theta; phi_bar), stop-grad on z."""
        with torch.no_grad():
            z = self.perception(batch.obs)
        loss = msbe(self.td_error(batch, target, z=z)).sum()
        self._step(self.optimizers["leader"], loss, list(self.control.parameters()), lr_frac)
        return loss.item() / len(z)

    def scorer_update(self, batch_f: Batch, batch_l: Batch, lr_frac: float) -> dict:
        """Two independent batches B_F, B_L; targets from the (unchanged) target networks."""
        target_f, target_l = self.td_target(batch_f), self.td_target(batch_l)
        if self.update_order == "follower_first":   # Algorithm 1 of the paper
            follower = self.follower_update(batch_f, target_f, lr_frac)
            leader = self.leader_update(batch_l, target_l, lr_frac)
        else:                                          # DQN_SCORER.py: leader, then follower vs the new leader
            leader = self.leader_update(batch_l, target_l, lr_frac)
            follower = self.follower_update(batch_f, target_f, lr_frac)
        return {"follower_loss": follower, "leader_loss": leader}

    def update(self, buffer: ReplayBuffer, batch_size: int, rng: np.random.Generator, lr_frac: float) -> dict:
        if self.is_stackelberg:
            batch_f = buffer.sample(batch_size, rng)
            batch_l = buffer.sample(batch_size, rng)
            return self.scorer_update(batch_f, batch_l, lr_frac)
        return self.dqn_update(buffer.sample(batch_size, rng), lr_frac)

    def sync_targets(self) -> None:
        """Hard copy (tau = 1) of both players into their target networks."""
        self.perception_target.load_state_dict(self.perception.state_dict())
        self.control_target.load_state_dict(self.control.state_dict())

    # -- checkpoint
    def state_dict(self) -> dict:
        return {"perception": self.perception.state_dict(), "control": self.control.state_dict(),
                "perception_target": self.perception_target.state_dict(),
                "control_target": self.control_target.state_dict(),
                "optimizers": {k: o.state_dict() for k, o in self.optimizers.items()}}

    def load_state_dict(self, state: dict) -> None:
        self.perception.load_state_dict(state["perception"])
        self.control.load_state_dict(state["control"])
        self.perception_target.load_state_dict(state["perception_target"])
        self.control_target.load_state_dict(state["control_target"])
        for key, opt in self.optimizers.items():
            opt.load_state_dict(state["optimizers"][key])
