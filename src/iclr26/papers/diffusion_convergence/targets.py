"""Closed-form laws of the forward (Ornstein-Uhlenbeck) process started from a mixture target.

Forward process (card §2.1): dX_t = -X_t dt + sqrt(2) dB_t, X_0 ~ p_data, so that
    X_t | X_0 ~ N(e^{-t} X_0, sigma_t^2 I),     sigma_t^2 = 1 - e^{-2t}.
For an isotropic Gaussian mixture p_data = sum_i w_i N(mu_i, s_i^2 I) (s_i = 0: Dirac atoms, the
paper's "no smoothness" regime) every marginal is again a mixture (card §6.1):
    p_t = sum_i w_i N(m_i(t), v_i(t) I),   m_i(t) = e^{-t} mu_i,   v_i(t) = e^{-2t} s_i^2 + sigma_t^2.
Its score and the Hessian of log p_t are ratios of Gaussian sums, computed here with log-sum-exp
responsibilities r_i(x) so that they stay finite for tiny t (p_t is then almost singular).

Points are arrays of shape (n, d); a 1-D grid is (n, 1).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def sigma2(t: float) -> float:
    """sigma_t^2 = 1 - e^{-2t}, written with expm1 so that it is accurate for t ~ 1e-6."""
    return -np.expm1(-2.0 * t)


@dataclass(frozen=True)
class Mixture:
    means: np.ndarray    # (K, d) atom locations mu_i
    weights: np.ndarray  # (K,)   w_i, summing to 1
    widths: np.ndarray   # (K,)   s_i, isotropic std of each component at t = 0 (0 = Dirac)

    @classmethod
    def from_spec(cls, spec: dict) -> "Mixture":
        means = np.atleast_2d(np.asarray(spec["atoms"], dtype=float))
        if means.shape[0] == 1 and len(spec["weights"]) > 1:  # 1-D atoms given as a flat list
            means = means.T
        weights = np.asarray(spec["weights"], dtype=float)
        widths = np.asarray(spec.get("widths") or [0.0] * len(weights), dtype=float)
        if not np.isclose(weights.sum(), 1.0) or (weights <= 0).any():
            raise ValueError(f"mixture weights must be positive and sum to 1, got {weights.tolist()}")
        if not (len(weights) == len(means) == len(widths)):
            raise ValueError("mixture spec: atoms, weights and widths must have the same length")
        return cls(means=means, weights=weights, widths=widths)

    @property
    def dim(self) -> int:
        return self.means.shape[1]

    # -- marginal parameters at forward time t
    def components(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        m = np.exp(-t) * self.means                                  # (K, d)
        v = np.exp(-2.0 * t) * self.widths**2 + sigma2(t)            # (K,)
        return m, v

    def _log_components(self, t: float, x: np.ndarray):
        """log(w_i N(x; m_i, v_i I)) for every point and component, and g_i = (m_i - x)/v_i."""
        m, v = self.components(t)
        diff = m[None, :, :] - x[:, None, :]                         # (n, K, d)
        sq = np.einsum("nkd,nkd->nk", diff, diff)
        log_terms = np.log(self.weights) - 0.5 * sq / v - 0.5 * self.dim * np.log(2 * np.pi * v)
        return log_terms, diff / v[None, :, None]

    def evaluate(self, t: float, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """log p_t(x), the score s(t,x) = grad log p_t = sum_i r_i g_i, and its Jacobian (the Hessian
        of log p_t)  H = sum_i r_i (g_i g_i^T - I / v_i) - s s^T,  in one pass.

        (The x-derivative of r_i is r_i (g_i - s), which gives the covariance-of-g term.)
        """
        log_terms, g = self._log_components(t, x)
        top = log_terms.max(axis=1, keepdims=True)
        r = np.exp(log_terms - top)
        total = r.sum(axis=1, keepdims=True)
        r /= total                                                   # responsibilities (n, K)
        log_p = top[:, 0] + np.log(total[:, 0])
        _, v = self.components(t)
        s = np.einsum("nk,nkd->nd", r, g)
        hess = np.einsum("nk,nki,nkj->nij", r, g, g) - np.einsum("ni,nj->nij", s, s)
        hess -= (r @ (1.0 / v))[:, None, None] * np.eye(self.dim)
        return log_p, s, hess

    def log_p(self, t: float, x: np.ndarray) -> np.ndarray:
        log_terms, _ = self._log_components(t, x)
        top = log_terms.max(axis=1, keepdims=True)
        return top[:, 0] + np.log(np.exp(log_terms - top).sum(axis=1))

    def score(self, t: float, x: np.ndarray) -> np.ndarray:
        return self.evaluate(t, x)[1]

    def sample(self, t: float, size: int, rng: np.random.Generator) -> np.ndarray:
        """Exact draws of X_t (used by the Monte-Carlo Girsanov term and by tests)."""
        idx = rng.choice(len(self.weights), size=size, p=self.weights)
        x0 = self.means[idx] + self.widths[idx, None] * rng.standard_normal((size, self.dim))
        return np.exp(-t) * x0 + np.sqrt(sigma2(t)) * rng.standard_normal((size, self.dim))

    def sample_data(self, size: int, rng: np.random.Generator) -> np.ndarray:
        idx = rng.choice(len(self.weights), size=size, p=self.weights)
        return self.means[idx] + self.widths[idx, None] * rng.standard_normal((size, self.dim))


def triangle_spec(radius: float = 1.5, weights=(0.2, 0.3, 0.5)) -> dict:
    """Three atoms at the vertices of an equilateral triangle: a genuinely non-product 2-D law
    (card §4), with unequal weights so that no symmetry makes the errors cancel."""
    angles = np.pi / 2 + 2 * np.pi * np.arange(3) / 3
    atoms = np.stack([radius * np.cos(angles), radius * np.sin(angles)], axis=1)
    return {"atoms": atoms.round(12).tolist(), "weights": list(weights), "widths": [0.0, 0.0, 0.0]}
