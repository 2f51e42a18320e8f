"""A from-scratch multi-encoder MLLM in the paper's "ViT-adapter-LLM" form (card 14, section 2):

    Y = LLM( proj( fusion(E_1(I), ..., E_n(I)) ), T )

with Eagle's channel-concatenation fusion: every encoder yields a 4 x 4 token grid of `width`
channels; the grids are concatenated along channels and a per-token projector maps them to the
"LLM". Masking encoder i (evaluation only, on the trained model) zeroes its channel block before the
projector (ablation "zero") or replaces it by its mean over training images (ablation "mean").

Encoders, each with its own inductive bias (the card's table, four of them):
  global  "CLIP-like":        RGB average-pooled x4 (4 x 4), 1 x 1 convolutions
  edge    "SAM-like":         Sobel edge magnitude of the grey image, pooled x2, a strided 3 x 3 conv
  fine    "Pix2Struct-like":  grey image at full resolution, 4 x 4 patches, a 3 x 3 conv over patches
  noisy   "weak encoder":     RGB plus Gaussian noise, pooled x2, a strided 3 x 3 conv
The "LLM" is an MLP over the flattened projected tokens and a question-template embedding, scoring the
answer vocabulary; a multiple-choice item is answered by the best-scoring of its four options.
"""
from __future__ import annotations

import itertools
import time

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

ENCODERS = ("global", "edge", "fine", "noisy")
LUMA = (0.299, 0.587, 0.114)


def _grey(x: torch.Tensor) -> torch.Tensor:
    return (x * x.new_tensor(LUMA).view(1, 3, 1, 1)).sum(1, keepdim=True)


class Encoder(nn.Module):
    def __init__(self, kind: str, width: int, noise: float):
        super().__init__()
        self.kind, self.noise = kind, noise
        if kind == "global":
            self.net = nn.Sequential(nn.Conv2d(3, width, 1), nn.GELU(), nn.Conv2d(width, width, 1))
        elif kind == "edge":
            sobel = torch.tensor([[-1.0, 0, 1], [-2, 0, 2], [-1, 0, 1]])
            self.register_buffer("sobel", torch.stack([sobel, sobel.T]).unsqueeze(1))
            self.net = nn.Sequential(nn.Conv2d(1, width, 3, stride=2, padding=1), nn.GELU(), nn.Conv2d(width, width, 1))
        elif kind == "fine":
            self.net = nn.Sequential(nn.Conv2d(1, width, 4, stride=4), nn.GELU(),
                                     nn.Conv2d(width, width, 3, padding=1), nn.GELU(), nn.Conv2d(width, width, 1))
        elif kind == "noisy":
            self.net = nn.Sequential(nn.Conv2d(3, width, 3, stride=2, padding=1), nn.GELU(), nn.Conv2d(width, width, 1))
        else:
            raise ValueError(f"unknown encoder {kind!r}")

    def forward(self, x: torch.Tensor, gen: torch.Generator | None = None) -> torch.Tensor:
        if self.kind == "global":
            v = F.avg_pool2d(x, 4)
        elif self.kind == "edge":
            g = F.conv2d(_grey(x), self.sobel, padding=1)
            v = F.avg_pool2d(g.pow(2).sum(1, keepdim=True).sqrt(), 2)
        elif self.kind == "fine":
            v = _grey(x)
        else:
            eps = torch.randn(x.shape, generator=gen, device=x.device) if gen is not None else torch.randn_like(x)
            v = F.avg_pool2d(x + self.noise * eps, 2)
        return self.net(v)   # (B, width, 4, 4)


class MultiEncoderMLLM(nn.Module):
    def __init__(self, encoders: tuple[str, ...], width: int, proj_dim: int, hidden: int, n_questions: int,
                 n_answers: int, noise: float):
        super().__init__()
        self.names = tuple(encoders)
        self.width = width
        self.encoders = nn.ModuleList(Encoder(k, width, noise) for k in encoders)
        self.proj = nn.Conv2d(width * len(encoders), proj_dim, 1)        # the adapter, per token
        self.q_emb = nn.Embedding(n_questions + 1, proj_dim)
        self.llm = nn.Sequential(nn.Linear(16 * proj_dim + proj_dim, hidden), nn.GELU(),
                                 nn.Linear(hidden, hidden), nn.GELU(), nn.Linear(hidden, n_answers))
        self.register_buffer("feat_mean", torch.zeros(width * len(encoders), 4, 4))

    def fused(self, x, gen=None):
        return torch.cat([e(x, gen) for e in self.encoders], 1)           # channel concatenation

    def forward(self, x, q, option_ids, keep=None, ablation="zero", gen=None):
        z = self.fused(x, gen)
        if keep is not None:   # keep: (n_encoders,) of 0/1; masked blocks zeroed or set to their mean
            m = keep.repeat_interleave(self.width).view(1, -1, 1, 1).to(z)
            z = z * m + (1 - m) * (self.feat_mean.unsqueeze(0) if ablation == "mean" else 0.0)
        h = F.gelu(self.proj(z)).flatten(1)
        logits = self.llm(torch.cat([h, self.q_emb(q)], 1))
        return logits.gather(1, option_ids.clamp(min=0))                  # (B, 4) scores of the options


def build(names, cfg: dict, n_questions: int, n_answers: int) -> MultiEncoderMLLM:
    m = cfg["model"]
    return MultiEncoderMLLM(tuple(names), m["width"], m["proj_dim"], m["hidden"], n_questions, n_answers,
                            m["noise_sigma"])


def count_macs(model: MultiEncoderMLLM, x, q, o) -> int:
    """Multiply-accumulates of one forward pass on one item (Conv2d and Linear layers, by hooks)."""
    total = [0]

    def hook(mod, inp, out):
        if isinstance(mod, nn.Conv2d):
            total[0] += out[0].numel() * (mod.in_channels // mod.groups) * mod.kernel_size[0] * mod.kernel_size[1]
        elif isinstance(mod, nn.Linear):
            total[0] += mod.in_features * mod.out_features

    handles = [mod.register_forward_hook(hook) for mod in model.modules() if isinstance(mod, (nn.Conv2d, nn.Linear))]
    with torch.no_grad():
        model(x[:1], q[:1], o[:1])
    for h in handles:
        h.remove()
    return int(total[0])


def train(model: MultiEncoderMLLM, data: dict, cfg: dict, seed: int, device) -> dict:
    """Train all encoders and the LLM jointly (no encoder dropout, as the real models were trained)."""
    t = cfg["train"]
    torch.manual_seed(seed)
    model.to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=t["lr"], weight_decay=t["weight_decay"])
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=t["lr"], total_steps=t["steps"], pct_start=0.1)
    x, q, o, y = (data[k].to(device) for k in ("x", "q", "o", "y"))
    gen = torch.Generator().manual_seed(seed)
    start, losses = time.perf_counter(), []
    for _ in range(t["steps"]):
        idx = torch.randint(0, len(y), (t["batch_size"],), generator=gen).to(device)
        loss = F.cross_entropy(model(x[idx], q[idx], o[idx]), y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
    seconds = time.perf_counter() - start
    model.eval()
    with torch.no_grad():   # the mean-ablation values: each channel's mean over training images
        model.feat_mean.copy_(model.fused(x[: cfg["eval"]["mean_images"]]).mean(0))
    return {"train_s": seconds, "first_loss": float(np.mean(losses[:20])), "last_loss": float(np.mean(losses[-20:]))}


def keep_masks(n: int) -> list[tuple[int, ...]]:
    """Every non-empty subset of kept encoders (2^n - 1), the full set first."""
    subsets = [s for k in range(n, 0, -1) for s in itertools.combinations(range(n), k)]
    return [tuple(int(i in s) for i in range(n)) for s in subsets]


@torch.no_grad()
def correct(model: MultiEncoderMLLM, data: dict, keeps: list[tuple[int, ...]], ablation: str, seed: int,
            device, batch: int = 4096) -> np.ndarray:
    """(n_keeps, N) 0/1 correctness of evaluation-only passes with each kept subset."""
    model.to(device).eval()
    x, q, o, y = (data[k].to(device) for k in ("x", "q", "o", "y"))
    out = np.zeros((len(keeps), len(y)), dtype=np.int8)
    for j, keep in enumerate(keeps):
        gen = torch.Generator(device=x.device).manual_seed(10_000 + seed)   # the noisy encoder's noise: fixed
        kv = torch.tensor(keep, device=device)
        for s in range(0, len(y), batch):
            pred = model(x[s:s + batch], q[s:s + batch], o[s:s + batch], kv, ablation, gen).argmax(1)
            out[j, s:s + batch] = (pred == y[s:s + batch]).cpu().numpy()
    return out
