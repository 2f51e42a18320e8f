"""DP-T: Diffusion Policy's TransformerForDiffusion (real-stanford/diffusion_policy,
`diffusion_policy/model/diffusion/transformer_for_diffusion.py`), re-implemented with the decoder's
residual branches exposed so that BAC can cache them.

Structure as in the official code with time_as_cond, obs_as_cond and n_cond_layers = 0: the
condition sequence is [sinusoidal time token, obs tokens] + a learned position embedding, passed
through the MLP encoder (Linear 4d, Mish, Linear); the action tokens (input_emb + pos_emb) go through
n_layer pre-norm `nn.TransformerDecoderLayer`s (GELU, dim_feedforward 4 d) with a causal self-attention
mask and the memory mask t >= s - 1; then ln_f and the head. Each decoder layer is

    x = x + SA(norm1(x))          block (layer, "sa")
    x = x + CA(norm2(x), memory)  block (layer, "ca")
    x = x + FFN(norm3(x))         block (layer, "ffn")

and the three branch outputs are BAC's cache units (card 18, section 2.1). Parameter names follow
`nn.TransformerDecoderLayer` (self_attn, multihead_attn, linear1, linear2, norm1..3), so an official
checkpoint's state dict loads unchanged.
"""
from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

KINDS = ("sa", "ca", "ffn")


class SinusoidalPosEmb(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        half = self.dim // 2
        freq = torch.exp(torch.arange(half, device=x.device) * -(math.log(10000) / (half - 1)))
        emb = x[:, None].float() * freq[None, :]
        return torch.cat([emb.sin(), emb.cos()], dim=-1)


class DecoderLayer(nn.Module):
    """nn.TransformerDecoderLayer(norm_first=True, activation='gelu', batch_first=True), branch by branch."""

    def __init__(self, d: int, n_head: int, p_drop: float):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d, n_head, dropout=p_drop, batch_first=True)
        self.multihead_attn = nn.MultiheadAttention(d, n_head, dropout=p_drop, batch_first=True)
        self.linear1, self.linear2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        self.dropout, self.dropout1, self.dropout2, self.dropout3 = (nn.Dropout(p_drop) for _ in range(4))

    def branch(self, kind: str, x: torch.Tensor, memory: torch.Tensor, mask, memory_mask) -> torch.Tensor:
        if kind == "sa":
            h = self.norm1(x)
            return self.dropout1(self.self_attn(h, h, h, attn_mask=mask, need_weights=False)[0])
        if kind == "ca":
            h = self.norm2(x)
            return self.dropout2(self.multihead_attn(h, memory, memory, attn_mask=memory_mask, need_weights=False)[0])
        return self.dropout3(self.linear2(self.dropout(F.gelu(self.linear1(self.norm3(x))))))


class TransformerForDiffusion(nn.Module):
    def __init__(self, input_dim: int, output_dim: int, horizon: int, n_obs_steps: int, cond_dim: int,
                 n_layer: int, n_head: int, n_emb: int, p_drop_emb: float = 0.0, p_drop_attn: float = 0.01,
                 causal_attn: bool = True):
        super().__init__()
        t_cond = 1 + n_obs_steps
        self.input_emb = nn.Linear(input_dim, n_emb)
        self.pos_emb = nn.Parameter(torch.zeros(1, horizon, n_emb))
        self.drop = nn.Dropout(p_drop_emb)
        self.time_emb = SinusoidalPosEmb(n_emb)
        self.cond_obs_emb = nn.Linear(cond_dim, n_emb)
        self.cond_pos_emb = nn.Parameter(torch.zeros(1, t_cond, n_emb))
        self.encoder = nn.Sequential(nn.Linear(n_emb, 4 * n_emb), nn.Mish(), nn.Linear(4 * n_emb, n_emb))
        self.layers = nn.ModuleList(DecoderLayer(n_emb, n_head, p_drop_attn) for _ in range(n_layer))
        if causal_attn:
            mask = torch.triu(torch.ones(horizon, horizon, dtype=torch.bool), 1)  # True = not allowed
            t, s = torch.meshgrid(torch.arange(horizon), torch.arange(t_cond), indexing="ij")
            memory_mask = ~(t >= (s - 1))  # time is the first condition token
            self.register_buffer("mask", torch.zeros(horizon, horizon).masked_fill(mask, float("-inf")))
            self.register_buffer("memory_mask", torch.zeros(horizon, t_cond).masked_fill(memory_mask, float("-inf")))
        else:
            self.mask = self.memory_mask = None
        self.executed = 0   # blocks computed so far (the deterministic clock of cache.wallclock)
        self.ln_f = nn.LayerNorm(n_emb)
        self.head = nn.Linear(n_emb, output_dim)
        self.apply(self._init_weights)
        nn.init.normal_(self.pos_emb, 0.0, 0.02)
        nn.init.normal_(self.cond_pos_emb, 0.0, 0.02)

    @staticmethod
    def _init_weights(m):  # the official _init_weights
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0.0, 0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.MultiheadAttention):
            for w in (m.in_proj_weight, m.q_proj_weight, m.k_proj_weight, m.v_proj_weight):
                if w is not None:
                    nn.init.normal_(w, 0.0, 0.02)
            for b in (m.in_proj_bias, m.bias_k, m.bias_v):
                if b is not None:
                    nn.init.zeros_(b)
        elif isinstance(m, nn.LayerNorm):
            nn.init.zeros_(m.bias)
            nn.init.ones_(m.weight)

    @property
    def blocks(self) -> list[tuple[int, str]]:
        return [(i, k) for i in range(len(self.layers)) for k in KINDS]

    def embed(self, sample, timestep, cond):
        """The parts every step computes: the condition memory and the action tokens."""
        if not torch.is_tensor(timestep):
            timestep = torch.tensor([timestep], device=sample.device)
        timestep = timestep.expand(sample.shape[0])
        c = torch.cat([self.time_emb(timestep)[:, None], self.cond_obs_emb(cond)], 1)
        memory = self.encoder(self.drop(c + self.cond_pos_emb[:, : c.shape[1]]))
        x = self.drop(self.input_emb(sample) + self.pos_emb[:, : sample.shape[1]])
        return x, memory

    def forward(self, sample, timestep, cond, update=None, cache=None, record=None):
        """update: {block: bool} (None = compute every block); cache: {block: tensor}, read where a
        block is not updated and written where it is; record: {block: list} gets the outputs of the blocks it names."""
        x, memory = self.embed(sample, timestep, cond)
        for i, layer in enumerate(self.layers):
            for kind in KINDS:
                block = (i, kind)
                if update is None or update[block]:
                    out = layer.branch(kind, x, memory, self.mask, self.memory_mask)
                    self.executed += 1
                    if cache is not None:
                        cache[block] = out
                else:
                    out = cache[block]
                if record is not None and block in record:
                    record[block].append(out)
                x = x + out
        return self.head(self.ln_f(x))


def build(cfg: dict) -> TransformerForDiffusion:
    m, d = cfg["model"], cfg["data"]["pusht"]
    return TransformerForDiffusion(input_dim=d["action_dim"], output_dim=d["action_dim"], horizon=m["horizon"],
                                   n_obs_steps=m["n_obs_steps"], cond_dim=d["obs_dim"], n_layer=m["n_layer"],
                                   n_head=m["n_head"], n_emb=m["n_emb"], p_drop_emb=m["p_drop_emb"],
                                   p_drop_attn=m["p_drop_attn"], causal_attn=m["causal_attn"])


def optim_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """The official get_optim_groups: decay on Linear and attention weights only."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        leaf = name.rsplit(".", 1)[-1]
        (decay if leaf.endswith("weight") and ".norm" not in name and "ln_f" not in name else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def scheduler(cfg: dict):
    """diffusers' DDPMScheduler with the official DP-T settings (config `noise_scheduler`)."""
    from diffusers import DDPMScheduler

    return DDPMScheduler(**cfg["noise_scheduler"])


class Normalizer:
    """The official LinearNormalizer in 'limits' mode: each dimension's min-max to [-1, 1]."""

    def __init__(self, lo: torch.Tensor, hi: torch.Tensor):
        span = torch.where(hi - lo < 1e-4, torch.full_like(hi, 2.0), hi - lo)
        self.scale, self.offset = 2.0 / span, -1.0 - 2.0 * lo / span

    @classmethod
    def fit(cls, x: torch.Tensor) -> Normalizer:
        return cls(x.amin(0), x.amax(0))

    def __call__(self, x):
        return x * self.scale + self.offset

    def inverse(self, y):
        return (y - self.offset) / self.scale

    def state(self) -> dict:
        return {"scale": self.scale, "offset": self.offset}

    @classmethod
    def from_state(cls, s: dict) -> Normalizer:
        out = cls.__new__(cls)
        out.scale, out.offset = s["scale"], s["offset"]
        return out
