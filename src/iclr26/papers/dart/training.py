"""Encoders and the training loop of the three methods (card 09, sections 2 and 6.2).

    iot          L = L_IOT                       (m-LTM-style: Sinkhorn plan on the squared-Euclidean
                                                  cost / max, -log of its scaled diagonal; no learned
                                                  metric, no partial OT)
    dart_no_ram  L = L_IOT + lambda L_UWD         (uniform channel marginals)
    dart         L = L_IOT + lambda L_UWD-R       (reliability-aware marginals, EMA beta)
L_UWD = <C^F, P>: C^F the d x d cost between embedding channels (columns over the batch), P the
unbalanced Sinkhorn plan (KL marginals, tau), solved by POT on CPU and detached (card 2.2).
Noisy pairs: a fraction of the training clips get the captions of another clip (a fixed random
permutation among them, per seed), as in the paper's 40 % noisy-pair setting.
Every run takes `train.steps` Adam steps, whatever its batch size (audit 09, finding 2).
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from . import losses


class Encoders(nn.Module):
    def __init__(self, a_dim: int, vocab: int, hidden: int, d: int, t_dim: int):
        super().__init__()
        self.audio = nn.Sequential(nn.Linear(a_dim, hidden), nn.ReLU(), nn.Linear(hidden, d))
        self.bag = nn.EmbeddingBag(vocab, t_dim, mode="mean", padding_idx=0)
        self.text_out = nn.Linear(t_dim, d)

    def enc_audio(self, x):
        return nn.functional.normalize(self.audio(x), dim=-1)

    def enc_text(self, tok):
        return nn.functional.normalize(self.text_out(self.bag(tok)), dim=-1)


def nuisance_features(cfg: dict) -> list[int]:
    """Input feature indices of the synthetic data's nuisance mel bands (per-mel mean and std)."""
    spec = cfg["data"]["clotho"]
    bands = (spec.get("nuisance") or {}).get("bands") or []
    n_mels = int(spec["mel"]["n_mels"])
    return [int(b) for b in bands] + [n_mels + int(b) for b in bands]


def total_steps(tcfg: dict, n: int) -> int:
    """Adam steps of every run, `train.steps` at every batch size (fixed before the rerun, audit 09
    finding 2): a larger batch runs more epochs, not fewer steps."""
    if int(tcfg["steps"]) < 1 or n < max(int(b) for b in tcfg["batch_sizes"]):
        raise ValueError(f"dart: train.steps {tcfg['steps']} or {n} clips too few for the batch sizes")
    return int(tcfg["steps"])


def fit(f: dict, vocab: int, method: str, batch: int, noise: float, cfg: dict, seed: int):
    tcfg, m = cfg["train"], cfg["model"]
    nuisance_dims = nuisance_features(cfg)
    gen = np.random.default_rng(seed)
    x = torch.as_tensor(f["dev_x"])
    toks = torch.as_tensor(f["dev_t"])
    n = len(x)
    pair = np.arange(n)
    noisy = gen.choice(n, int(round(noise * n)), replace=False)
    pair[noisy] = gen.permutation(noisy)
    net = Encoders(x.shape[1], vocab, int(m["hidden"]), int(m["d"]), int(m["text_dim"]))
    opt = torch.optim.Adam(net.parameters(), lr=float(tcfg["lr"]))
    ram = losses.RAM(int(m["d"]), float(tcfg["ram_beta"]))
    uniform = torch.full((int(m["d"]),), 1.0 / int(m["d"]))
    marginal = uniform
    per_epoch = n // batch
    for step in range(total_steps(tcfg, n)):         # the same number of Adam steps at every batch size
        if step % per_epoch == 0:
            order = gen.permutation(n)
        idx = order[(step % per_epoch) * batch: (step % per_epoch + 1) * batch]
        cap = gen.integers(0, 5, batch)
        U = net.enc_audio(x[idx])
        V = net.enc_text(toks[pair[idx], cap])
        loss = losses.iot_loss(U, V, float(tcfg["eps"]), int(tcfg["iot_iters"]))
        if method != "iot":
            if method == "dart":
                marginal = ram.update(U.detach(), V.detach())
            loss = loss + float(tcfg["lam"]) * losses.uwd_loss(U, V, marginal, float(tcfg["uwd_eps"]),
                                                               float(tcfg["tau"]), int(tcfg["uwd_iters"]))
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        a = net.enc_audio(torch.as_tensor(f["ev_x"])).numpy()
        t = torch.as_tensor(f["ev_t"])
        te = net.enc_text(t.reshape(-1, t.shape[-1])).numpy().reshape(len(a), 5, -1)
        nuis = nuisance_share(net, torch.as_tensor(f["ev_x"]), nuisance_dims)
    info = {"ram_ratio": float(marginal.max() / marginal.min()) if method == "dart" else float("nan"),
            "ram_nuis_corr": float("nan")}
    if method == "dart" and nuis is not None and nuis.std() > 0:
        info["ram_nuis_corr"] = float(np.corrcoef(marginal.numpy(), nuis.numpy())[0, 1])
    return a, te, info


def nuisance_share(net: Encoders, x: torch.Tensor, dims) -> torch.Tensor | None:
    """Per embedding channel j: the share of the squared Jacobian of the audio encoder's output j
    (before normalisation) that falls on the nuisance input features, averaged over the clips x.
    None where the data has no known nuisance features (full scale)."""
    if not dims:
        return None
    lin1, lin2 = net.audio[0], net.audio[2]
    mask = (lin1(x) > 0).float()                                        # (N, hidden)
    J = torch.einsum("dh,nh,hi->ndi", lin2.weight, mask, lin1.weight)   # (N, d, in)
    sq = (J ** 2).mean(0)
    return sq[:, list(dims)].sum(1) / sq.sum(1)
