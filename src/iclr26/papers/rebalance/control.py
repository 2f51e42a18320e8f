"""ReBalance's calibration and dynamic control (card 03, section 2, read from the official code
`hidden_analysis_auto.py` and `modeling_qwen2_dynamic_3D.py`). numpy only.

Phase A/B (calibration on a small seen set):
    step confidence      c_t = exp(mean log max-prob over the step's tokens) (= exp mean log p of the
                         greedy tokens, as shipped; also when the pass samples)
    labels               positive: reflection cue OR c_t < q25;  negative: no cue AND c_t > q75
    steering vector      v = mean(h | pos) - mean(h | neg)   (h: layer-l state at a step's first token)
    magnitudes           diagonal LDA along v (official formula, see lda_magnitudes): low_val_1 =
                         -(push that moves the positive mean past t), low_val_2 = -(every positive)
    quartiles            q25c, q75c of every step's c_t (also the label thresholds); q25v, q75v of
                         v_t = (c_t - c_{t-1})^2 / 4 between consecutive steps of a trace
Phase C (online, at each step boundary inside the thinking span), with c = mean max-prob of the
step just finished and var = (c - c_prev)^2 / 4 (0 for the first step), as the modeling code does:
    F(c) = a + b tanh(k (c - m)), m = (q25c + q75c)/2, s = (q75c - q25c)/2,
           a = low_val_1/2, b = -low_val_1 / (2 tanh(k s)), so F(q25c) = low_val_1 and F(q75c) = 0;
           k by bisection so that F(1) = 0.01 (build_F)
    w_low  = sig(1200 (q25c - c)/IQR_c) sig(1200 (var - q75v)/IQR_v) / (1/4)         unsure, unstable
    w_high = sig(1200 (c - q75c)/IQR_c) sig(1200 (q25v - var)/IQR_v) / gm            sure, stable
           gm = sig(12 (1 - q75c)/IQR_c) / 2; both capped at 1
    alpha = F(c) + (low_val_2 - F(q25c)) w_low + (high_val_2 - F(1)) w_high,
            clamped to [min(low_val_1, low_val_2), max(0.01, high_val_2)]
"""
from __future__ import annotations

import math

import numpy as np

STEERED = ("static_steering", "rebalance")   # the arms that shift the hidden state


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


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, x))))


class Controller:
    """alpha(c, var) of Phase C from the calibration numbers (modeling_qwen2_dynamic_3D.py)."""

    def __init__(self, cal: dict, slope: float = 1200.0, high_val_2: float = 0.1, tau: float = 0.01):
        self.q25c, self.q75c, self.q25v, self.q75v = cal["q25c"], cal["q75c"], cal["q25v"], cal["q75v"]
        self.low1, self.low2, self.high2, self.slope = cal["low_val_1"], cal["low_val_2"], high_val_2, slope
        self.iqr_c = max(self.q75c - self.q25c, 1e-12)
        self.iqr_v = max(self.q75v - self.q25v, 1e-12)
        self.m, self.s = (self.q25c + self.q75c) / 2, max((self.q75c - self.q25c) / 2, 1e-12)
        self.k = self._fit_k(tau)
        self.gm = _sigmoid(12.0 * (1.0 - self.q75c) / self.iqr_c) * 0.5

    def _fit_k(self, tau: float) -> float:
        """The k with F(1) = tau: F(1) falls from its k -> 0 limit to 0 as k grows, so bisect on log k;
        when tau is out of reach (low_val_1 >= 0, or q75c near 1) the nearest end is kept."""
        lo, hi = math.log(1e-3 / self.s), math.log(1e4 / self.s)
        if self._f(1.0, math.exp(lo)) <= tau:
            return math.exp(lo)
        if self._f(1.0, math.exp(hi)) >= tau:
            return math.exp(hi)
        for _ in range(200):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if self._f(1.0, math.exp(mid)) > tau else (lo, mid)
        return math.exp((lo + hi) / 2)

    def _f(self, c: float, k: float) -> float:
        a, b = self.low1 / 2, -self.low1 / (2 * math.tanh(k * self.s))
        return a + b * math.tanh(k * (min(max(c, 0.0), 1.0) - self.m))

    def baseline(self, c: float) -> float:
        return self._f(c, self.k)

    def _sig(self, x: float) -> float:
        return _sigmoid(self.slope * x)

    def alpha(self, c: float, var: float) -> float:
        w_low = min(1.0, self._sig((self.q25c - c) / self.iqr_c) * self._sig((var - self.q75v) / self.iqr_v) / 0.25)
        w_high = min(1.0, self._sig((c - self.q75c) / self.iqr_c) * self._sig((self.q25v - var) / self.iqr_v) / self.gm)
        value = (self.baseline(c) + (self.low2 - self.baseline(self.q25c)) * w_low
                 + (self.high2 - self.baseline(1.0)) * w_high)
        return float(min(max(value, min(self.low1, self.low2)), max(0.01, self.high2)))


SHIPPED_LOW_VAL_1 = -1.19   # the shipped 7B default, whose high_val_2 = 0.1 is about 8% of the negative push


def high_val_2(cal: dict, method: dict) -> float:
    """The push toward reflection in the sure-and-stable corner: method.high_val_2 as configured, or, with
    `high_val_2_scale: low_val_1` (tiny/smoke, audit 03, M3), scaled by |low_val_1| / 1.19 so that it keeps
    the shipped ratio to the negative push (0.1 against the midpoint threshold's -1/2 would be 20%)."""
    value = float(method["high_val_2"])
    scale = method.get("high_val_2_scale", "fixed")
    if scale == "low_val_1":
        return value * abs(float(cal["low_val_1"])) / abs(SHIPPED_LOW_VAL_1)
    if scale != "fixed":
        raise ValueError(f"method.high_val_2_scale must be fixed or low_val_1, got {scale!r}")
    return value


def steering_rule(arm: str, cal: dict, method: dict) -> dict:
    """What a steering arm applies at a step boundary, from its seed's calibration: static_steering
    one fixed alpha (the strength prepare chose on the calibration set, `cal["static"]`, else
    low_val_1); rebalance the control function, whose slope k is fitted here."""
    if arm == "static_steering":
        return {"arm": arm, "alpha": cal["static"]["alpha"] if "static" in cal else cal["low_val_1"]}
    controller = Controller(cal, method["slope"], high_val_2(cal, method))
    return {"arm": arm, "k": controller.k, "high_val_2": controller.high2, "gm": controller.gm,
            "F_q25c": controller.baseline(controller.q25c),
            "F_1": controller.baseline(1.0), "alpha_min": min(controller.low1, controller.low2),
            "alpha_max": max(0.01, controller.high2)}
