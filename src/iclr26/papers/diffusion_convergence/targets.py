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
    def from_spec(cls, spec: dict) -> Mixture:
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

    def _coordinates(self, t: float, x: np.ndarray):
        """Per coordinate j, the (K, n) array g_ij = (m_ij - x_j) / v_i, and log(w_i N(x; m_i, v_i I)).

        Components sit on the leading axis and coordinates in a Python list: numpy reduces a short
        leading axis much faster than a short trailing one, and this is the hot path of the grid
        propagation (d is 1 or 2 there)."""
        m, v = self.components(t)
        g = [(m[:, j, None] - x[None, :, j]) / v[:, None] for j in range(self.dim)]
        sq = sum(gj * gj for gj in g)
        const = np.log(self.weights) - 0.5 * self.dim * np.log(2 * np.pi * v)
        return g, const[:, None] - 0.5 * v[:, None] * sq, v

    def evaluate(self, t: float, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """log p_t(x), the score s(t,x) = grad log p_t(x), and its Jacobian H (the Hessian of log p_t).

        With g_i = (m_i - x) / v_i and responsibilities r_i(x) = w_i N(x; m_i, v_i I) / p_t(x):
            s = sum_i r_i g_i,      H = sum_i r_i (g_i g_i^T - I / v_i) - s s^T
        (the x-derivative of r_i is r_i (g_i - s), which gives the covariance-of-g term).
        """
        g, log_terms, v = self._coordinates(t, x)
        top = log_terms.max(axis=0)
        r = np.exp(log_terms - top)
        total = r.sum(axis=0)
        r /= total                                                   # (K, n)
        s = [(r * gj).sum(axis=0) for gj in g]
        diag = r.T @ (1.0 / v)
        hess = np.empty((len(x), self.dim, self.dim))
        for i in range(self.dim):
            for j in range(i + 1):
                hess[:, i, j] = hess[:, j, i] = (r * g[i] * g[j]).sum(axis=0) - s[i] * s[j] - (diag if i == j else 0.0)
        return top + np.log(total), np.stack(s, axis=1), hess

    def log_p(self, t: float, x: np.ndarray) -> np.ndarray:
        _, log_terms, _ = self._coordinates(t, x)
        top = log_terms.max(axis=0)
        return top + np.log(np.exp(log_terms - top).sum(axis=0))

    def score(self, t: float, x: np.ndarray) -> np.ndarray:
        """s(t, x) alone (the Monte-Carlo Girsanov term needs no Hessian)."""
        g, log_terms, _ = self._coordinates(t, x)
        r = np.exp(log_terms - log_terms.max(axis=0))
        r /= r.sum(axis=0)
        return np.stack([(r * gj).sum(axis=0) for gj in g], axis=1)

    # -- 1-D only: both tails of the CDF, and the exact probability-flow map
    def log_tails(self, t: float, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """log P(X_t <= x), log P(X_t > x) and log p_t(x) of a 1-D mixture at the points x (shape (n,)).
        Each tail is accurate in its own tail (log_ndtr), so that far quantiles are still resolved."""
        from scipy.special import log_ndtr

        if self.dim != 1:
            raise ValueError("log_tails is for 1-D mixtures")
        m, v = self.components(t)
        z = (np.asarray(x, float)[None, :] - m[:, 0, None]) / np.sqrt(v)[:, None]
        log_w = np.log(self.weights)[:, None]

        def log_sum(terms):  # log-sum-exp over the components (axis 0)
            top = terms.max(axis=0)
            return top + np.log(np.exp(terms - top).sum(axis=0))

        log_density = log_w - 0.5 * np.log(2 * np.pi * v)[:, None] - 0.5 * z * z
        return log_sum(log_w + log_ndtr(z)), log_sum(log_w + log_ndtr(-z)), log_sum(log_density)

    def flow_map(self, t_from: float, t_to: float, y: np.ndarray, x0: np.ndarray | None = None,
                 tol: float = 1e-14, max_iter: int = 200) -> np.ndarray:
        """The exact probability-flow ODE map X_{t_from} = y  ->  X_{t_to} (1-D).

        In 1-D the trajectories of the probability-flow ODE do not cross and carry p_{t_from} to
        p_{t_to}, so the flow is the monotone rearrangement  Phi = CDF_{t_to}^{-1} o CDF_{t_from}.
        Solved per point by Newton's method on the log of the smaller tail (lower tail where
        CDF_{t_from}(y) <= 1/2, upper tail otherwise), safeguarded by bisection inside a bracket;
        x0 is the starting guess (e.g. a sampler's step, which is close to Phi). A point is done when
        its step is below tol (relative) or its tail matches to rounding (between far-apart atoms the
        CDF is flat to machine precision: there Phi is as determined as the data allow, and p_t ~ 0)."""
        y = np.asarray(y, float)
        low_from, up_from, _ = self.log_tails(t_from, y)
        lower = low_from <= up_from
        goal = np.where(lower, low_from, up_from)
        sign = np.where(lower, 1.0, -1.0)
        rounding = 8 * np.finfo(float).eps * (1.0 + np.abs(goal))

        def excess(x):  # increasing in x, zero at Phi(y); and log of its slope, p_{t_to} / tail
            low, up, log_p = self.log_tails(t_to, x)
            tail = np.where(lower, low, up)
            return sign * (tail - goal), log_p - tail

        x = (np.exp(t_from - t_to) * y if x0 is None else np.asarray(x0, float)).copy()
        lo, hi, width = x - 1.0, x + 1.0, np.ones_like(x)
        for _ in range(100):  # widen the bracket until it holds the root
            bad_lo, bad_hi = excess(lo)[0] > 0, excess(hi)[0] < 0
            if not (bad_lo.any() or bad_hi.any()):
                break
            width = np.where(bad_lo | bad_hi, 2.0 * width, width)
            lo, hi = np.where(bad_lo, lo - width, lo), np.where(bad_hi, hi + width, hi)
        else:
            raise RuntimeError("flow_map: no bracket found")
        for _ in range(max_iter):
            g, log_slope = excess(x)
            lo, hi = np.where(g < 0, x, lo), np.where(g > 0, x, hi)
            with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
                newton = x - g / np.exp(log_slope)
            inside = np.isfinite(newton) & (newton > lo) & (newton < hi)
            new = np.where(inside, newton, 0.5 * (lo + hi))
            done = (np.abs(new - x) <= tol * (1.0 + np.abs(x))) | (np.abs(g) <= rounding)
            x = np.where(np.abs(g) <= rounding, x, new)
            if done.all():
                return x
        raise RuntimeError(f"flow_map: Newton did not converge ({int((~done).sum())} points)")

    def sample(self, t: float, size: int, rng: np.random.Generator) -> np.ndarray:
        """Exact draws of X_t (used by the Monte-Carlo Girsanov term and by tests)."""
        idx = rng.choice(len(self.weights), size=size, p=self.weights)
        x0 = self.means[idx] + self.widths[idx, None] * rng.standard_normal((size, self.dim))
        return np.exp(-t) * x0 + np.sqrt(sigma2(t)) * rng.standard_normal((size, self.dim))


def triangle_spec(radius: float = 1.5, weights=(0.2, 0.3, 0.5)) -> dict:
    """Three atoms at the vertices of an equilateral triangle: a genuinely non-product 2-D law
    (card §4), with unequal weights so that no symmetry makes the errors cancel."""
    angles = np.pi / 2 + 2 * np.pi * np.arange(3) / 3
    atoms = np.stack([radius * np.cos(angles), radius * np.sin(angles)], axis=1)
    return {"atoms": atoms.round(12).tolist(), "weights": list(weights), "widths": [0.0, 0.0, 0.0]}


def target_spec(data_cfg: dict) -> dict:
    """The target law of one dataset slot as data (what acquire writes). 'mixture': atoms, weights
    and widths as given (tiny: the card's 1-D Dirac mixture w = (0.3, 0.7), mu = (-1, 1.5));
    'triangle': three atoms on a triangle (2-D). Validated by building the Mixture."""
    if data_cfg["kind"] == "mixture":
        spec = {"atoms": data_cfg["atoms"], "weights": data_cfg["weights"], "widths": data_cfg.get("widths")}
    elif data_cfg["kind"] == "triangle":
        spec = triangle_spec(data_cfg["radius"], tuple(data_cfg["weights"]))
    else:
        raise ValueError(f"data kind {data_cfg['kind']!r}: expected 'mixture' or 'triangle'")
    target = Mixture.from_spec(spec)
    return {"atoms": target.means.tolist(), "weights": target.weights.tolist(),
            "widths": target.widths.tolist(), "dim": target.dim}
