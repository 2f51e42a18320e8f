"""The conditional rectified-flow generator, its samplers, and Flow-GRPO / Fast-GRPO.

Conventions of the official code (card 2.4; FlowMatchEulerDiscreteScheduler): x_sigma =
(1 - sigma) x0 + sigma eps, the network predicts v = eps - x0, sigma runs 1 -> 0 over N Euler steps.

SDE step (Flow-GRPO; card 2.4 step 5), with dt = sigma_next - sigma < 0 and noise level a:
    s = a sqrt(sigma / (1 - sigma))   (sigma = 1 uses sigma_max = the schedule's second value)
    mu = x (1 + s^2 / (2 sigma) dt) + v (1 + s^2 (1 - sigma) / (2 sigma)) dt
    x' = mu + s sqrt(-dt) eps,  log p(x') = Gaussian log-density, averaged over dimensions.
Loss per stored SDE step (PPO-style, card 2.4 step 8):
    ratio = exp(logp_theta - logp_old)
    L = mean(max(-A ratio, -A clip(ratio, 1 - eps, 1 + eps))) + beta ||mu_theta - mu_ref||^2 / (2 s^2)
Flow-GRPO: G independent noises per prompt, SDE at every step, all N steps stored and trained.
Fast-GRPO (grpo/fast_grpo/flow_with_logprob_fast.py): one window start t* ~ U{0..window_max} per
rollout; ODE before t* from `prefixes` noise draws per prompt; at t* each prefix branches into
G / prefixes copies; SDE for K steps (stored and trained); ODE for the rest.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn


class FlowNet(nn.Module):
    """Conditional velocity MLP: [x_sigma, condition, time embedding] -> v."""

    def __init__(self, x_dim: int, c_dim: int, hidden: int, depth: int, t_freqs: int = 8):
        super().__init__()
        self.t_freqs = t_freqs
        layers, d = [], x_dim + c_dim + 2 * t_freqs
        for _ in range(depth):
            layers += [nn.Linear(d, hidden), nn.SiLU()]
            d = hidden
        layers.append(nn.Linear(d, x_dim))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor, sigma: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        k = torch.arange(1, self.t_freqs + 1, dtype=x.dtype, device=x.device)
        ang = math.pi * sigma.reshape(-1, 1).expand(len(x), 1) * k
        return self.net(torch.cat([x, cond, torch.sin(ang), torch.cos(ang)], dim=1))


def pretrain(net: FlowNet, x0: torch.Tensor, cond: torch.Tensor, steps: int, batch: int, lr: float,
             gen: torch.Generator) -> list[float]:
    """Flow-matching pre-training (the base model): MSE between v and eps - x0 at sigma ~ U(0, 1)."""
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        idx = torch.randint(0, len(x0), (batch,), generator=gen)
        eps = torch.randn(batch, x0.shape[1], generator=gen)
        sigma = torch.rand(batch, 1, generator=gen)
        xt = (1 - sigma) * x0[idx] + sigma * eps
        loss = ((net(xt, sigma, cond[idx]) - (eps - x0[idx])) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses


def sigmas(n_steps: int) -> torch.Tensor:
    return torch.linspace(1.0, 0.0, n_steps + 1)


def sde_std(sig: torch.Tensor, sig_next: torch.Tensor, noise_level: float, sigma_max: float) -> tuple:
    s = noise_level * torch.sqrt(sig / (1 - torch.where(sig >= 1, torch.full_like(sig, sigma_max), sig)))
    return s, s * torch.sqrt(sig - sig_next)


def sde_mean(x, v, sig, sig_next, s):
    dt = sig_next - sig
    return x * (1 + s ** 2 / (2 * sig) * dt) + v * (1 + s ** 2 * (1 - sig) / (2 * sig)) * dt


def gaussian_logp(x, mean, std):
    """Log-density averaged over dimensions (the official code's mean over latent dims)."""
    return (-((x - mean) ** 2) / (2 * std ** 2) - torch.log(std) - 0.5 * math.log(2 * math.pi)).mean(-1)


@torch.no_grad()
def sample_ode(net: FlowNet, cond: torch.Tensor, n_steps: int, gen: torch.Generator, x_dim: int) -> torch.Tensor:
    sg = sigmas(n_steps)
    x = torch.randn(len(cond), x_dim, generator=gen)
    for i in range(n_steps):
        x = x + (sg[i + 1] - sg[i]) * net(x, sg[i], cond)
    return x


@dataclass
class Rollout:
    x0: torch.Tensor               # (P*G, D) final samples, prompt-major (prompt p: rows p*G .. p*G+G-1)
    steps: list                    # [(i, x_i, x_{i+1}, logp_old)] of the stored SDE steps
    nfe: int                       # network evaluations (per sample row) spent sampling


@torch.no_grad()
def rollout(net: FlowNet, cond: torch.Tensor, group: int, mode: str, cfg: dict, gen: torch.Generator) -> Rollout:
    """Sample a group of `group` per prompt. mode: flow (SDE everywhere) | fast (SDE window, branching)."""
    n, a = int(cfg["n_steps"]), float(cfg["noise_level"])
    sg = sigmas(n)
    sigma_max = float(sg[1])
    d = net.net[-1].out_features
    p = len(cond)
    if mode == "flow":
        window, start, prefixes = range(n), 0, group
    elif mode == "fast":
        k = int(cfg["window"])
        start = int(torch.randint(0, int(cfg["window_max"]) + 1, (1,), generator=gen))
        window, prefixes = range(start, start + k), int(cfg["prefixes"])
    else:
        raise ValueError(f"unknown GRPO sampler {mode!r}")
    if group % prefixes:
        raise ValueError(f"group {group} is not a multiple of prefixes {prefixes}")
    x = torch.randn(p * prefixes, d, generator=gen)
    c = cond.repeat_interleave(prefixes, 0)
    steps, nfe = [], 0
    for i in range(n):
        if i == start and len(x) != p * group:      # branch: each prefix -> group / prefixes copies
            x = x.repeat_interleave(group // prefixes, 0)
            c = cond.repeat_interleave(group, 0)
        v = net(x, sg[i], c)
        nfe += len(x)
        if i in window:
            s, std = sde_std(sg[i], sg[i + 1], a, sigma_max)
            mean = sde_mean(x, v, sg[i], sg[i + 1], s)
            x_next = mean + std * torch.randn(x.shape, generator=gen)
            steps.append((i, x, x_next, gaussian_logp(x_next, mean, std)))
            x = x_next
        else:
            x = x + (sg[i + 1] - sg[i]) * v
    return Rollout(x, steps, nfe)


def advantages(rewards: np.ndarray, group: int, clip: float, global_std: bool) -> np.ndarray:
    """Per-prompt normalisation (PerPromptStatTracker): (r - prompt mean) / std, clipped."""
    r = rewards.reshape(-1, group)
    std = r.std() if global_std else r.std(axis=1, keepdims=True)
    return np.clip((r - r.mean(axis=1, keepdims=True)) / (std + 1e-4), -clip, clip).reshape(-1)


def grpo_update(policy: FlowNet, ref: FlowNet, opt, roll: Rollout, cond_rows: torch.Tensor, adv: torch.Tensor,
                cfg: dict, gen: torch.Generator) -> dict:
    """One pass over the rollout in `minibatches` optimizer steps, gradients accumulated over the
    stored steps. Returns counts: grad_steps, forward and backward network evaluations."""
    n, a = int(cfg["n_steps"]), float(cfg["noise_level"])
    sg = sigmas(n)
    sigma_max = float(sg[1])
    eps_clip, beta = float(cfg["clip_range"]), float(cfg["beta"])
    order = torch.randperm(len(adv), generator=gen)
    fwd = bwd = steps_taken = 0
    for mb in order.chunk(int(cfg["minibatches"])):
        opt.zero_grad()
        for i, x, x_next, logp_old in roll.steps:
            s, std = sde_std(sg[i], sg[i + 1], a, sigma_max)
            mean = sde_mean(x[mb], policy(x[mb], sg[i], cond_rows[mb]), sg[i], sg[i + 1], s)
            with torch.no_grad():
                mean_ref = sde_mean(x[mb], ref(x[mb], sg[i], cond_rows[mb]), sg[i], sg[i + 1], s)
            ratio = torch.exp(gaussian_logp(x_next[mb], mean, std) - logp_old[mb])
            pg = torch.maximum(-adv[mb] * ratio, -adv[mb] * ratio.clamp(1 - eps_clip, 1 + eps_clip)).mean()
            kl = ((mean - mean_ref) ** 2).mean(-1).mean() / (2 * s ** 2)
            ((pg + beta * kl) / len(roll.steps)).backward()
            fwd += 2 * len(mb)
            bwd += len(mb)
        torch.nn.utils.clip_grad_norm_(policy.parameters(), float(cfg["max_grad_norm"]))
        opt.step()
        steps_taken += 1
    return {"grad_steps": steps_taken, "nfe_fwd": fwd, "nfe_bwd": bwd}


def train_grpo(base: FlowNet, prompts: dict, reward_fn, mode: str, cfg: dict, seed: int, log=None) -> tuple:
    """Flow-GRPO or Fast-GRPO from the base model. prompts: {cond (N, C) tensor, ...}; reward_fn(x0
    numpy, prompt indices) -> per-row rewards. Returns (policy, counts, curve)."""
    import copy

    gen = torch.Generator().manual_seed(seed)
    policy, ref = copy.deepcopy(base), copy.deepcopy(base)
    for p in ref.parameters():
        p.requires_grad_(False)
    opt = torch.optim.Adam(policy.parameters(), lr=float(cfg["lr"]))
    group, n_prompts = int(cfg["group"]), int(cfg["prompts"])
    counts = {"grad_steps": 0, "nfe_fwd": 0, "nfe_bwd": 0}
    curve, curve_nfe, started = [], [], time.process_time()
    cond_all = prompts["cond"]
    for it in range(int(cfg["iterations"])):
        idx = torch.randint(0, len(cond_all), (n_prompts,), generator=gen)
        roll = rollout(policy, cond_all[idx], group, mode, cfg, gen)
        rows = idx.repeat_interleave(group)
        r = reward_fn(roll.x0.numpy(), rows.numpy())
        adv = torch.as_tensor(advantages(r, group, float(cfg["adv_clip"]), bool(cfg["global_std"])),
                              dtype=torch.float32)
        upd = grpo_update(policy, ref, opt, roll, cond_all[rows], adv, cfg, gen)
        counts["nfe_fwd"] += roll.nfe + upd["nfe_fwd"]
        counts["nfe_bwd"] += upd["nfe_bwd"]
        counts["grad_steps"] += upd["grad_steps"]
        curve.append(float(r.mean()))
        curve_nfe.append(counts["nfe_fwd"] + counts["nfe_bwd"])   # cumulative training NFE (fwd + bwd)
        if log:
            log(f"{mode} it {it}: reward {r.mean():.4f}", every_s=10)
    counts["cpu_s"] = time.process_time() - started
    counts["curve_nfe"] = curve_nfe
    return policy, counts, curve
