"""LDAR's lightweight adaptive retriever and its training (card 17, sections 2.2-2.4; the official
`evaluation/optim_utils.py` and `evaluation/train_ldar.py`, re-implemented, not copied).

State s: the question-passage cosine similarities of one document, sorted ascending, [N, 1].
Policy pi(a|s): two Beta distributions, a = (q_low, q_delta) with
    q_low ~ Beta(alpha_low, beta_low),  q_delta ~ Beta(alpha_delta, beta_delta),
    q_high = min(q_low + q_delta, 1),
and the band keeps sorted positions round((N-1) q_low) ... round((N-1) q_high) (inclusive): every
passage whose similarity rank lies in the quantile band (band_positions). Evaluation uses the
Beta means alpha / (alpha + beta).
Loss per update, on a batch of B transitions drawn from a FIFO replay buffer:
    L = -mean_b[ w_b log pi(a_b|s_b) (r_b - V(s_b)) ] + c_V mean_b[(V(s_b) - r_b)^2] - beta_ent(t) mean_b H[pi(.|s_b)]
    w_b = exp(log pi(a_b|s_b) - log b(a_b|s_b)), detached, not clipped (b: the behaviour policy
    that chose a_b; log b = 0 for the uniform warm-up actions), c_V = 0.5, beta_ent annealed
    linearly over all env steps; log pi and H are the sums over the two Betas.
The reward r in {0, 1} is the frozen reader's judged answer (no token-cost term, as the code).
"""
from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn
from torch.distributions import Beta

from iclr26.core.checkpoint import Stopped


class PeriodicEmbedding(nn.Module):
    """rtdl_num_embeddings.PeriodicEmbeddings(1, d, lite=False) for one scalar feature (Gorishniy
    et al. 2022): trainable frequencies c ~ N(0, sigma), [cos 2 pi c x, sin 2 pi c x] -> Linear -> ReLU.
    Written here because the official code vendors the file and the PyPI package is not in the
    project's environments; it is these three lines."""

    def __init__(self, d: int, n_frequencies: int, sigma: float):
        super().__init__()
        self.frequencies = nn.Parameter(torch.randn(n_frequencies) * sigma)
        self.linear = nn.Linear(2 * n_frequencies, d)

    def forward(self, x):  # [..., 1] -> [..., d]
        z = 2 * math.pi * self.frequencies * x
        return torch.relu(self.linear(torch.cat([torch.cos(z), torch.sin(z)], -1)))


class Policy(nn.Module):
    """OneShotTransformer: periodic embedding of each similarity, a CLS token, a pre-norm
    transformer encoder, the CLS output plus a mean-pooled MLP path over the raw similarities, and
    a head to the four Beta parameters (softplus + 1e-5). The encoder's dropout is the code's 0.1,
    active while actions are sampled in training (the code samples in train() mode)."""

    def __init__(self, d: int, heads: int, layers: int, n_frequencies: int, sigma: float, dropout: float = 0.1):
        super().__init__()
        self.embed = PeriodicEmbedding(d, n_frequencies, sigma)
        self.cls = nn.Parameter(torch.zeros(1, 1, d))
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=dropout, norm_first=True, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        self.raw = nn.Sequential(nn.Linear(1, d), nn.ReLU(), nn.Linear(d, d), nn.ReLU())  # the code's raw_mlp
        self.head = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, d), nn.GELU(), nn.Linear(d, d), nn.GELU(),
                                  nn.Linear(d, 4))

    def forward(self, sims, pad):
        """sims [B, N, 1] (ascending), pad [B, N] True where padded -> [B, 4] Beta parameters."""
        x = torch.cat([self.cls.expand(len(sims), -1, -1), self.embed(sims)], 1)
        mask = torch.cat([torch.zeros_like(pad[:, :1]), pad], 1)
        h = self.norm(self.encoder(x, src_key_padding_mask=mask))[:, 0]
        keep = (~pad).unsqueeze(-1).float()
        pooled = (self.raw(sims) * keep).sum(1) / keep.sum(1)
        return nn.functional.softplus(self.head(h + pooled)) + 1e-5


class Baseline(nn.Module):
    """BaselineNet V(s): periodic embedding of each similarity, mean-pooled, MLP to one value."""

    def __init__(self, d: int, n_frequencies: int, sigma: float):
        super().__init__()
        self.embed = PeriodicEmbedding(d, n_frequencies, sigma)
        self.mlp = nn.Sequential(nn.Linear(d, d), nn.ReLU(), nn.Linear(d, 1))

    def forward(self, sims, pad):
        keep = (~pad).unsqueeze(-1).float()
        return self.mlp((self.embed(sims) * keep).sum(1) / keep.sum(1)).squeeze(-1)


def distributions(params):
    return Beta(params[:, 0], params[:, 1]), Beta(params[:, 2], params[:, 3])


def band_positions(n: int, q_low: float, q_delta: float) -> np.ndarray:
    """Ascending-sorted positions kept by the action (the official index rule, 0-based)."""
    q_high = min(q_low + q_delta, 1.0)
    lo, hi = round((n - 1) * q_low), round((n - 1) * q_high)
    return np.arange(lo, hi + 1)


def pad_states(sims_list: list[np.ndarray]):
    """Sorted-ascending similarity vectors of varying length -> ([B, N, 1], pad [B, N])."""
    n = max(len(s) for s in sims_list)
    x = np.zeros((len(sims_list), n, 1), np.float32)
    pad = np.ones((len(sims_list), n), bool)
    for i, s in enumerate(sims_list):
        x[i, : len(s), 0] = np.sort(s)
        pad[i, : len(s)] = False
    return torch.from_numpy(x), torch.from_numpy(pad)


def build(cfg: dict):
    p = cfg["policy"]
    return (Policy(p["d"], p["heads"], p["layers"], p["n_frequencies"], p["sigma"], p.get("dropout", 0.1)),
            Baseline(p["d"], p["n_frequencies"], p["sigma"]))


def mean_actions(policy: Policy, sims_list: list[np.ndarray], batch: int = 256) -> np.ndarray:
    """Evaluation actions: the Beta means, [Q, 2] (q_low, q_delta)."""
    out = []
    policy.eval()
    with torch.no_grad():
        for i in range(0, len(sims_list), batch):
            params = policy(*pad_states(sims_list[i:i + batch]))
            out.append(torch.stack([params[:, 0] / (params[:, 0] + params[:, 1]),
                                    params[:, 2] / (params[:, 2] + params[:, 3])], 1).numpy())
    return np.concatenate(out) if out else np.zeros((0, 2))


def train(cfg: dict, sims_list: list[np.ndarray], reward_fn, seed: int, log=None, checkpoint=None,
          unit: str = "") -> dict:
    """REINFORCE with a value baseline, a FIFO replay buffer and importance weights (module doc).

    sims_list: the training queries' similarity vectors; reward_fn(query indices, actions [M, 2])
    -> rewards [M] (the frozen reader's judged answers). Env steps come `collect` at a time
    (the code: 1) and each collection is followed by `updates` gradient steps (the code: 1 per env
    step, once the buffer holds a batch)."""
    t = cfg["train"]
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    policy, baseline = build(cfg)
    opt = torch.optim.Adam([*policy.parameters(), *baseline.parameters()], lr=t["lr"])
    n_q = len(sims_list)
    total = t["epochs"] * n_q
    warmup, capacity = int(t["warmup_fraction"] * total), max(t["batch_size"], int(t["replay_fraction"] * total))
    buffer = {"q": np.zeros(capacity, int), "a": np.zeros((capacity, 2)), "r": np.zeros(capacity),
              "logb": np.zeros(capacity)}
    size, head, step, history, collections, max_w = 0, 0, 0, [], 0, 0.0
    order = np.concatenate([rng.permutation(n_q) for _ in range(t["epochs"])])
    state = checkpoint.load() if checkpoint is not None else None
    if state is not None and state.get("unit") == unit:  # resume this unit (tensors and plain data only)
        policy.load_state_dict(state["policy"])
        baseline.load_state_dict(state["baseline"])
        opt.load_state_dict(state["opt"])
        buffer = {k: v.numpy() for k, v in state["buffer"].items()}
        size, head, step = state["size"], state["head"], state["step"]
        collections, max_w = state["collections"], state["max_w"]
        history = list(state["history"])
        rng.bit_generator.state = state["rng"]
        torch.set_rng_state(state["torch_rng"])
        if log:
            log(f"{unit}: resumed at env step {step}/{total}")
    while step < total:
        queries = order[step: step + t["collect"]]
        steps = np.arange(step, step + len(queries))
        uniform = steps < warmup
        policy.train()  # the code samples its actions in train() mode (dropout active)
        with torch.no_grad():
            low, delta = distributions(policy(*pad_states([sims_list[q] for q in queries])))
            a = torch.stack([low.sample(), delta.sample()], 1).clamp(1e-6, 1 - 1e-6)
            a_np = np.where(uniform[:, None], rng.uniform(1e-6, 1 - 1e-6, (len(queries), 2)), a.numpy())
            a_t = torch.from_numpy(a_np).float()
            logb = np.where(uniform, 0.0, (low.log_prob(a_t[:, 0]) + delta.log_prob(a_t[:, 1])).numpy())
        rewards = reward_fn(queries, a_np)
        for i in range(len(queries)):
            buffer["q"][head], buffer["a"][head], buffer["r"][head], buffer["logb"][head] = \
                queries[i], a_np[i], rewards[i], logb[i]
            head, size = (head + 1) % capacity, min(size + 1, capacity)
        step += len(queries)
        collections += 1
        history.append(float(np.mean(rewards)))
        if size < t["batch_size"]:
            continue
        frac = (step - 1) / max(total - 1, 1)
        ent_coef = t["entropy_start"] + frac * (t["entropy_end"] - t["entropy_start"])
        policy.train()
        for _ in range(t["updates"]):
            pick = rng.choice(size, t["batch_size"], replace=False)  # random.sample, as the code
            states, pad = pad_states([sims_list[q] for q in buffer["q"][pick]])
            a_b = torch.from_numpy(buffer["a"][pick]).float()
            r_b = torch.from_numpy(buffer["r"][pick]).float()
            low, delta = distributions(policy(states, pad))
            logp = low.log_prob(a_b[:, 0]) + delta.log_prob(a_b[:, 1])
            entropy = low.entropy() + delta.entropy()
            w = (logp - torch.from_numpy(buffer["logb"][pick]).float()).exp().detach()
            value = baseline(states, pad)
            loss = (-(w * logp * (r_b - value.detach())).mean() + t["value_coef"] * ((value - r_b) ** 2).mean()
                    - ent_coef * entropy.mean())
            opt.zero_grad()
            loss.backward()
            opt.step()
            max_w = max(max_w, float(w.max()))
        if log:
            log(f"seed {seed}: env step {step}/{total}, reward {np.mean(history[-20:]):.3f}, max w {max_w:.3g}",
                every_s=10)
        # on SIGTERM (Slurm, or lifecycle.watch_parent when Snakemake is gone) save and stop: a job that
        # ran on would rewrite its folder beside the rerun that Snakemake starts
        if checkpoint is not None and checkpoint.maybe_save(
                collections, lambda size=size, head=head, step=step, collections=collections, max_w=max_w: {
                    "unit": unit, "policy": policy.state_dict(), "baseline": baseline.state_dict(),
                    "opt": opt.state_dict(), "buffer": {k: torch.from_numpy(v) for k, v in buffer.items()},
                    "size": size, "head": head, "step": step, "collections": collections, "max_w": max_w,
                    "history": history, "rng": rng.bit_generator.state, "torch_rng": torch.get_rng_state()}):
            raise Stopped(f"ldar {unit}: stopped on SIGTERM at env step {step}/{total}, checkpoint saved")
    return {"policy": policy, "reward_curve": history, "max_importance_weight": max_w, "env_steps": total}
