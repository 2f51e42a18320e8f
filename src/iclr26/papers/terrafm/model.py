"""TerraFM-tiny: the encoder of the official `terrafm.py` at small width, DINO self-distillation
with sensing modalities as augmentations, and dual centering.

Encoder (terrafm.py, read in mbzuai-oryx/TerraFM): three modality-specific patchify convolutions
(S2-L2A 12 bands, S2-L1C 12 bands, S1-RTC 2 bands) to a wide width A = 3 D, a learned vector per
modality added to every token, then a shared token projection: a bias-free linear (the "value" of
the cross-attention), LayerNorm, a linear, and a linear down to D. When several modalities of one
location are fed together, their normed value tokens are combined per patch (after the LayerNorm,
before the second linear, the order of terrafm.py's TokenProjection docstring) by an
attention-weighted mean over modalities (the released file does not show the query/key: here one learned query per patch
position and a linear key per token, softmax over the modalities at scale 1/sqrt(A), card 12 §2).
A CLS token, position embeddings (interpolated for local crops, as DINO) and pre-norm transformer
blocks (torch.nn.TransformerEncoderLayer, LayerNorm eps 1e-6); the output is the normed CLS token.
For CPU time the same computation runs with fewer small ops (equal to float rounding; the tests
compare each with the torch module it replaces): the patch convolution as a linear map on flattened
patches, the blocks by `block` with attention written out, the last block for the CLS token only,
and in training every view of one crop size through the shared transformer and head as one batch.

DINO (Caron et al. 2021): loss sum over pairs of distinct views of
-softmax((g_t - c) / tau_t) . log_softmax(g_s / tau_s); teacher = EMA of the student; centre c = EMA
of the batch-mean teacher logits. Dual centering (TerraFM, formula not seen; card 12 §2's reading):
a second centre c2, the EMA of the teacher logits averaged with weights 1 / (frequency of the
tile's dominant WorldCover class), and the teacher target softmax((g_t - lam c1 - (1 - lam) c2) / tau_t).
Options (config `train`): one pair of centres per view kind (S1, L1C, L2A, fused), the modality drawn
per sample or per view, DINO's lr scaling, teacher-temperature warmup, freeze_last_layer, and the end
value of the teacher momentum (DINO: cosine to 1). The run logs the loss, the teacher's target entropy
and, over its last 10 steps, what the second centre does to the targets (max|c2 - c1| / tau_t, KL).
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from numpy.lib.stride_tricks import sliding_window_view
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

    def _interpolate(self, grid_param: torch.Tensor, n: int) -> torch.Tensor:
        """A (grid*grid, C) per-position parameter on an n x n token grid (bicubic interpolation)."""
        x = grid_param.T.reshape(1, -1, self.grid, self.grid)
        return F.interpolate(x, size=(n, n), mode="bicubic", align_corners=False).reshape(-1, n * n).T

    def patchify(self, modality: str, x: torch.Tensor) -> torch.Tensor:
        """The modality's patch embedding (a Conv2d with kernel = stride = patch) as the same linear map
        on the flattened patches: (B, C, H, W) -> (B, N, A), N row-major as conv(x).flatten(2)."""
        conv, p = self.embed[modality], self.patch
        b, c, h, w = x.shape
        x = x.reshape(b, c, h // p, p, w // p, p).permute(0, 2, 4, 1, 3, 5).reshape(b, (h // p) * (w // p), c * p * p)
        return F.linear(x, conv.weight.reshape(len(conv.weight), -1), conv.bias)

    def tokens(self, views: dict[str, torch.Tensor]) -> torch.Tensor:
        """views: {modality: (B, C, H, W)} of the same locations -> (B, N, D) patch tokens; several
        modalities are fused."""
        tokens = {m: self.patchify(m, x) + self.modality[m] for m, x in views.items()}
        # terrafm.py's order: proj1 (the value) -> LayerNorm -> [weighted mean over modalities] -> proj2 -> proj3
        values = [self.proj[0](self.value(t)) for t in tokens.values()]   # each (B, N, A)
        if len(values) > 1:                                               # cross-attention fusion
            n = int(math.isqrt(values[0].shape[1]))
            query = self.query if n == self.grid else self._interpolate(self.query, n)
            keys = torch.stack([self.key(t) for t in tokens.values()], 2)
            weights = torch.softmax((keys * query[None, :, None]).sum(-1) / math.sqrt(self.wide), dim=2)
            fused = (weights.unsqueeze(-1) * torch.stack(values, 2)).sum(2)
        else:
            fused = values[0]
        return self.proj[2](self.proj[1](fused))

    def trunk(self, x: torch.Tensor) -> torch.Tensor:
        """(B, N, D) patch tokens of any modality -> the normed CLS output (B, D): the CLS token and
        position embeddings (interpolated for an N other than grid^2), the pre-norm blocks. The
        blocks are nn.TransformerEncoderLayer's parameters run by `block` (the same computation
        with fewer small ops); the last block computes only the CLS token, the only output read."""
        n = int(math.isqrt(x.shape[1]))
        pos = self.pos if n == self.grid else \
            torch.cat([self.pos[:, :1], self._interpolate(self.pos[0, 1:], n)[None]], 1)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + pos
        layers = self.blocks.layers
        for i, layer in enumerate(layers):
            x = block(layer, x, cls_only=i == len(layers) - 1)
        return self.norm(x[:, 0])

    def forward(self, views: dict[str, torch.Tensor]) -> torch.Tensor:
        """views: {modality: (B, C, H, W)} of the same locations; several modalities are fused."""
        return self.trunk(self.tokens(views))


def block(layer: nn.TransformerEncoderLayer, x: torch.Tensor, cls_only: bool = False) -> torch.Tensor:
    """One pre-norm nn.TransformerEncoderLayer (norm_first, GELU, no dropout) on batch-first x:
    x + attn(norm1(x)), then + linear2(gelu(linear1(norm2(.)))). cls_only: only token 0's output
    (queries from token 0 alone; keys and values from every token)."""
    attn = layer.self_attn
    b, n, d = x.shape
    heads = attn.num_heads
    h = layer.norm1(x)
    w, bias = attn.in_proj_weight, attn.in_proj_bias
    if cls_only:
        x = x[:, :1]
        q = F.linear(h[:, :1], w[:d], bias[:d]).view(b, 1, heads, d // heads).transpose(1, 2)
        kv = F.linear(h, w[d:], bias[d:]).view(b, n, 2, heads, d // heads).permute(2, 0, 3, 1, 4)
        k, v = kv[0], kv[1]
    else:
        q, k, v = F.linear(h, w, bias).view(b, n, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
    if q.device.type == "cpu":   # SDPA's math written out: faster than its CPU kernel for a few short tokens
        out = torch.softmax((q * (d // heads) ** -0.5) @ k.transpose(-2, -1), -1) @ v
    else:
        out = F.scaled_dot_product_attention(q, k, v)
    x = x + attn.out_proj(out.transpose(1, 2).reshape(b, x.shape[1], d))
    return x + layer.linear2(F.gelu(layer.linear1(layer.norm2(x))))


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
def view_kinds(variant: str, rng, choices: list, b: int, per_sample: bool = True) -> list[str]:
    """The sensing modality of each sample of one view, drawn like any DINO augmentation (per sample,
    or one draw for the whole view): S2-L2A only for the single-modality baseline; otherwise S1, L1C,
    L2A or `fused` (all three), uniformly."""
    if variant == "s2_dino":
        return ["s2l2a"] * b
    if not per_sample:   # one modality for the whole view (cheaper: one forward)
        return [choices[rng.integers(len(choices))]] * b
    return [choices[i] for i in rng.integers(len(choices), size=b)]


def make_view(data: dict, idx: np.ndarray, size: int, modalities: list[str], rng,
              device: str = "cpu") -> dict[str, torch.Tensor]:
    """One view of the batch's locations: the same crop window across the fused modalities."""
    b, h = len(idx), data["s2l2a"].shape[-1]
    oy, ox = rng.integers(0, h - size + 1, b), rng.integers(0, h - size + 1, b)
    flip = rng.random(b) < 0.5
    out = {}
    for m in modalities:
        x = sliding_window_view(data[m], (size, size), axis=(2, 3))[idx, :, oy, ox]   # (b, C, size, size) copy
        x[flip] = x[flip][..., ::-1]
        out[m] = torch.from_numpy(x).to(device)
    return out


def view_tokens(encoder: TerraEncoder, crops: dict[str, torch.Tensor], kinds: list[str]) -> torch.Tensor:
    """Patch tokens of one view whose samples may have different modalities: each modality kind's
    samples through its own path (one call per kind), put back in batch order."""
    order, outs = [], []
    for kind in sorted(set(kinds)):
        sel = [i for i, k in enumerate(kinds) if k == kind]
        mods = MODALITIES if kind == "fused" else (kind,)
        pick = torch.as_tensor(sel) if len(sel) < len(kinds) else slice(None)
        outs.append(encoder.tokens({m: crops[m][pick] for m in mods}))
        order += sel
    out = torch.cat(outs) if len(outs) > 1 else outs[0]
    return out if order == sorted(order) else out[torch.as_tensor(np.argsort(order))]


def forward_views(net: nn.Module, views: list[dict[str, torch.Tensor]], kinds: list[list[str]]) -> list[torch.Tensor]:
    """Head outputs of several views: each view's tokens through its modality path, then all views
    with the same number of tokens (crop size) through the shared transformer and head as one batch
    (every op after the tokens acts on each sample alone, so this equals one forward per view)."""
    tokens = [view_tokens(net.encoder, v, k) for v, k in zip(views, kinds)]
    out: list = [None] * len(tokens)
    for n in dict.fromkeys(t.shape[1] for t in tokens):
        group = [i for i, t in enumerate(tokens) if t.shape[1] == n]
        x = torch.cat([tokens[i] for i in group]) if len(group) > 1 else tokens[group[0]]
        heads = net.head(net.encoder.trunk(x))
        for i, h in zip(group, heads.split([len(tokens[i]) for i in group])):
            out[i] = h
    return out


def forward_view(net: nn.Module, crops: dict[str, torch.Tensor], kinds: list[str]) -> torch.Tensor:
    """Head outputs of one view whose samples may have different modalities, in batch order."""
    return forward_views(net, [crops], [kinds])[0]


# ----------------------------------------------------------------------------- DINO
def dino_loss(student: list[torch.Tensor], teacher: list[torch.Tensor], center, tau_s: float,
              tau_t: float) -> torch.Tensor:
    """center: one tensor for every teacher view, or a list (one centre per teacher view)."""
    centers = center if isinstance(center, (list, tuple)) else [center] * len(teacher)
    targets = [torch.softmax((t - c) / tau_t, -1) for t, c in zip(teacher, centers)]
    log_probs = [F.log_softmax(s / tau_s, -1) for s in student]
    total, pairs = 0.0, 0
    for i, p in enumerate(targets):
        for j, log_q in enumerate(log_probs):
            if i == j:
                continue
            total = total + (-p * log_q).sum(-1).mean()
            pairs += 1
    return total / pairs


def class_weights(labels: np.ndarray, n_classes: int) -> np.ndarray:
    """1 / frequency of each sample's dominant class (frequencies over the pretraining set)."""
    freq = np.bincount(labels, minlength=n_classes) / len(labels)
    return 1.0 / np.maximum(freq[labels], 1e-12)


def base_lr(tr: dict) -> float:
    """DINO's linear scaling rule when `lr_base` is given: lr = lr_base x batch / 256."""
    return tr["lr_base"] * tr["batch_size"] / 256 if tr.get("lr_base") is not None else tr["lr"]


def tau_t_at(tr: dict, step: int) -> float:
    """DINO's teacher-temperature warmup: linear from tau_t_start to tau_t over the first
    tau_t_warmup_fraction of the steps, then constant."""
    start, n = tr.get("tau_t_start", tr["tau_t"]), int(tr.get("tau_t_warmup_fraction", 0) * tr["steps"])
    return start + (tr["tau_t"] - start) * step / n if step < n else tr["tau_t"]


def centre_shift(logits: torch.Tensor, c1: torch.Tensor, c2: torch.Tensor, lam: float, tau_t: float) -> tuple:
    """What the second centre does to the teacher's targets: ||c2 - c1||_inf / tau_t and the mean
    KL(target under c1 || target under lam c1 + (1 - lam) c2) over the batch (nats)."""
    p1 = torch.log_softmax((logits - c1) / tau_t, -1)
    pm = torch.log_softmax((logits - lam * c1 - (1 - lam) * c2) / tau_t, -1)
    kl = (p1.exp() * (p1 - pm)).sum(-1).mean()
    return float((c2 - c1).abs().max() / tau_t), float(kl)


def pretrain(cfg: dict, data: dict, variant: str, seed: int, log=print, device: str = "cpu") -> dict:
    """DINO pretraining of one variant (s2_dino, modality_aug, dual_center); returns the student,
    the teacher, the teacher's final S2-L2A centre, the loss curve and the centre diagnostics.
    With `center_per_modality` each view kind (S1, L1C, L2A, fused) keeps its own centres c1, c2
    (each an EMA of the teacher outputs of that kind's views only)."""
    tr, m = cfg["train"], cfg["model"]
    torch.manual_seed(seed)
    rng = np.random.default_rng([seed, 7])
    student = build(cfg).to(device)
    teacher = build(cfg).to(device)
    teacher.load_state_dict(student.state_dict())
    for p in teacher.parameters():
        p.requires_grad_(False)
    s_params, t_params = list(student.parameters()), list(teacher.parameters())
    lr0 = base_lr(tr)
    opt = torch.optim.AdamW(s_params, lr=lr0, weight_decay=tr["weight_decay"], foreach=True)
    steps, warm = tr["steps"], max(1, int(tr["warmup_fraction"] * tr["steps"]))
    freeze = int(tr.get("freeze_last_fraction", 0) * steps)
    per_mod = bool(tr.get("center_per_modality", False))
    k = m["prototypes"]
    kinds_all = ("s1rtc", "s2l1c", "s2l2a", "fused") if per_mod else ("all",)
    c1 = torch.zeros(len(kinds_all), k, device=device)
    c2 = torch.zeros(len(kinds_all), k, device=device)
    weights = torch.from_numpy(class_weights(data["label"], cfg["data"]["majortom"]["n_classes"])).float().to(device)
    lam = tr["dual_lambda"] if variant == "dual_center" else 1.0
    n, b = len(data["label"]), tr["batch_size"]
    curve, shifts, ent = [], [], []
    for step in range(steps):
        lr = lr0 * (step + 1) / warm if step < warm else \
            lr0 * 0.5 * (1 + math.cos(math.pi * (step - warm) / max(1, steps - warm)))
        for g in opt.param_groups:
            g["lr"] = lr
        tau_t = tau_t_at(tr, step)
        idx = rng.choice(n, b, replace=False)
        sizes = [m["global_crop"]] * 2 + [m["local_crop"]] * tr["local_crops"]
        kinds = [view_kinds(variant, rng, tr["view_choices"], b, tr.get("modality_per_sample", True)) for _ in sizes]
        crops = [make_view(data, idx, size, sorted({mm for kd in set(kk) for mm in
                                                    (MODALITIES if kd == "fused" else (kd,))}), rng, device)
                 for size, kk in zip(sizes, kinds)]
        slots = [torch.as_tensor([kinds_all.index(kd) if per_mod else 0 for kd in kk], device=device)
                 for kk in kinds[:2]]   # each teacher sample's centre
        with torch.no_grad():
            t_out = forward_views(teacher, crops[:2], kinds[:2])
        s_out = forward_views(student, crops, kinds)
        centers = [lam * c1[sl] + (1 - lam) * c2[sl] for sl in slots]
        loss = dino_loss(s_out, t_out, centers, tr["tau_s"], tau_t)
        with torch.no_grad():
            p = torch.softmax((t_out[0] - centers[0]) / tau_t, -1)
            ent.append(float(-(p * torch.log(p + 1e-12)).sum(-1).mean() / math.log(k)))
        opt.zero_grad()
        loss.backward()
        if step < freeze:   # DINO's freeze_last_layer: the prototypes stay fixed at the start
            student.head.last.grad = None
        torch.nn.utils.clip_grad_norm_(student.parameters(), tr["clip_grad"])
        opt.step()
        with torch.no_grad():
            end = tr.get("ema_final", 1.0)   # DINO: cosine from ema to 1
            mom = end - (end - tr["ema"]) * 0.5 * (1 + math.cos(math.pi * step / steps))
            torch._foreach_mul_(t_params, mom)
            torch._foreach_add_(t_params, s_params, alpha=1 - mom)
            if step >= steps - 10:   # the second centre's effect on the targets (dual_lambda even if unused)
                shifts.append([centre_shift(t, c1[sl], c2[sl], tr["dual_lambda"], tau_t)
                               for t, sl in zip(t_out, slots)])
            batch, slot = torch.cat(t_out), torch.cat(slots)
            w = weights[idx].repeat(len(t_out))
            for j in slot.unique().tolist():
                sel = slot == j
                c1[j] = c1[j] * tr["center_momentum"] + batch[sel].mean(0) * (1 - tr["center_momentum"])
                c2[j] = c2[j] * tr["center_momentum"] + \
                    (w[sel, None] * batch[sel]).sum(0) / w[sel].sum() * (1 - tr["center_momentum"])
        curve.append(float(loss.detach()))
        if step % 50 == 0:
            log(f"{variant} seed {seed} step {step}: loss {curve[-1]:.3f}")
    s2 = kinds_all.index("s2l2a") if per_mod else 0
    shift = np.asarray(shifts, float).reshape(-1, 2).mean(0) if shifts else np.full(2, np.nan)
    return {"student": student.cpu(), "teacher": teacher.cpu(), "center": (lam * c1[s2] + (1 - lam) * c2[s2]).cpu(),
            "curve": curve, "teacher_entropy": ent, "center_gap": float(shift[0]), "dual_kl": float(shift[1])}


@torch.no_grad()
def features(net: nn.Module, x: np.ndarray, modality: str, batch: int = 512) -> np.ndarray:
    net.eval()
    return np.concatenate([net.encoder({modality: torch.from_numpy(x[i:i + batch])}).numpy()
                           for i in range(0, len(x), batch)])


@torch.no_grad()
def collapse_stats(net: nn.Module, x: np.ndarray, modality: str, center: torch.Tensor, tau_t: float,
                   max_entropy: float = 0.5) -> dict:
    """Teacher-output entropies on evaluation chips (normalised by log K): H(mean p) below 0.1 is a
    collapse to one prototype; a mean H(p) at or above `max_entropy` is a near-uniform teacher."""
    net.eval()
    logits = net.head(net.encoder({modality: torch.from_numpy(x)}))
    p = torch.softmax((logits - center) / tau_t, -1)
    log_k = math.log(p.shape[1])
    h_mean = float(-(p.mean(0) * torch.log(p.mean(0) + 1e-12)).sum()) / log_k
    mean_h = float(-(p * torch.log(p + 1e-12)).sum(-1).mean()) / log_k
    return {"h_mean_norm": h_mean, "mean_h_norm": mean_h, "collapsed": float(h_mean < 0.1 or mean_h >= max_entropy)}
