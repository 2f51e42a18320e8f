"""The four agents' objectives and updates, for S seeds at once.

Notation follows the paper (Sec. 3, Algorithm 1):
    perception (follower)  z = f_phi(s)
    control    (leader)    Q_theta(z, a)
    target                 Y = r + gamma * (1 - terminated) * max_a' Q_theta-(f_phi-(s'), a')
    TD error               delta = Y - Q_theta(f_phi(s), a)
    leader loss            L_L(theta) = mean delta^2               (MSBE, phi frozen: stop-grad on z)
    follower loss          L_F(phi)   = mean delta^2 - (mean delta)^2   (TD-error variance, theta frozen)

Every tensor carries a leading seed axis S: S independent agents train in lock-step, each with its
own weights, optimiser moments, replay buffer and gradient-norm clipping. A loss is summed over
seeds, so the gradient for seed s is exactly the gradient of seed s's own loss. The gradients are
written out (networks.py says why): d loss / d delta here, then each network's `backward`.
"""
from __future__ import annotations

import copy
import math

import numpy as np
import torch

from .networks import control_net, perception_net, seed_generators
from .replay import Batch, ReplayBuffer

METHODS = ("dqn", "dqn_per_layer_lr", "scorer_msbe", "scorer")


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


# Their gradients w.r.t. delta, of the sum over seeds, in the ops autograd uses for pow and mean.
def msbe_grad(delta: torch.Tensor) -> torch.Tensor:
    """d/d delta_j of sum_s mean_j delta_j^2 = (1/B) 2 delta_j."""
    return (torch.ones_like(delta) / delta.shape[-1]) * (2.0 * delta)


def td_variance_grad(delta: torch.Tensor) -> torch.Tensor:
    """d/d delta_j of sum_s [mean delta^2 - (mean delta)^2] = (1/B) 2 delta_j - (1/B) 2 mean(delta)."""
    n = delta.shape[-1]
    of_mean_square = msbe_grad(delta)
    of_square_mean = (delta.mean(-1) * -2.0).unsqueeze(-1).expand(delta.shape) / n
    return of_mean_square + of_square_mean


def clip_grad_norm_per_seed_(grads: list[torch.Tensor], max_norm: float) -> torch.Tensor:
    """optax.clip_by_global_norm applied to each seed's gradients separately; returns the norms.

    `grads`: tensors with a leading seed axis (here one flat [S, P] tensor per network); the norm
    of a seed is taken over all of them together. Scale min(1, max_norm / norm), as optax.
    """
    norms = [torch.linalg.vector_norm(g.flatten(1), dim=1) for g in grads]
    norm = norms[0] if len(norms) == 1 else torch.linalg.vector_norm(torch.stack(norms), dim=0)  # [S]
    if max_norm and max_norm > 0:
        scale = (max_norm / norm).clamp_(max=1.0)  # 1 where norm <= max_norm (and where norm = 0)
        for g in grads:
            g.mul_(scale.view(-1, *([1] * (g.dim() - 1))))
    return norm


# ----------------------------------------------------------------------------- optimiser
class Adam:
    """optax.adam (b1 0.9, b2 0.999, eps 1e-8, eps outside the sqrt) on one network's seed-batched
    parameters.

    Adam is elementwise, so one instance over [S, ...] tensors is S independent optimisers. The
    parameters become views into one flat [S, P] tensor (seed-major), so that a step is seven
    kernels rather than seven per parameter tensor, and a seed's gradient norm one reduction: at
    these sizes the per-call overhead (torch.optim's ~0.2 ms, then ~2-10 us a kernel) was the
    largest single cost of an update.
    """

    def __init__(self, params: list[torch.Tensor], lr: float, b1=0.9, b2=0.999, eps=1e-8):
        self.base_lr, self.b1, self.b2, self.eps = float(lr), b1, b2, eps
        n_seeds = params[0].shape[0]
        self.flat = torch.cat([p.detach().reshape(n_seeds, -1) for p in params], dim=1)  # [S, P]
        offset = 0
        for p in params:  # same values, now stored in self.flat
            n = p[0].numel()
            p.data = self.flat[:, offset:offset + n].view(p.shape)
            offset += n
        self.mu, self.nu = torch.zeros_like(self.flat), torch.zeros_like(self.flat)
        self.count = 0

    def flat_grad(self, grads: list[torch.Tensor]) -> torch.Tensor:
        """The gradients (in the order of the parameters given at construction) as one [S, P] tensor."""
        return torch.cat([g.reshape(g.shape[0], -1) for g in grads], dim=1)

    def step(self, grad: torch.Tensor, lr_frac: float) -> None:
        """`grad`: [S, P], as `flat_grad` gives it."""
        self.count += 1
        self.mu.lerp_(grad, 1 - self.b1)                                  # mu = b1 mu + (1 - b1) g
        self.nu.mul_(self.b2).addcmul_(grad, grad, value=1 - self.b2)     # nu = b2 nu + (1 - b2) g^2
        bias1, bias2 = 1 - self.b1 ** self.count, 1 - self.b2 ** self.count
        denom = self.nu.sqrt().div_(math.sqrt(bias2)).add_(self.eps)      # sqrt(nu_hat) + eps
        lr = self.base_lr * lr_frac                                        # linear decay to 0
        self.flat.addcdiv_(self.mu, denom, value=-lr / bias1)             # p -= lr mu_hat / (...)

    def state_dict(self) -> dict:
        return {"mu": self.mu.clone(), "nu": self.nu.clone(), "count": self.count}

    def load_state_dict(self, state: dict) -> None:
        self.mu.copy_(state["mu"])
        self.nu.copy_(state["nu"])
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
        # gradients are computed by hand: no autograd graph is ever recorded
        self.perception = perception_net(obs_dim, hp["latent"], arch, gens, hp.get("l1norm", False))
        self.control = control_net(hp["latent"], hp["hidden"], n_actions, arch, gens)
        for net in (self.perception, self.control):
            net.requires_grad_(False).to(device)
        self.perception_target = copy.deepcopy(self.perception)
        self.control_target = copy.deepcopy(self.control)

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
    def greedy_actions(self, obs: torch.Tensor) -> torch.Tensor:
        """obs [S, E, obs_dim] -> argmax_a Q(f(s), a), [S, E]."""
        return self.control.forward(self.perception.forward(obs)).argmax(-1)  # .forward: no hook machinery

    # -- pieces of the objectives
    def td_target(self, batch: Batch) -> torch.Tensor:
        """Y = r + gamma (1 - terminated) max_a' Q_theta-(f_phi-(s'), a'), target copies of both players."""
        q_next = self.control_target.forward(self.perception_target.forward(batch.next_obs))
        return batch.reward + self.gamma * (1.0 - batch.terminated) * q_next.max(-1).values

    @staticmethod
    def td_error(q: torch.Tensor, batch: Batch, target: torch.Tensor) -> torch.Tensor:
        return target - q.gather(-1, batch.action.unsqueeze(-1)).squeeze(-1)  # delta_j

    @staticmethod
    def q_grad(grad_delta: torch.Tensor, q: torch.Tensor, batch: Batch) -> torch.Tensor:
        """delta = Y - Q(s, a): d loss / dQ is -d loss / d delta at the action taken, 0 elsewhere."""
        return torch.zeros_like(q).scatter_add_(-1, batch.action.unsqueeze(-1), (-grad_delta).unsqueeze(-1))

    def _step(self, opt: Adam, grads: list[torch.Tensor], lr_frac: float) -> None:
        grad = opt.flat_grad(grads)
        clip_grad_norm_per_seed_([grad], self.max_grad_norm)
        opt.step(grad, lr_frac)

    # -- the updates
    def dqn_update(self, batch: Batch, lr_frac: float) -> None:
        """Monolithic DQN (and per-layer-lr DQN): one joint MSBE gradient step on (phi, theta)."""
        target = self.td_target(batch)
        z, saved_phi = self.perception.forward_saving(batch.obs)
        q, saved_theta = self.control.forward_saving(z)
        grad_q = self.q_grad(msbe_grad(self.td_error(q, batch, target)), q, batch)
        grad_z, grads_theta = self.control.backward(saved_theta, grad_q, input_grad=True, param_grads=True)
        _, grads_phi = self.perception.backward(saved_phi, grad_z, input_grad=False, param_grads=True)
        grad_phi, grad_theta = self.perception_opt.flat_grad(grads_phi), self.control_opt.flat_grad(grads_theta)
        clip_grad_norm_per_seed_([grad_phi, grad_theta], self.max_grad_norm)  # one norm, whole network
        self.perception_opt.step(grad_phi, lr_frac)
        self.control_opt.step(grad_theta, lr_frac)

    def follower_update(self, batch: Batch, target: torch.Tensor, lr_frac: float) -> None:
        """Algorithm 1, step 1: phi <- phi - alpha_phi grad_phi L_F(phi; theta_bar), leader frozen.

        The gradient is taken w.r.t. phi only, so theta receives no update (it is a constant here).
        """
        z, saved_phi = self.perception.forward_saving(batch.obs)
        q, saved_theta = self.control.forward_saving(z)
        loss_grad = td_variance_grad if self.method == "scorer" else msbe_grad
        grad_q = self.q_grad(loss_grad(self.td_error(q, batch, target)), q, batch)
        grad_z, _ = self.control.backward(saved_theta, grad_q, input_grad=True, param_grads=False)
        _, grads_phi = self.perception.backward(saved_phi, grad_z, input_grad=False, param_grads=True)
        self._step(self.perception_opt, grads_phi, lr_frac)

    def leader_update(self, batch: Batch, target: torch.Tensor, lr_frac: float) -> None:
        """Algorithm 1, step 2: theta <- theta - alpha_theta grad_theta L_L(theta; phi_bar), stop-grad on z."""
        q, saved_theta = self.control.forward_saving(self.perception.forward(batch.obs))
        grad_q = self.q_grad(msbe_grad(self.td_error(q, batch, target)), q, batch)
        _, grads_theta = self.control.backward(saved_theta, grad_q, input_grad=False, param_grads=True)
        self._step(self.control_opt, grads_theta, lr_frac)

    def scorer_update(self, both: Batch, batch_size: int, lr_frac: float) -> None:
        """One round of Algorithm 1 on two independent batches B_F (first half of `both`) and B_L.

        The targets come from the target networks, which neither step changes: one forward for both.
        """
        target = self.td_target(both)
        batch_f, batch_l = both.split(batch_size)
        target_f, target_l = target[:, :batch_size], target[:, batch_size:]
        if self.update_order == "follower_first":   # Algorithm 1 of the paper
            self.follower_update(batch_f, target_f, lr_frac)
            self.leader_update(batch_l, target_l, lr_frac)
        else:                                          # DQN_SCORER.py: leader, then follower vs the new leader
            self.leader_update(batch_l, target_l, lr_frac)
            self.follower_update(batch_f, target_f, lr_frac)

    def update(self, buffer: ReplayBuffer, batch_size: int, rng: np.random.Generator, lr_frac: float) -> None:
        if self.is_stackelberg:
            # 2B i.i.d. uniform draws split in halves = two independent batches B_F and B_L
            self.scorer_update(buffer.sample(2 * batch_size, rng), batch_size, lr_frac)
        else:
            self.dqn_update(buffer.sample(batch_size, rng), lr_frac)

    def sync_targets(self) -> None:
        """Hard copy (tau = 1) of both players into their target networks."""
        for online, target in ((self.perception, self.perception_target), (self.control, self.control_target)):
            for dst, src in zip(target.parameters(), online.parameters()):
                dst.copy_(src)

    # -- checkpoint: tensors and plain numbers only
    def state_dict(self) -> dict:
        return {"perception": self.perception.state_dict(), "control": self.control.state_dict(),
                "perception_target": self.perception_target.state_dict(),
                "control_target": self.control_target.state_dict(),
                "perception_opt": self.perception_opt.state_dict(), "control_opt": self.control_opt.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        for name in ("perception", "control", "perception_target", "control_target"):
            getattr(self, name).load_state_dict(state[name])
        self.perception_opt.load_state_dict(state["perception_opt"])
        self.control_opt.load_state_dict(state["control_opt"])
