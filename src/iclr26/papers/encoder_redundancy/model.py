"""A small multi-encoder MLLM in the paper's "ViT-adapter-LLM" form (card 14, section 2):

    Y = LLM( proj( fusion(E_1(I), ..., E_n(I)) ), T )

with Eagle's channel-concatenation fusion: every encoder yields a 4 x 4 token grid of `width`
channels; the grids are concatenated along channels and a per-token projector maps them to the
"LLM". Masking encoder i (evaluation only, on the trained model) zeroes its channel block before the
projector (ablation "zero", as the authors' VLMEvalKit `eagle` branch does: a masked tower's feature
is `torch.zeros` of its shape, concatenated on channels before the projector) or replaces it by its
mean over training images (ablation "mean", a probe).

Training follows the real models' recipe in two stages: (1) each encoder is pretrained SEPARATELY
with its own adapter and head on the training items (the real encoders are separately pretrained,
complete views; Eagle also pre-aligns each one alone); (2) the encoders are frozen and a fresh
adapter + "LLM" is trained on their concatenated features (the joint stage). Re-trained encoder
subsets (dual, single) repeat stage 2 on the same pretrained encoders.

Encoders, each with its own inductive bias (the card's table; the card's E2 "ConvNeXt-like" is not
built, its E5 "noisy" is):
  global  "CLIP-like":        RGB average-pooled x4 (4 x 4), 1 x 1 convolutions
  edge    "SAM-like":         Sobel edge magnitude of the grey image, pooled x2, a strided 3 x 3 conv
  fine    "Pix2Struct-like":  grey image at full resolution, 4 x 4 patches, a 3 x 3 conv over patches
  noisy   "weak encoder":     RGB plus Gaussian noise, pooled x2, a strided 3 x 3 conv
Control world (card section 6): every encoder sees the full-resolution RGB image through the same
patch architecture (view "full"), so the encoders differ only by initialisation and pretraining seed.
The "LLM" is an MLP over the flattened projected tokens and a question-template embedding, scoring the
answer vocabulary; an item is answered by the best-scoring of its allowed answers (MCQ: its options;
open VQA: the whole vocabulary).
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
    def __init__(self, kind: str, width: int, noise: float, view: str = "native"):
        super().__init__()
        self.kind, self.noise, self.view = kind, noise, view
        sobel = torch.tensor([[-1.0, 0, 1], [-2, 0, 2], [-1, 0, 1]])
        self.register_buffer("sobel", torch.stack([sobel, sobel.T]).unsqueeze(1))
        if view == "full":   # control world: the full-resolution RGB image, the same patch encoder for all
            self.net = nn.Sequential(nn.Conv2d(3, width, 4, stride=4), nn.GELU(),
                                     nn.Conv2d(width, width, 3, padding=1), nn.GELU(), nn.Conv2d(width, width, 1))
        elif kind == "global":
            self.net = nn.Sequential(nn.Conv2d(3, width, 1), nn.GELU(), nn.Conv2d(width, width, 1))
        elif kind == "edge":
            self.net = nn.Sequential(nn.Conv2d(1, width, 3, stride=2, padding=1), nn.GELU(), nn.Conv2d(width, width, 1))
        elif kind == "fine":
            self.net = nn.Sequential(nn.Conv2d(1, width, 4, stride=4), nn.GELU(),
                                     nn.Conv2d(width, width, 3, padding=1), nn.GELU(), nn.Conv2d(width, width, 1))
        elif kind == "noisy":
            self.net = nn.Sequential(nn.Conv2d(3, width, 3, stride=2, padding=1), nn.GELU(), nn.Conv2d(width, width, 1))
        else:
            raise ValueError(f"unknown encoder {kind!r}")

    @property
    def random_view(self) -> bool:
        """Whether the input view draws noise (the noisy encoder's native view)."""
        return self.view != "full" and self.kind == "noisy"

    def input_view(self, x: torch.Tensor, gen: torch.Generator | None = None) -> torch.Tensor:
        """What the encoder's architecture lets it see, before any learned layer."""
        if self.view == "full":
            return x
        if self.kind == "global":
            return F.avg_pool2d(x, 4)
        if self.kind == "edge":
            g = F.conv2d(_grey(x), self.sobel, padding=1)
            return F.avg_pool2d(g.pow(2).sum(1, keepdim=True).sqrt(), 2)
        if self.kind == "fine":
            return _grey(x)
        eps = torch.randn(x.shape, generator=gen, device=x.device) if gen is not None else torch.randn_like(x)
        return F.avg_pool2d(x + self.noise * eps, 2)

    def forward(self, x: torch.Tensor, gen: torch.Generator | None = None) -> torch.Tensor:
        return self.net(self.input_view(x, gen))   # (B, width, 4, 4)


class Head(nn.Module):
    """Adapter (per-token projector over the concatenated channels) and the MLP "LLM"."""

    def __init__(self, in_channels: int, proj_dim: int, hidden: int, n_questions: int, n_answers: int):
        super().__init__()
        self.proj = nn.Conv2d(in_channels, proj_dim, 1)
        self.q_emb = nn.Embedding(n_questions + 1, proj_dim)
        self.llm = nn.Sequential(nn.Linear(16 * proj_dim + proj_dim, hidden), nn.GELU(),
                                 nn.Linear(hidden, hidden), nn.GELU(), nn.Linear(hidden, n_answers))

    def forward(self, z, q, allowed):
        h = F.gelu(self.proj(z)).flatten(1)
        logits = self.llm(torch.cat([h, self.q_emb(q)], 1))
        return logits.masked_fill(~allowed, float("-inf"))


def mask_features(z: torch.Tensor, keep, width: int, ablation: str = "zero", mean: torch.Tensor | None = None):
    """Zero (or set to its training mean) the channel block of every encoder with keep[i] = 0."""
    m = torch.as_tensor(keep).repeat_interleave(width).view(1, -1, 1, 1).to(z)
    fill = mean.unsqueeze(0) if ablation == "mean" else 0.0
    return z * m + (1 - m) * fill


def _fit(params, step_fn, t: dict, steps: int, n: int, seed: int) -> dict:
    # foreach: one multi-tensor update per step instead of a Python loop over parameters (the same
    # arithmetic per element; tested equal to the single-tensor loop)
    opt = torch.optim.AdamW(params, lr=t["lr"], weight_decay=t["weight_decay"], foreach=True)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=t["lr"], total_steps=steps, pct_start=0.1)
    gen = torch.Generator().manual_seed(seed)
    losses = []
    for _ in range(steps):
        idx = torch.randint(0, n, (t["batch_size"],), generator=gen)
        loss = step_fn(idx, gen)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
    return {"first_loss": float(np.mean(losses[:20])), "last_loss": float(np.mean(losses[-20:]))}


def pretrain_encoder(enc: Encoder, head: Head, data: dict, cfg: dict, seed: int) -> dict:
    """Stage 1: one encoder with its own adapter and head, on all training items."""
    t = cfg["train"]
    torch.manual_seed(seed)
    x, q, a, y = data["x"], data["q"], data["allowed"], data["y"]
    enc.train()
    head.train()

    start = time.perf_counter()
    if enc.random_view:
        def step(idx, gen):
            return F.cross_entropy(head(enc(x[idx], gen), q[idx], a[idx]), y[idx])
    else:   # a deterministic view, computed once per image (the same values per item as per batch; tested)
        with torch.no_grad():
            view = enc.input_view(x)

        def step(idx, gen):
            return F.cross_entropy(head(enc.net(view[idx]), q[idx], a[idx]), y[idx])

    info = _fit(list(enc.parameters()) + list(head.parameters()), step, t, t["pretrain_steps"], len(y), seed)
    enc.eval()
    return info | {"seconds": time.perf_counter() - start}


@torch.no_grad()
def features(enc: Encoder, x: torch.Tensor, seed: int, batch: int = 4096) -> torch.Tensor:
    """The frozen encoder's token grid for every image (the noisy encoder's noise drawn once per
    item, seeded)."""
    enc.eval()
    gen = torch.Generator().manual_seed(seed)
    return torch.cat([enc(x[s:s + batch], gen) for s in range(0, len(x), batch)])


def train_head(head: Head, z: torch.Tensor, data: dict, cfg: dict, seed: int) -> dict:
    """Stage 2: the adapter and "LLM" on the frozen encoders' concatenated features."""
    t = cfg["train"]
    torch.manual_seed(seed)
    q, a, y = data["q"], data["allowed"], data["y"]
    head.train()

    def step(idx, gen):
        return F.cross_entropy(head(z[idx], q[idx], a[idx]), y[idx])

    start = time.perf_counter()
    info = _fit(head.parameters(), step, t, t["steps"], len(y), seed)
    head.eval()
    return info | {"seconds": time.perf_counter() - start}


def keep_masks(n: int) -> list[tuple[int, ...]]:
    """Every non-empty subset of kept encoders (2^n - 1), the full set first."""
    subsets = [s for k in range(n, 0, -1) for s in itertools.combinations(range(n), k)]
    return [tuple(int(i in s) for i in range(n)) for s in subsets]


@torch.no_grad()
def correct(head: Head, z: torch.Tensor, data: dict, keeps: list[tuple[int, ...]], width: int,
            ablation: str = "zero", mean: torch.Tensor | None = None, batch: int = 8192) -> np.ndarray:
    """(n_keeps, N) 0/1 correctness of evaluation-only passes with each kept subset."""
    head.eval()
    q, a, y = data["q"], data["allowed"], data["y"]
    out = np.zeros((len(keeps), len(y)), dtype=np.int8)
    for j, keep in enumerate(keeps):
        for s in range(0, len(y), batch):
            zz = mask_features(z[s:s + batch], keep, width, ablation, mean)
            pred = head(zz, q[s:s + batch], a[s:s + batch]).argmax(1)
            out[j, s:s + batch] = (pred == y[s:s + batch]).numpy()
    return out


def count_macs(module: nn.Module, *inputs) -> int:
    """Multiply-accumulates of one forward pass on one item (Conv2d and Linear layers, by hooks)."""
    total = [0]

    def hook(mod, inp, out):
        if isinstance(mod, nn.Conv2d):
            total[0] += out[0].numel() * (mod.in_channels // mod.groups) * mod.kernel_size[0] * mod.kernel_size[1]
        elif isinstance(mod, nn.Linear):
            total[0] += mod.in_features * mod.out_features

    handles = [m.register_forward_hook(hook) for m in module.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    with torch.no_grad():
        module(*(i[:1] for i in inputs))
    for h in handles:
        h.remove()
    return int(total[0])
