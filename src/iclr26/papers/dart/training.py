"""Encoders and the training loop of the three methods (card 09, sections 2 and 6.2).

    iot          L = L_IOT                       (m-LTM: Sinkhorn plan on the squared-Euclidean
                                                  cost / max, cross-entropy of its diagonal)
    dart_no_ram  L = L_IOT + lambda L_UWD         (uniform channel marginals)
    dart         L = L_IOT + lambda L_UWD-R       (reliability-aware marginals, EMA beta)
L_UWD = <C^F, P>: C^F the d x d cost between embedding channels (columns over the batch), P the
unbalanced Sinkhorn plan (KL marginals, tau), solved by POT on CPU and detached (card 2.2).
Noisy pairs: a fraction of the training clips get the captions of another clip (a fixed random
permutation among them, per seed), as in the paper's 40 % noisy-pair setting.
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


def fit(f: dict, vocab: int, method: str, batch: int, noise: float, cfg: dict, seed: int):
    tcfg, m = cfg["train"], cfg["model"]
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
    for _ in range(int(tcfg["epochs"])):
        order = gen.permutation(n)
        for start in range(0, n - batch + 1, batch):
            idx = order[start: start + batch]
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
    ratio = float(marginal.max() / marginal.min())
    return a, te, {"ram_ratio": ratio}
