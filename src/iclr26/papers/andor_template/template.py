"""The AND-OR template: a maximum-entropy log-linear model against a reference distribution q,
learned by EM with greedy block pursuit, scored by its log-likelihood gain, expanded by new OR branches
from unlabelled good layouts, and read out as prescriptions (card 05, section 2; Si & Zhu, TPAMI 2013).

Written by hand: no maintained library implements AND-OR template pursuit. Equations (card 2):
  p(I) = q(I) prod_j exp(lambda_j h_j(I)) / Z_j                       (one OR branch = one AND node)
  lambda_j = log[p_j (1 - q_j) / (q_j (1 - p_j))],  Z_j = 1 - q_j + q_j e^lambda_j
  gain_j = KL(Bern(p_j) || Bern(q_j))                                  (block pursuit picks the largest)
  S(I) = sum_j [lambda_j h_j(I) - log Z_j]                             (consistency score, per branch)
  S_OR(I) = max over branches;  e_j(I) = lambda_j h_j(I) - log Z_j     (term-level evidence)
Features are binary part-geometry terminals on a bins x bins grid: the main and secondary parts'
positions, the horizon height, and the secondary-minus-main offset (relation). A selected feature
inhibits its grid neighbours in the same block (local mutual exclusivity).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sklearn.cluster import KMeans

BLOCKS = ("main", "secondary", "horizon", "relation")


@dataclass
class Dictionary:
    bins: int
    block: np.ndarray    # (F,) block index of every feature
    cell: np.ndarray     # (F, 2) grid cell (col, row); horizon: (0, row)

    @classmethod
    def make(cls, bins: int) -> Dictionary:
        block, cell = [], []
        for b, name in enumerate(BLOCKS):
            cols = 1 if name == "horizon" else bins
            for r in range(bins):
                for c in range(cols):
                    block.append(b)
                    cell.append((c, r))
        return cls(bins, np.array(block), np.array(cell))

    def features(self, g: np.ndarray) -> np.ndarray:
        """Binary features (n, F) of geometries g (n, 5): main cx, cy, secondary cx, cy, horizon y."""
        b = self.bins

        def idx(v, lo=0.0, hi=1.0):
            return np.clip(((v - lo) / (hi - lo) * b).astype(int), 0, b - 1)

        n = len(g)
        cols = [idx(g[:, 1]) * b + idx(g[:, 0]), b * b + idx(g[:, 3]) * b + idx(g[:, 2]),
                2 * b * b + idx(g[:, 4]),
                2 * b * b + b + idx(g[:, 3] - g[:, 1], -1, 1) * b + idx(g[:, 2] - g[:, 0], -1, 1)]
        h = np.zeros((n, len(self.block)), np.float64)
        for c in cols:
            h[np.arange(n), c] = 1.0
        return h

    def neighbours(self, j: int) -> np.ndarray:
        same = self.block == self.block[j]
        return np.flatnonzero(same & (np.abs(self.cell - self.cell[j]).max(1) <= 1))

    def centre(self, j: int) -> tuple[str, float, float]:
        """The feature's block and its bin centre (x, y) in that block's coordinates."""
        c, r = self.cell[j]
        name = BLOCKS[self.block[j]]
        if name == "relation":
            return name, -1 + (c + 0.5) * 2 / self.bins, -1 + (r + 0.5) * 2 / self.bins
        return name, (c + 0.5) / self.bins, (r + 0.5) / self.bins


def reference_q(dictionary: Dictionary, n: int, seed: int, eps: float) -> np.ndarray:
    """q_j: feature frequencies under the reference (uniform random layouts)."""
    g = np.random.default_rng(seed).uniform(0, 1, (n, 5))
    return np.clip(dictionary.features(g).mean(0), eps, 1 - eps)


def bern_kl(p, q):
    return p * np.log(p / q) + (1 - p) * np.log((1 - p) / (1 - q))


@dataclass
class Branch:
    selected: np.ndarray   # feature indices
    lam: np.ndarray
    log_z: np.ndarray
    gains: np.ndarray

    def score(self, h: np.ndarray) -> np.ndarray:
        return h[:, self.selected] @ self.lam - self.log_z.sum()

    @property
    def gain(self) -> float:
        return float(self.gains.sum())


def pursue(h: np.ndarray, q: np.ndarray, dictionary: Dictionary, tau: float, max_features: int,
           eps: float) -> Branch:
    """Greedy block pursuit on the images h of one branch: add the largest-gain feature not inhibited,
    until gain < tau or max_features; each pick inhibits its grid neighbours in its block."""
    p = np.clip(h.mean(0), eps, 1 - eps)
    gains = bern_kl(p, q)
    allowed = np.ones(len(q), bool)
    sel = []
    while len(sel) < max_features:
        cand = np.where(allowed, gains, -np.inf)
        j = int(np.argmax(cand))
        if cand[j] < tau:
            break
        sel.append(j)
        allowed[dictionary.neighbours(j)] = False
    sel = np.array(sel, int)
    lam = np.log(p[sel] * (1 - q[sel]) / (q[sel] * (1 - p[sel])))
    return Branch(sel, lam, np.log(1 - q[sel] + q[sel] * np.exp(lam)), gains[sel])


@dataclass
class Template:
    branches: list[Branch]

    def scores(self, h: np.ndarray) -> np.ndarray:
        return np.stack([b.score(h) for b in self.branches], 1)

    def score(self, h: np.ndarray) -> np.ndarray:
        return self.scores(h).max(1)

    def parse(self, h: np.ndarray) -> np.ndarray:
        return self.scores(h).argmax(1)

    @property
    def n_params(self) -> int:   # lambda_j and Z_j of every selected term
        return int(sum(2 * len(b.selected) for b in self.branches))


def em(h: np.ndarray, q: np.ndarray, dictionary: Dictionary, cfg: dict, seed: int,
       init: list[Branch] | None = None, k: int | None = None) -> Template:
    """Penalised EM: E-step = parse (best branch), M-step = pursuit per branch; init by k-means on the
    features (or from given branches); branches left with fewer than min_branch images are dropped."""
    if init is None:
        k = min(k or cfg["branches"], len(h))
        labels = KMeans(k, n_init=3, random_state=seed).fit_predict(h)
    else:
        labels = Template(init).parse(h)
    tpl = None
    for _ in range(cfg["em_iters"]):
        groups = [h[labels == c] for c in np.unique(labels)]
        groups = [g for g in groups if len(g) >= cfg["min_branch"]] or [h]
        tpl = Template([pursue(g, q, dictionary, cfg["tau"], cfg["max_features"], cfg["eps"]) for g in groups])
        new = tpl.parse(h)
        if np.array_equal(new, labels):
            break
        labels = new
    return tpl


def expand(tpl: Template, h_good: np.ndarray, h_pool: np.ndarray, q: np.ndarray, dictionary: Dictionary,
           cfg: dict, seed: int) -> tuple[Template, int]:
    """Semi-supervised structural expansion: pool images whose matching gain (best-branch score) is
    below the `match_percentile` of the labelled good images' scores are candidates; if there are at
    least `min_candidates` and their one-branch template's gain is at least `gain_ratio` x the mean
    branch gain (structural consistency), a new OR branch is added and EM refines all branches on the
    labelled good and pool images. Repeated up to `max_new` times. Returns (template, branches added)."""
    ex = cfg["expansion"]
    added = 0
    for _ in range(ex["max_new"]):
        threshold = np.percentile(tpl.score(h_good), ex["match_percentile"])
        cand = h_pool[tpl.score(h_pool) < threshold]
        if len(cand) < ex["min_candidates"]:
            break
        new = pursue(cand, q, dictionary, cfg["tau"], cfg["max_features"], cfg["eps"])
        if new.gain < ex["gain_ratio"] * np.mean([b.gain for b in tpl.branches]):
            break
        tpl = em(np.concatenate([h_good, h_pool]), q, dictionary, cfg, seed, init=[*tpl.branches, new])
        added += 1
    return tpl, added


def prescribe(tpl: Template, h: np.ndarray, dictionary: Dictionary) -> list[int | None]:
    """Evidence to prescription: per image, the missing term (lambda_j > 0, h_j = 0) of its best branch
    with the largest lambda_j (None when the branch has no missing positive term)."""
    best = tpl.parse(h)
    out = []
    for i, b in enumerate(best):
        br = tpl.branches[b]
        miss = [(lam, j) for lam, j in zip(br.lam, br.selected) if lam > 0 and h[i, j] == 0]
        out.append(max(miss)[1] if miss else None)
    return out


def apply_edit(g: np.ndarray, j: int, dictionary: Dictionary, rng=None) -> np.ndarray:
    """Move the part the term names to its bin centre (rng given: to a uniform random position instead,
    the control). Relation terms move the secondary part to main + the offset's centre."""
    g = g.copy()
    name, x, y = dictionary.centre(j)
    if rng is not None:
        x, y = rng.uniform(0, 1, 2)
        if name == "relation":
            name = "secondary"
    if name == "main":
        g[0], g[1] = x, y
    elif name == "secondary":
        g[2], g[3] = x, y
    elif name == "horizon":
        g[4] = y
    else:
        g[2], g[3] = np.clip(g[0] + x, 0, 1), np.clip(g[1] + y, 0, 1)
    return g
