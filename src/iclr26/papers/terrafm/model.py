"""TerraFM-tiny: the encoder of the official `terrafm.py` at small width, DINO self-distillation
with sensing modalities as augmentations, and dual centering.

Encoder (terrafm.py, read in mbzuai-oryx/TerraFM): three modality-specific patchify convolutions
(S2-L2A 12 bands, S2-L1C 12 bands, S1-RTC 2 bands) to a wide width A = 3 D, a learned vector per
modality added to every token, then a shared token projection: a bias-free linear (the "value" of
the cross-attention), LayerNorm, a linear, and a linear down to D. When several modalities of one
location are fed together, their value tokens are combined per patch by an attention-weighted mean
over modalities (the released file does not show the query/key: here one learned query per patch
position and a linear key per token, softmax over the modalities at scale 1/sqrt(A), card 12 §2).
A CLS token, position embeddings (interpolated for local crops, as DINO) and pre-norm transformer
blocks (torch.nn.TransformerEncoderLayer, LayerNorm eps 1e-6); the output is the normed CLS token.

DINO (Caron et al. 2021): loss sum over pairs of distinct views of
-softmax((g_t - c) / tau_t) . log_softmax(g_s / tau_s); teacher = EMA of the student; centre c = EMA
of the batch-mean teacher logits. Dual centering (TerraFM, formula not seen; card 12 §2's reading):
a second centre c2, the EMA of the teacher logits averaged with weights 1 / (frequency of the
tile's dominant WorldCover class), and the teacher target softmax((g_t - lam c1 - (1 - lam) c2) / tau_t).
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

CHANNELS = {"s2l2a": 12, "s2l1c": 12, "s1rtc": 2}
MODALITIES = tuple(CHANNELS)


class TerraEncoder(nn.Module):
    def __init__(self, dim: int, depth: int, heads: int, patch: int, grid: int, a_mult: int = 3):
        super().__init__()
        wide = a_mult * dim
        self.patch, self.grid, self.wide = patch, grid, wide
        self.embed = nn.ModuleDict({m: nn.Conv2d(c, wide, patch, patch) for m, c in CHANNELS.items()})
        self.modality = nn.ParameterDict({m: nn.Parameter(torch.zeros(wide)) for m in CHANNELS})
        self.value = nn.Linear(wide, wide, bias=False)
        self.key = nn.Linear(wide, wide, bias=False)
        self.query = nn.Parameter(torch.randn(grid * grid, wide) * 0.02)
        self.proj = nn.Sequential(nn.LayerNorm(wide, eps=1e-6), nn.Linear(wide, wide), nn.Linear(wide, dim))
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, grid * grid + 1, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True, layer_norm_eps=1e-6)
        self.blocks = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim, eps=1e-6)

    def _grid_params(self, n: int):
        """Position embeddings and fusion queries for an n x n token grid (bicubic interpolation)."""
        if n == self.grid:
            return self.pos, self.query
        pos = self.pos[:, 1:].reshape(1, self.grid, self.grid, -1).permute(0, 3, 1, 2)
        pos = F.interpolate(pos, size=(n, n), mode="bicubic", align_corners=False)
        pos = pos.permute(0, 2, 3, 1).reshape(1, n * n, -1)
        q = self.query.T.reshape(1, -1, self.grid, self.grid)
        q = F.interpolate(q, size=(n, n), mode="bicubic", align_corners=False).reshape(-1, n * n).T
        return torch.cat([self.pos[:, :1], pos], 1), q

    def forward(self, views: dict[str, torch.Tensor]) -> torch.Tensor:
        """views: {modality: (B, C, H, W)} of the same locations; several modalities are fused."""
        tokens = {m: self.embed[m](x).flatten(2).transpose(1, 2) + self.modality[m] for m, x in views.items()}
        n = int(math.isqrt(next(iter(tokens.values())).shape[1]))
        pos, query = self._grid_params(n)
        values = torch.stack([self.value(t) for t in tokens.values()], 2)            # (B, N, M, A)
        if values.shape[2] > 1:                                                       # cross-attention fusion
            keys = torch.stack([self.key(t) for t in tokens.values()], 2)
            weights = torch.softmax((keys * query[None, :, None]).sum(-1) / math.sqrt(self.wide), dim=2)
            fused = (weights.unsqueeze(-1) * values).sum(2)
        else:
            fused = values[:, :, 0]
        x = self.proj(fused)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + pos
        return self.norm(self.blocks(x))[:, 0]


class DINOHead(nn.Module):
    """DINO's projection head: 3-layer MLP, l2-normalised bottleneck, weight-normalised prototypes
    (norm fixed to 1, as DINO's norm_last_layer)."""

    def __init__(self, dim: int, hidden: int, bottleneck: int, prototypes: int):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, hidden), nn.GELU(),
                                 nn.Linear(hidden, bottleneck))
        self.last = nn.Parameter(torch.randn(prototypes, bottleneck) * 0.02)

    def forward(self, x):
        return F.normalize(self.mlp(x), dim=-1) @ F.normalize(self.last, dim=-1).T


def build(cfg: dict) -> nn.Module:
    m = cfg["model"]
    net = nn.Module()
    net.encoder = TerraEncoder(m["dim"], m["depth"], m["heads"], m["patch"], m["global_crop"] // m["patch"])
    net.head = DINOHead(m["dim"], m["head_hidden"], m["head_bottleneck"], m["prototypes"])
    return net


# ----------------------------------------------------------------------------- views
def view_modalities(variant: str, rng, choices: list) -> list[str]:
    """The sensors of one view: S2-L2A only for the single-modality baseline; otherwise one of
    S1, L1C, L2A or the fusion of all three, uniformly (card 12 §6)."""
    if variant == "s2_dino":
        return ["s2l2a"]
    pick = choices[rng.integers(len(choices))]
    return list(MODALITIES) if pick == "fused" else [pick]


def make_view(data: dict, idx: np.ndarray, size: int, modalities: list[str], rng,
              device: str = "cpu") -> dict[str, torch.Tensor]:
    """One view of the batch's locations: the same crop window across the fused modalities."""
    b, h = len(idx), data["s2l2a"].shape[-1]
    oy, ox = rng.integers(0, h - size + 1, b), rng.integers(0, h - size + 1, b)
    rows, cols = oy[:, None] + np.arange(size), ox[:, None] + np.arange(size)
    flip = rng.random(b) < 0.5
    cols = np.where(flip[:, None], cols[:, ::-1], cols)
    out = {}
    for m in modalities:
        x = data[m][idx[:, None, None], :, rows[:, :, None], cols[:, None, :]]
        out[m] = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2))).to(device)
    return out


# ----------------------------------------------------------------------------- DINO
def dino_loss(student: list[torch.Tensor], teacher: list[torch.Tensor], center: torch.Tensor,
              tau_s: float, tau_t: float) -> torch.Tensor:
    targets = [torch.softmax((t - center) / tau_t, -1) for t in teacher]
    total, pairs = 0.0, 0
    for i, p in enumerate(targets):
        for j, s in enumerate(student):
            if i == j:
                continue
            total = total + (-p * F.log_softmax(s / tau_s, -1)).sum(-1).mean()
            pairs += 1
    return total / pairs


def class_weights(labels: np.ndarray, n_classes: int) -> np.ndarray:
    """1 / frequency of each sample's dominant class (frequencies over the pretraining set)."""
    freq = np.bincount(labels, minlength=n_classes) / len(labels)
    return 1.0 / np.maximum(freq[labels], 1e-12)


def pretrain(cfg: dict, data: dict, variant: str, seed: int, log=print, device: str = "cpu") -> dict:
    """DINO pretraining of one variant (s2_dino, modality_aug, dual_center); returns the student
    and the teacher's final centres."""
    tr, m = cfg["train"], cfg["model"]
    torch.manual_seed(seed)
    rng = np.random.default_rng([seed, 7])
    student = build(cfg).to(device)
    teacher = build(cfg).to(device)
    teacher.load_state_dict(student.state_dict())
    for p in teacher.parameters():
        p.requires_grad_(False)
    opt = torch.optim.AdamW(student.parameters(), lr=tr["lr"], weight_decay=tr["weight_decay"])
    steps, warm = tr["steps"], max(1, int(tr["warmup_fraction"] * tr["steps"]))
    k = m["prototypes"]
    c1, c2 = torch.zeros(k, device=device), torch.zeros(k, device=device)
    weights = torch.from_numpy(class_weights(data["label"], cfg["data"]["majortom"]["n_classes"])).float().to(device)
    lam = tr["dual_lambda"] if variant == "dual_center" else 1.0
    n = len(data["label"])
    curve = []
    for step in range(steps):
        lr = tr["lr"] * (step + 1) / warm if step < warm else \
            tr["lr"] * 0.5 * (1 + math.cos(math.pi * (step - warm) / max(1, steps - warm)))
        for g in opt.param_groups:
            g["lr"] = lr
        idx = rng.choice(n, tr["batch_size"], replace=False)
        sizes = [m["global_crop"]] * 2 + [m["local_crop"]] * tr["local_crops"]
        views = [make_view(data, idx, size, view_modalities(variant, rng, tr["view_choices"]), rng, device)
                 for size in sizes]
        globals_ = views[:2]
        with torch.no_grad():
            t_out = [teacher.head(teacher.encoder(v)) for v in globals_]
        s_out = [student.head(student.encoder(v)) for v in views]
        center = lam * c1 + (1 - lam) * c2
        loss = dino_loss(s_out, t_out, center, tr["tau_s"], tr["tau_t"])
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(student.parameters(), tr["clip_grad"])
        opt.step()
        with torch.no_grad():
            mom = 1 - (1 - tr["ema"]) * 0.5 * (1 + math.cos(math.pi * step / steps))
            for ps, pt in zip(student.parameters(), teacher.parameters()):
                pt.mul_(mom).add_(ps.detach(), alpha=1 - mom)
            batch = torch.cat(t_out)
            c1 = c1 * tr["center_momentum"] + batch.mean(0) * (1 - tr["center_momentum"])
            w = weights[idx].repeat(len(t_out))
            c2 = c2 * tr["center_momentum"] + (w[:, None] * batch).sum(0) / w.sum() * (1 - tr["center_momentum"])
        curve.append(float(loss.detach()))
        if step % 50 == 0:
            log(f"{variant} seed {seed} step {step}: loss {curve[-1]:.3f}")
    return {"student": student.cpu(), "teacher": teacher.cpu(), "center": (lam * c1 + (1 - lam) * c2).cpu(),
            "curve": curve}


@torch.no_grad()
def features(net: nn.Module, x: np.ndarray, modality: str, batch: int = 512) -> np.ndarray:
    net.eval()
    return np.concatenate([net.encoder({modality: torch.from_numpy(x[i:i + batch])}).numpy()
                           for i in range(0, len(x), batch)])


@torch.no_grad()
def collapse_stats(net: nn.Module, x: np.ndarray, modality: str, center: torch.Tensor, tau_t: float) -> dict:
    """Teacher-output entropies on evaluation chips: H(mean p) near 0 is a collapse to one prototype;
    mean H(p) near log K is a collapse to the uniform output."""
    net.eval()
    logits = net.head(net.encoder({modality: torch.from_numpy(x)}))
    p = torch.softmax((logits - center) / tau_t, -1)
    log_k = math.log(p.shape[1])
    h_mean = float(-(p.mean(0) * torch.log(p.mean(0) + 1e-12)).sum()) / log_k
    mean_h = float(-(p * torch.log(p + 1e-12)).sum(-1).mean()) / log_k
    return {"h_mean_norm": h_mean, "mean_h_norm": mean_h, "collapsed": float(h_mean < 0.1 or mean_h > 0.95)}
