"""ReBalance's calibration and dynamic control (card 03, section 2, read from the official code
`hidden_analysis_auto.py` and `modeling_qwen2_dynamic_3D.py`). numpy only.

Phase A/B (calibration on a small seen set):
    step confidence      c_t = exp(mean log p of the step's sampled tokens)
    labels               positive: reflection cue OR c_t < q25;  negative: no cue AND c_t > q75
    steering vector      v = mean(h | pos) - mean(h | neg)   (h: layer-l state at a step's first token)
    magnitudes           diagonal LDA along v (official formula, see lda_magnitudes): low_val_1 =
                         -(push that moves the positive mean past t), low_val_2 = -(every positive)
    variance proxy       v_t = (c_t - c_{t-1})^2 / 4, quantiles q25v, q75v
Phase C (online, at each step boundary inside the thinking span), with c = mean max-prob of the
step just finished:
    F(c) = a + b tanh(k (c - m)), m = (q25c + q75c)/2, F(q25c) = low_val_1, F(1) = 0.01
    w_low  = sig(s (q25c - c)/IQR_c) sig(s (var - q75v)/IQR_v)   overthinking: unsure and unstable
    w_high = sig(s (c - q75c)/IQR_c) sig(s (q25v - var)/IQR_v)   underthinking: sure and stable
    (each divided by its value at the calibration corner, 1/4, and capped at 1; s = 1200)
    alpha = F(c) + (low_val_2 - F(q25c)) w_low + (high_val_2 - F(1)) w_high,
            clamped to [min(low_val_1, low_val_2), max(0.01, high_val_2)]
"""
from __future__ import annotations

import math

import numpy as np


def step_confidence(logprobs) -> float:
    return float(math.exp(np.mean(logprobs)))


def variance_proxy(c: float, c_prev: float | None) -> float:
    return 0.0 if c_prev is None else (c - c_prev) ** 2 / 4.0


def labels(confidences: np.ndarray, has_cue: np.ndarray, reference=None) -> tuple[np.ndarray, np.ndarray, float, float]:
    """Mixed labels; the quartiles come from `reference` (every step's confidence, as the official
    compute_confidence_quartiles scans them all) or from `confidences` themselves."""
    q25, q75 = np.quantile(confidences if reference is None else reference, [0.25, 0.75])
    positive = has_cue | (confidences < q25)
    negative = ~has_cue & (confidences > q75)
    return positive, negative, float(q25), float(q75)


def steering_vector(hidden: np.ndarray, positive: np.ndarray, negative: np.ndarray) -> np.ndarray:
    return hidden[positive].mean(0) - hidden[negative].mean(0)


def lda_magnitudes(hidden: np.ndarray, positive: np.ndarray, negative: np.ndarray, v: np.ndarray,
                   threshold: str = "official") -> tuple[float, float]:
    """(low_val_1, low_val_2) as the official compute_lda_separator_and_steer computes them
    (hidden_analysis_auto.py): diagonal LDA w = (mu1 - mu0) / (var1 + var0), threshold
    t = -(w.mu1 + w.mu0) / 2, and the pushes along -v, in units of v, that move the positive mean
    (alpha_mean_S) and every positive (alpha_all_S) past t:
        alpha_mean = max(w.mu1 - t, 0) / (w.v),   alpha_all = max_i (w.h_i - t) / (w.v)
    returned negated (alpha < 0 prunes reflection). As written there, t is minus the midpoint of the
    two projections (a sign slip, it seems: the boundary then need not lie between the classes), so
    the magnitudes depend on where the states sit; `threshold="official"` keeps it, as the shipped
    defaults were computed; `"midpoint"` uses t = +(w.mu1 + w.mu0) / 2 (alpha_mean is then 1/2)."""
    pos, neg = hidden[positive].astype(np.float64), hidden[negative].astype(np.float64)
    w = (pos.mean(0) - neg.mean(0)) / (pos.var(0) + neg.var(0) + 1e-12)
    m1, m0 = float(pos.mean(0) @ w), float(neg.mean(0) @ w)
    if threshold not in ("official", "midpoint"):
        raise ValueError(f"threshold must be official or midpoint, got {threshold!r}")
    t = (-0.5 if threshold == "official" else 0.5) * (m1 + m0)
    scale = float(w @ v)
    if scale <= 0:
        raise ValueError("the LDA direction and the steering vector point apart; no push along -v crosses")
    return -max(m1 - t, 0.0) / scale, -float((pos @ w - t).max()) / scale


class Controller:
    """alpha(c, var) of Phase C from the calibration numbers."""

    def __init__(self, cal: dict, slope: float = 1200.0, high_val_2: float = 0.1, k_iqr: float = 2.0):
        self.q25c, self.q75c, self.q25v, self.q75v = cal["q25c"], cal["q75c"], cal["q25v"], cal["q75v"]
        self.low1, self.low2, self.high2, self.slope = cal["low_val_1"], cal["low_val_2"], high_val_2, slope
        self.iqr_c = max(self.q75c - self.q25c, 1e-6)
        self.iqr_v = max(self.q75v - self.q25v, 1e-9)
        self.m = (self.q25c + self.q75c) / 2
        # k is not pinned by the two conditions; we fix it so the tanh turns over one IQR (k = 2/IQR_c)
        self.k = k_iqr / self.iqr_c
        t_low, t_one = math.tanh(self.k * (self.q25c - self.m)), math.tanh(self.k * (1.0 - self.m))
        self.b = (0.01 - self.low1) / (t_one - t_low)          # F(1) = 0.01, F(q25c) = low_val_1
        self.a = self.low1 - self.b * t_low

    def baseline(self, c: float) -> float:
        return self.a + self.b * math.tanh(self.k * (c - self.m))

    def _sig(self, x: float) -> float:
        return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, self.slope * x))))

    def alpha(self, c: float, var: float) -> float:
        w_low = min(1.0, 4 * self._sig((self.q25c - c) / self.iqr_c) * self._sig((var - self.q75v) / self.iqr_v))
        w_high = min(1.0, 4 * self._sig((c - self.q75c) / self.iqr_c) * self._sig((self.q25v - var) / self.iqr_v))
        value = (self.baseline(c) + (self.low2 - self.baseline(self.q25c)) * w_low
                 + (self.high2 - self.baseline(1.0)) * w_high)
        return float(min(max(value, min(self.low1, self.low2)), max(0.01, self.high2)))
