"""Condition number of the attention Jacobian with respect to (W_Q, W_K, W_V).

For one input X (n tokens x d) the multi-head attention output before the output projection is
    A(X) = [ softmax(X W_Q^h W_K^h^T X^T / sqrt(k)) X W_V^h ]_{h=1..H}       (n x H k)
(card 01, section 2). J = d vec A / d (vec W_Q, vec W_K, vec W_V) is (n H k) x (3 d H k), wide, and
    kappa(J) = sigma_max(J) / sigma_min(J)
over its n H k singular values (the card's eigenvalues of J J^T are their squares).

Head h's output depends only on head h's columns of W_Q, W_K, W_V, so J is block diagonal over
heads (up to a permutation of rows and columns) and its singular values are the union of the
heads' singular values: kappa(J) = max_h sigma_max(J_h) / min_h sigma_min(J_h). Computing per
head is exact and H^2 times smaller; `full_jacobian` is kept for the tests that check this.
Everything runs in float64: kappa reaches 1e5 at the default init.
"""
from __future__ import annotations

import math

import torch


def multi_head_attention(x: torch.Tensor, w_q: torch.Tensor, w_k: torch.Tensor, w_v: torch.Tensor,
                         heads: int) -> torch.Tensor:
    """A(X) for x (..., n, d) and W (d, H k): (..., n, H k), heads concatenated as in ViT."""
    *lead, n, _ = x.shape
    k = w_q.shape[1] // heads

    def split(m):  # (..., n, H k) -> (..., H, n, k)
        return m.reshape(*lead, n, heads, k).transpose(-3, -2)

    q, key, v = split(x @ w_q), split(x @ w_k), split(x @ w_v)
    weights = torch.softmax(q @ key.transpose(-1, -2) / math.sqrt(k), dim=-1)
    return (weights @ v).transpose(-3, -2).reshape(*lead, n, heads * k)


def _flat_jacobian(fn, params: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """Jacobian of vec(fn(*params)) w.r.t. (vec p for p in params), as one matrix."""
    parts = torch.func.jacrev(lambda *p: fn(*p).reshape(-1), argnums=tuple(range(len(params))))(*params)
    return torch.cat([part.reshape(part.shape[0], -1) for part in parts], dim=1)


def head_jacobian(x: torch.Tensor, w_q: torch.Tensor, w_k: torch.Tensor, w_v: torch.Tensor,
                  rows: int | None = None) -> torch.Tensor:
    """J_h for one head: x (n, d), W (d, k) -> (n k) x (3 d k); `rows` keeps the outputs of the first
    `rows` tokens only (all n tokens still enter the attention): a block of rows of the same J."""
    return _flat_jacobian(lambda q, k, v: multi_head_attention(x, q, k, v, 1)[:rows], (w_q, w_k, w_v))


def full_jacobian(x: torch.Tensor, w_q: torch.Tensor, w_k: torch.Tensor, w_v: torch.Tensor, heads: int) -> torch.Tensor:
    """J of all heads at once: (n H k) x (3 d H k). Only for checking the per-head shortcut."""
    return _flat_jacobian(lambda q, k, v: multi_head_attention(x, q, k, v, heads), (w_q, w_k, w_v))


def condition_number(singular_values: torch.Tensor) -> float:
    smallest = float(singular_values.min())
    return float(singular_values.max()) / smallest if smallest > 0 else math.inf


def attention_kappa(x: torch.Tensor, w_q: torch.Tensor, w_k: torch.Tensor, w_v: torch.Tensor, heads: int,
                    rows: int | None = None) -> float:
    """kappa(J) of multi-head attention at one input x (n, d); weights W (d, H k). `rows`: kappa of
    the block of J's rows that belong to the first `rows` output tokens (head_jacobian)."""
    x, w_q, w_k, w_v = (t.detach().to(torch.float64) for t in (x, w_q, w_k, w_v))
    k = w_q.shape[1] // heads
    sigmas = []
    for h in range(heads):
        cols = slice(h * k, (h + 1) * k)
        jac = head_jacobian(x, w_q[:, cols], w_k[:, cols], w_v[:, cols], rows)
        sigmas.append(wide_svdvals(jac))
    return condition_number(torch.cat(sigmas))


def wide_svdvals(jac: torch.Tensor) -> torch.Tensor:
    """Singular values of a wide matrix (m x n, m < n) through the R factor of J^T = QR (R is m x m,
    with the same singular values): ~4x faster than svdvals of J itself at tiny scale (272 x 3072),
    and as accurate (QR is backward stable: kappa agrees to ~1e-12 relative)."""
    if jac.shape[0] >= jac.shape[1]:
        return torch.linalg.svdvals(jac)
    return torch.linalg.svdvals(torch.linalg.qr(jac.T, mode="r")[1])


def matrix_kappa(weight: torch.Tensor) -> float:
    """kappa of one projection matrix, sigma_max / sigma_min (transpose-invariant)."""
    return condition_number(torch.linalg.svdvals(weight.detach().to(torch.float64)))


@torch.no_grad()
def first_layer_input(model, pixel_values: torch.Tensor) -> torch.Tensor:
    """What the first attention layer of a transformers ViT sees: LN(patch + position embeddings)."""
    embeddings = model.vit.embeddings(pixel_values)
    return model.vit.layers[0].layernorm_before(embeddings)


def first_layer_qkv(model) -> tuple[list[torch.Tensor], int]:
    """The first attention layer's (W_Q, W_K, W_V), each (d, H k), and its number of heads."""
    attention = model.vit.layers[0].attention
    return [p.weight.T for p in (attention.q_proj, attention.k_proj, attention.v_proj)], attention.num_attention_heads


def vit_first_layer_kappa(model, image: torch.Tensor, max_tokens: int | None = None) -> float:
    """kappa(J) of the first attention layer of a transformers ViT, on one image (3 x H x W).

    Every token of the image enters the attention. `max_tokens` keeps the rows of J of the first
    output tokens only (CLS first): a block of rows of the real layer's J, for full-scale models
    where J of all tokens is too large; null keeps every row (tiny scale).
    """
    x = first_layer_input(model, image[None])[0]
    weights, heads = first_layer_qkv(model)
    return attention_kappa(x, *weights, heads, rows=max_tokens or None)


def vit_first_layer_head_kappas(model) -> float:
    """max over heads h and over W in (W_Q^h, W_K^h, W_V^h) of kappa(W), the per-head projection
    blocks (d x k) of the first attention layer: 1 exactly when every block is (semi-)orthogonal,
    the property the conditioned init sets and the paper's bound on kappa(J) is built from."""
    weights, heads = first_layer_qkv(model)
    k = weights[0].shape[1] // heads
    return max(matrix_kappa(w[:, h * k:(h + 1) * k]) for w in weights for h in range(heads))
