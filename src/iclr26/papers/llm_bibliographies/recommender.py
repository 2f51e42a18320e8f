"""The tiny stand-in for GPT-4o's parametric knowledge (card 6.2): a two-tower recommender trained
on the corpus's citations, then asked for a reference list from a paper's text alone.

    query(i)  = MLP(text features of paper i)  in R^r
    score(i,j) = query(i) . v_j + b_j           (v_j: rank-r item vector, b_j: popularity bias)

trained with a full softmax over every paper in the corpus on (citing, cited) pairs whose citing
paper is NOT a focal paper: the focal papers' own reference lists are never seen, as a model that
has not read the paper (with GPT-4o this cannot be guaranteed). Generation samples n = the true
reference count papers without replacement from softmax(score / T), with no time filter (so, as
with GPT-4o, a few "references" can postdate the focal paper). Its biases (towards popular papers,
towards the prototypes a rank-r model can express) emerge from training; none is written in.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn


class TwoTower(nn.Module):
    def __init__(self, d_in: int, n_items: int, rank: int, hidden: int):
        super().__init__()
        self.query = nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, rank))
        self.items = nn.Embedding(n_items, rank)
        self.bias = nn.Parameter(torch.zeros(n_items))
        nn.init.normal_(self.items.weight, std=0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.query(x) @ self.items.weight.T + self.bias


def train(text: np.ndarray, citing: np.ndarray, cited: np.ndarray, rank: int, cfg: dict, seed: int) -> TwoTower:
    """Fit on (citing row, cited row) pairs; `text` holds every paper's text features by row."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    model = TwoTower(text.shape[1], text.shape[0], rank, cfg["hidden"])
    opt = torch.optim.Adam(model.parameters(), lr=cfg["lr"], weight_decay=cfg["weight_decay"])
    x = torch.as_tensor(text, dtype=torch.float32)
    src, dst = torch.as_tensor(citing), torch.as_tensor(cited)
    for _ in range(cfg["epochs"]):
        perm = torch.randperm(len(src), generator=gen)
        for start in range(0, len(src), cfg["batch_size"]):
            b = perm[start:start + cfg["batch_size"]]
            loss = nn.functional.cross_entropy(model(x[src[b]]), dst[b])
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model.eval()


@torch.no_grad()
def generate(model: TwoTower, text: np.ndarray, rows: np.ndarray, counts: np.ndarray, temperature: float,
             seed: int) -> list[np.ndarray]:
    """For each focal row, `counts[k]` distinct item rows sampled from softmax(score / T), never itself."""
    logits = model(torch.as_tensor(text[rows], dtype=torch.float32)) / temperature
    logits[torch.arange(len(rows)), torch.as_tensor(rows)] = -torch.inf
    gen = torch.Generator().manual_seed(seed)
    probs = torch.softmax(logits, dim=1)
    return [torch.multinomial(probs[k], int(counts[k]), replacement=False, generator=gen).numpy()
            for k in range(len(rows))]
