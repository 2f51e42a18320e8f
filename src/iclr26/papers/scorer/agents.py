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


class _Tanh(torch.autograd.Function):
    """tanh with the same value and gradient as torch.tanh (|diff| < 2e-7), computed as
    2 sigmoid(2x) - 1: torch's single-thread CPU tanh kernel is ~3x slower than sigmoid at these
    sizes, and tanh is a large share of an update's time here."""

    @staticmethod
    def forward(ctx, x):
        y = torch.sigmoid(x * 2).mul_(2).sub_(1)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return torch.ops.aten.tanh_backward(grad, y)  # grad * (1 - y^2)


def tanh(x: torch.Tensor) -> torch.Tensor:
    return _Tanh.apply(x) if x.device.type == "cpu" else torch.tanh(x)


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
            self.act = tanh
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
        self.act = tanh if arch == "classic" else torch.relu

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

    def split(self, n: int) -> tuple["Batch", "Batch"]:
        """The first n and the remaining transitions of every seed's batch."""
        head = Batch(*(x[:, :n] for x in (self.obs, self.action, self.reward, self.next_obs, self.terminated)))
        tail = Batch(*(x[:, n:] for x in (self.obs, self.action, self.reward, self.next_obs, self.terminated)))
        return head, tail


class ReplayBuffer:
    """One circular buffer per seed, stored as [S, capacity, ...] tensors.

    Seeds may add different numbers of transitions per step (the reset step of gymnasium's
    next-step autoreset is dropped), so each seed keeps its own pointer and size.
    """

    def __init__(self, n_seeds: int, capacity: int, obs_dim: int, obs_dtype: torch.dtype, device="cpu"):
        self.capacity, self.device = int(capacity), device
        # torch.empty: slots are only read after being written (sampling stays below `size`), and
        # zero-filling 8 x 1e5 x 32 floats twice costs ~1 s per run on the tiny budget
        self.obs = torch.empty(n_seeds, self.capacity, obs_dim, dtype=obs_dtype, device=device)
        self.next_obs = torch.empty_like(self.obs)
        self.action = torch.empty(n_seeds, self.capacity, dtype=torch.long, device=device)
        self.reward = torch.empty(n_seeds, self.capacity, device=device)
        self.terminated = torch.empty(n_seeds, self.capacity, device=device)
        self.ptr = np.zeros(n_seeds, dtype=np.int64)
        self.size = np.zeros(n_seeds, dtype=np.int64)

    def _fields(self):
        return (self.obs, self.action, self.reward, self.next_obs, self.terminated)

    def add(self, obs, action, reward, next_obs, terminated, valid: np.ndarray) -> None:
        """All inputs [S, E, ...]; `valid` [S, E] marks the transitions to keep."""
        n_envs = valid.shape[1]
        rank = np.cumsum(valid, axis=1) - 1                       # slot of each kept transition
        pos = (self.ptr[:, None] + rank) % self.capacity
        s_idx, e_idx = np.nonzero(valid)
        # rows in the flattened [S*capacity] buffer and in the flattened [S*E] inputs
        dst = torch.from_numpy(s_idx * self.capacity + pos[s_idx, e_idx]).to(self.device)
        src = None if valid.all() else torch.from_numpy(s_idx * n_envs + e_idx).to(self.device)
        for buf, x in zip(self._fields(), (obs, action, reward, next_obs, terminated)):
            x = x.flatten(0, 1)
            x = x if src is None else x.index_select(0, src)
            buf.flatten(0, 1).index_copy_(0, dst, x.to(buf.dtype))
        counts = valid.sum(1)
        self.ptr = (self.ptr + counts) % self.capacity
        self.size = np.minimum(self.size + counts, self.capacity)

    def sample(self, batch_size: int, rng: np.random.Generator) -> Batch:
        """Uniform sampling, independently per seed."""
        idx = (rng.random((len(self.size), batch_size)) * self.size[:, None]).astype(np.int64)
        idx += np.arange(len(self.size))[:, None] * self.capacity   # row in the flattened [S*capacity] axis
        flat = torch.from_numpy(idx.reshape(-1)).to(self.device)
        shape = idx.shape

        def take(x):
            return x.flatten(0, 1).index_select(0, flat).view(*shape, *x.shape[2:])

        obs, action, reward, next_obs, terminated = (take(x) for x in self._fields())
        return Batch(obs.float(), action, reward, next_obs.float(), terminated)

    # checkpoint only the filled part: before the buffer wraps, the rest was never written
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


# ----------------------------------------------------------------------------- optimiser
class Adam:
    """optax.adam (b1 0.9, b2 0.999, eps 1e-8, eps outside the sqrt) on a list of seed-batched tensors.

    Adam is elementwise, so one instance over [S, ...] tensors is S independent optimisers. Written
    out with foreach kernels because torch.optim's per-call Python overhead (~0.2 ms) was the
    largest single cost of an update at these sizes.
    """

    def __init__(self, params: list[torch.Tensor], lr: float, b1=0.9, b2=0.999, eps=1e-8):
        self.params, self.base_lr, self.b1, self.b2, self.eps = params, float(lr), b1, b2, eps
        self.mu = [torch.zeros_like(p) for p in params]
        self.nu = [torch.zeros_like(p) for p in params]
        self.count = 0

    @torch.no_grad()
    def step(self, grads: list[torch.Tensor], lr_frac: float) -> None:
        self.count += 1
        torch._foreach_lerp_(self.mu, grads, 1 - self.b1)                 # mu = b1 mu + (1 - b1) g
        torch._foreach_mul_(self.nu, self.b2)
        torch._foreach_addcmul_(self.nu, grads, grads, 1 - self.b2)       # nu = b2 nu + (1 - b2) g^2
        bias1, bias2 = 1 - self.b1 ** self.count, 1 - self.b2 ** self.count
        denom = torch._foreach_sqrt(self.nu)
        torch._foreach_div_(denom, math.sqrt(bias2))
        torch._foreach_add_(denom, self.eps)                               # sqrt(nu_hat) + eps
        lr = self.base_lr * lr_frac                                        # linear decay to 0
        torch._foreach_addcdiv_(self.params, self.mu, denom, -lr / bias1)  # p -= lr mu_hat / (...)

    def state_dict(self) -> dict:
        return {"mu": [m.clone() for m in self.mu], "nu": [v.clone() for v in self.nu], "count": self.count}

    def load_state_dict(self, state: dict) -> None:
        for dst, src in zip(self.mu + self.nu, state["mu"] + state["nu"]):
            dst.copy_(src)
        self.count = int(state["count"])


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

        # One Adam per part of the network. Monolithic DQN uses the same lr for both (identical to a
        # single Adam, Adam being elementwise); the other three give perception r times the lr.
        lr, ratio = float(hp["lr"]), float(hp["lr_ratio"])
        self.phi, self.theta = list(self.perception.parameters()), list(self.control.parameters())
        self.perception_opt = Adam(self.phi, lr if method == "dqn" else ratio * lr)   # alpha_phi
        self.control_opt = Adam(self.theta, lr)                                        # alpha_theta

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

    def _grads(self, loss: torch.Tensor, params: list) -> list[torch.Tensor]:
        """Gradient w.r.t. `params` only (the other player is a constant), clipped per seed."""
        grads = list(torch.autograd.grad(loss, params))
        clip_grad_norm_per_seed_(grads, self.max_grad_norm)
        return grads

    # -- the updates
    def dqn_update(self, batch: Batch, lr_frac: float) -> dict:
        """Monolithic DQN (and per-layer-lr DQN): one joint MSBE gradient step on (phi, theta)."""
        loss = msbe(self.td_error(batch, self.td_target(batch))).sum()
        grads = self._grads(loss, self.phi + self.theta)  # one global norm over the whole network
        self.perception_opt.step(grads[: len(self.phi)], lr_frac)
        self.control_opt.step(grads[len(self.phi):], lr_frac)
        return {"loss": loss.detach() / len(batch.reward)}  # mean over seeds; no .item(): no GPU sync

    def follower_update(self, batch: Batch, target: torch.Tensor, lr_frac: float) -> torch.Tensor:
        """Algorithm 1, step 1: phi <- phi - alpha_phi grad_phi L_F(phi; theta_bar), leader frozen.

        The gradient is taken w.r.t. phi only, so theta receives no update (it is a constant here).
        """
        delta = self.td_error(batch, target)
        loss = (td_variance(delta) if self.method == "scorer" else msbe(delta)).sum()
        self.perception_opt.step(self._grads(loss, self.phi), lr_frac)
        return loss.detach() / len(delta)

    def leader_update(self, batch: Batch, target: torch.Tensor, lr_frac: float) -> torch.Tensor:
        """Algorithm 1, step 2: theta <- theta - alpha_theta grad_theta L_L(theta; phi_bar), stop-grad on z."""
        with torch.no_grad():
            z = self.perception(batch.obs)
        loss = msbe(self.td_error(batch, target, z=z)).sum()
        self.control_opt.step(self._grads(loss, self.theta), lr_frac)
        return loss.detach() / len(z)

    def scorer_update(self, both: Batch, batch_size: int, lr_frac: float) -> dict:
        """One round of Algorithm 1 on two independent batches B_F (first half of `both`) and B_L.

        The targets come from the target networks, which neither step changes: one forward for both.
        """
        target = self.td_target(both)
        batch_f, batch_l = both.split(batch_size)
        target_f, target_l = target[:, :batch_size], target[:, batch_size:]
        if self.update_order == "follower_first":   # Algorithm 1 of the paper
            follower = self.follower_update(batch_f, target_f, lr_frac)
            leader = self.leader_update(batch_l, target_l, lr_frac)
        else:                                          # DQN_SCORER.py: leader, then follower vs the new leader
            leader = self.leader_update(batch_l, target_l, lr_frac)
            follower = self.follower_update(batch_f, target_f, lr_frac)
        return {"follower_loss": follower, "leader_loss": leader}

    def update(self, buffer: ReplayBuffer, batch_size: int, rng: np.random.Generator, lr_frac: float) -> dict:
        if self.is_stackelberg:
            # 2B i.i.d. uniform draws split in halves = two independent batches B_F and B_L
            both = buffer.sample(2 * batch_size, rng)
            return self.scorer_update(both, batch_size, lr_frac)
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
                "perception_opt": self.perception_opt.state_dict(), "control_opt": self.control_opt.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.perception.load_state_dict(state["perception"])
        self.control.load_state_dict(state["control"])
        self.perception_target.load_state_dict(state["perception_target"])
        self.control_target.load_state_dict(state["control_target"])
        self.perception_opt.load_state_dict(state["perception_opt"])
        self.control_opt.load_state_dict(state["control_opt"])
