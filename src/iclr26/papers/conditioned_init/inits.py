"""Initialisations of the attention projections W_Q, W_K, W_V (and W_O for mimetic).

Convention. An `nn.Linear` computes y = x A^T with weight A (out x in); the paper writes
attention with row vectors, softmax(X W_Q W_K^T X^T / sqrt(d_k)) X W_V, so W = A^T (in x out).
Head h owns columns h*k .. (h+1)*k of W_Q, W_K, W_V (rows of the Linear weights), k = head_dim.

Methods (the table rows):
  random       the architecture's default init, untouched (transformers ViT: N(0, 0.02^2)
               weights, zero biases; CLS and position embeddings truncated normal 0.02).
  xavier       Xavier/Glorot uniform on W_Q, W_K, W_V.
  mimetic      Trockman & Kolter (ICML 2023): per head W_Q^h W_K^h^T = best rank-k
               approximation of a1 Z1 + b1 I, and W_V W_O = a2 Z2 - b2 I over all heads,
               Z ~ N(0, 1/d), both factored by SVD (U sqrt(S), sqrt(S) V^T).
  conditioned  the paper (card 01, section 2): W_V = rectangular identity, W_Q and W_K random
               (semi-)orthogonal, so kappa(W_Q) = kappa(W_K) = kappa(W_V) = 1.
(The fifth row, weight_selection, sets every weight from a trained teacher: weight_selection.py.)
Everything else (patch embedding, MLP, norms, head, and W_O except under mimetic) keeps the
default init. Open choices the card leaves to us, fixed here: no gain on the orthogonal
matrices; Q/K/V biases (if the architecture has them) are zeroed by every non-default init, so
the projection is exactly the initialised matrix; W_O and its bias keep the default init under
`conditioned` (the recipe names only Q, K, V).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class Attention:
    """The four projections of one multi-head attention layer."""
    q: nn.Linear
    k: nn.Linear
    v: nn.Linear
    o: nn.Linear
    heads: int
    head_dim: int


def attention_layers(model: nn.Module) -> list[Attention]:
    """Every attention layer with separate q/k/v/o projections, in module order.

    Matches transformers' ViTAttention (q_proj, k_proj, v_proj, o_proj) and PlainAttention below.
    """
    found = []
    for module in model.modules():
        if all(hasattr(module, name) for name in ("q_proj", "k_proj", "v_proj", "o_proj")):
            found.append(Attention(module.q_proj, module.k_proj, module.v_proj, module.o_proj,
                                   module.num_attention_heads, module.head_dim))
    return found


class PlainAttention(nn.Module):
    """A plain multi-head self-attention block (no transformers), for the kappa metric and tests.

    Same parameterisation as transformers' ViTAttention: bias-free Q/K/V, output projection with
    bias, default init N(0, 0.02^2) like a transformers model built from config.
    """

    def __init__(self, dim: int, heads: int, std: float = 0.02):
        super().__init__()
        self.num_attention_heads, self.head_dim = heads, dim // heads
        self.q_proj, self.k_proj, self.v_proj = (nn.Linear(dim, dim, bias=False) for _ in range(3))
        self.o_proj = nn.Linear(dim, dim)
        for linear in (self.q_proj, self.k_proj, self.v_proj, self.o_proj):
            nn.init.normal_(linear.weight, std=std)
        nn.init.zeros_(self.o_proj.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from .jacobian import multi_head_attention

        w = [p.weight.T for p in (self.q_proj, self.k_proj, self.v_proj)]
        return self.o_proj(multi_head_attention(x, *w, self.num_attention_heads))


# ----------------------------------------------------------------------------- the initialisations
def _zero_qkv_biases(att: Attention) -> None:
    for linear in (att.q, att.k, att.v):
        if linear.bias is not None:
            nn.init.zeros_(linear.bias)


def xavier_(att: Attention) -> None:
    for linear in (att.q, att.k, att.v):
        nn.init.xavier_uniform_(linear.weight)
    _zero_qkv_biases(att)


def conditioned_(att: Attention) -> None:
    # orthogonal_ gives orthonormal rows or columns for a non-square matrix: kappa = 1 either way
    nn.init.orthogonal_(att.q.weight)
    nn.init.orthogonal_(att.k.weight)
    att.v.weight.copy_(torch.eye(*att.v.weight.shape))  # rectangular identity I_{d x d_v}
    _zero_qkv_biases(att)


def mimetic_factors(dim: int, alpha: float, beta: float,
                    sign: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Draw M = alpha Z + sign * beta I with Z ~ N(0, 1/dim); return (L, R, M) with L R = M.

    L = U sqrt(S), R = sqrt(S) V^T from the SVD M = U S V^T; L[:, :k] R[:k] is then the best
    rank-k approximation of M (Eckart-Young), which is what one head of width k can hold.
    """
    target = alpha * torch.randn(dim, dim) / math.sqrt(dim) + sign * beta * torch.eye(dim)
    u, s, vh = torch.linalg.svd(target)
    root = torch.sqrt(s)
    return u * root, root[:, None] * vh, target


def mimetic_(att: Attention, alpha_qk: float, beta_qk: float, alpha_vo: float, beta_vo: float) -> None:
    dim, k = att.q.weight.shape[1], att.head_dim
    for h in range(att.heads):  # one independent Z1 per head: W_Q^h W_K^h^T ~ a1 Z1 + b1 I
        left, right, _ = mimetic_factors(dim, alpha_qk, beta_qk, +1.0)
        rows = slice(h * k, (h + 1) * k)
        att.q.weight[rows] = left[:, :k].T            # W_Q^h = L[:, :k]
        att.k.weight[rows] = right[:k]                # W_K^h = R[:k]^T
    # W_V W_O = a2 Z2 - b2 I over all heads together: the map x -> x W_V W_O of the whole layer
    left, right, _ = mimetic_factors(dim, alpha_vo, beta_vo, -1.0)
    att.v.weight.copy_(left.T)                        # W_V = L
    att.o.weight.copy_(right.T)                       # W_O = R
    _zero_qkv_biases(att)


@torch.no_grad()
def initialise(model: nn.Module, method: str, params: dict | None = None) -> int:
    """Apply `method` to every attention layer of `model` (in place, global torch RNG).

    Returns the number of layers initialised. `random` leaves the default init untouched.
    """
    params = params or {}
    layers = attention_layers(model)
    if not layers:
        raise ValueError(f"no attention layer with q_proj/k_proj/v_proj/o_proj in {type(model).__name__}")
    for att in layers:
        if method == "random":
            continue
        if method == "xavier":
            xavier_(att)
        elif method == "conditioned":
            conditioned_(att)
        elif method == "mimetic":
            mimetic_(att, params["alpha_qk"], params["beta_qk"], params["alpha_vo"], params["beta_vo"])
        else:
            raise ValueError(f"unknown init method {method!r}")
    return len(layers)
