"""BaSSL-lite (Mun et al. 2022, kakaobrain/bassl, read, re-implemented small) and the paper's three
additions (card 15 section 2; the paper's code is not public, so their form is the card's reading).

Stage 1, pretraining on unlabelled movies (bassl/pretrain): windows of 2W+1 shots around an anchor;
    shot encoder -> contextual relation network (CRN, a transformer) ->
    - pseudo-boundary: the DTW split of the window between its two end shots (BaSSL aligns the window
      to its first and last shot; with two prototypes DTW is the best monotone split:
      argmax_b sum_{i<=b} cos(e_i, e_0) + sum_{i>b} cos(e_i, e_{L-1}));
    - shot-scene matching (SSM): InfoNCE (temperature ssm_tau) between the anchor shot and its
      pseudo-scene (the mean CRN output of its side), other windows of the batch as negatives;
    - pseudo-boundary prediction (PP): BCE, the pseudo-boundary position 1, one random other position 0.
    (BaSSL's contextual group matching and masked shot modelling are left out: deviations.)
    Where this differs from BaSSL (pretrain/loss/pretrain_loss.py, pretext_task.py; all printed as
    deviations): BaSSL runs DTW and SSM on head_nce projections of shot-encoder outputs and matches
    both edge shots to the mean of their DTW-aligned segment (NT-Xent over 2B); here DTW runs on the
    un-projected shot-encoder outputs and SSM matches only the centre anchor to the mean CRN output of
    its side (so the CRN also learns from SSM); BaSSL's PP is a 2-class CE on the CRN output, here a
    1-logit BCE (the same loss).
Stage 2, fine-tuning (bassl/finetune): the shot encoder frozen (BaSSL fine-tunes on pre-extracted shot
    features), CRN + boundary head trained with BCE on the window centre's scene-end label; the head
    is an MLP on the centre pair of CRN outputs (|a - b|, a * b) (Model.boundary), not BaSSL's
    Linear(hidden, 2) on the CRN's pooled output (finetune_wrapper.py): a post-hoc change, printed.
Additions: genre prior (FiLM of the shot encoder by the movie's genre-text embedding, plus a cosine
    alignment loss of weight genre.align_weight between the window's mean CRN output and that
    embedding), inverse-duration anchors (p(anchor i) ∝ d_i^-alpha), test-time split (shots longer
    than tau become min(ceil(d/tau), 3) segments of their own key frames; a shot's score is read as
    the highest of its segments' (our reading) or its last segment's (the card's reading); both are
    reported).
The genre prior is also an input at inference (the FiLM of the shot encoder reads the test movie's
genre vector); rows also report the score with every test movie given the mean genre vector of the
training movies (no per-movie genre at test).
"""
from __future__ import annotations

import hashlib

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F


def text_embedding(text: str, dim: int) -> np.ndarray:
    """Fixed hashed bag of words (the stand-in text encoder: nothing is downloaded)."""
    v = np.zeros(dim, np.float32)
    for w in text.lower().split():
        h = int(hashlib.sha256(w.encode()).hexdigest(), 16)
        v[h % dim] += 1.0 if (h >> 64) % 2 else -1.0
    return v / max(np.linalg.norm(v), 1e-6)


def genre_vector(genres: list[str], definitions: dict, dim: int) -> np.ndarray:
    """The movie's genre prior: the normalised mean of its genres' definition embeddings (genre names
    matched case-insensitively: MovieNet writes "Sci-Fi", the config sci-fi). A genre without a
    definition is an error, never a silent zero; a movie with no genre gets the zero vector."""
    table = {k.lower(): v for k, v in definitions.items()}
    unknown = [g for g in genres if g.lower() not in table]
    if unknown:
        raise ValueError(f"genres without a definition in genre.definitions: {unknown}")
    known = [text_embedding(table[g.lower()], dim) for g in genres]
    v = np.mean(known, 0) if known else np.zeros(dim, np.float32)
    return (v / max(np.linalg.norm(v), 1e-6)).astype(np.float32)


class Model(nn.Module):
    def __init__(self, dim: int, hidden: int, window: int, genre_dim: int, use_genre: bool, proj: int,
                 layers: int = 1):
        super().__init__()
        self.use_genre = use_genre
        self.inp = nn.Linear(dim, hidden)
        self.out = nn.Linear(hidden, hidden)
        self.film = nn.Linear(genre_dim, 2 * hidden)
        nn.init.zeros_(self.film.weight)
        nn.init.zeros_(self.film.bias)
        self.pos = nn.Parameter(torch.zeros(2 * window + 1, hidden))
        layer = nn.TransformerEncoderLayer(hidden, 2, 2 * hidden, dropout=0.0, batch_first=True)
        self.crn = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.ssm = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, proj))
        self.pp = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))
        self.align = nn.Linear(hidden, genre_dim)
        self.head = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def shots(self, x, g):
        h = F.relu(self.inp(x))
        if self.use_genre:
            gamma, beta = self.film(g).unsqueeze(1).chunk(2, -1)
            h = h * (1 + gamma) + beta
        return self.out(h)

    def context(self, e):
        return self.crn(e + self.pos)

    def boundary(self, c, w: int):
        """Scene-end logit of the window's centre shot, from the centre pair of CRN outputs (the
        boundary lies between shots w and w + 1): their absolute difference and product."""
        a, b = c[:, w], c[:, w + 1]
        return self.head(torch.cat([(a - b).abs(), a * b], -1)).squeeze(-1)


class AdamW:
    """torch.optim.AdamW's update (decoupled weight decay, no amsgrad; parameters without a gradient
    skipped, as torch does), written out on one flat buffer: the parameters that have a gradient at the
    first step become views of it, so each step is a handful of elementwise ops instead of a handful
    per parameter. The same arithmetic, checked bit for bit against torch by test_adamw_matches_torch;
    it also avoids torch.optim's import of torch._dynamo on first use (about 1.5 CPU-s per job)."""

    def __init__(self, params, lr: float, weight_decay: float = 1e-2, betas=(0.9, 0.999), eps: float = 1e-8):
        self.params, self.lr, self.wd, self.betas, self.eps = list(params), lr, weight_decay, betas, eps
        self.live: list | None = None   # the parameters with a gradient (fixed at the first step)
        self.t = 0

    def zero_grad(self) -> None:
        for prm in self.params:
            prm.grad = None

    @torch.no_grad()
    def step(self) -> None:
        live = [prm for prm in self.params if prm.grad is not None]
        if self.live is None:
            if not live:
                return
            self.live, self.flat = live, torch.cat([prm.detach().reshape(-1) for prm in live])
            at = 0
            for prm in live:
                prm.data = self.flat[at: at + prm.numel()].view_as(prm)
                at += prm.numel()
            self.m, self.v = torch.zeros_like(self.flat), torch.zeros_like(self.flat)
        elif len(live) != len(self.live) or any(a is not b for a, b in zip(live, self.live)):
            raise RuntimeError("AdamW: the parameters with a gradient changed between steps")
        g = torch.cat([prm.grad.reshape(-1) for prm in live])
        (b1, b2), lr = self.betas, self.lr
        self.t += 1
        if self.wd != 0:
            self.flat.mul_(1 - lr * self.wd)
        self.m.lerp_(g, 1 - b1)
        self.v.mul_(b2).addcmul_(g, g, value=1 - b2)
        denom = self.v.sqrt().div_((1 - b2 ** float(self.t)) ** 0.5).add_(self.eps)
        self.flat.addcdiv_(self.m, denom, value=(lr / (1 - b1 ** float(self.t))) * -1)


def windows(feats: np.ndarray, centres: np.ndarray, w: int) -> np.ndarray:
    """(len(centres), 2w+1, dim) windows of unit features centred on each unit, edges padded by
    replicating the first/last unit (BaSSL's SequenceShotSampler instead shifts the window inside the
    movie at its edges, dataset/sampler.py: a printed deviation)."""
    idx = np.clip(centres[:, None] + np.arange(-w, w + 1)[None], 0, len(feats) - 1)
    return feats[idx]


def _cdf(q: np.ndarray) -> np.ndarray:
    """The normalised cumulative sum numpy's Generator.choice searches for a draw with probabilities q."""
    c = np.asarray(q, float).cumsum()
    return c / c[-1]


class Collated:
    """The movies' key-frame means and labels concatenated once, so that a batch of windows is one
    fancy index (the same windows as `windows`, edges padded the same way)."""

    def __init__(self, movies: list[dict]):
        self.mean = np.concatenate([mv["mean"] for mv in movies])
        self.labels = np.concatenate([mv["labels"] for mv in movies])
        self.size = np.array([len(mv["labels"]) for mv in movies])
        self.offset = np.r_[0, np.cumsum(self.size)[:-1]]

    def index(self, movie: np.ndarray, centre: np.ndarray, w: int) -> np.ndarray:
        """(batch, 2w+1) rows of the concatenated arrays: window of half-width w around shot centre[k]
        of movie[k], clipped to that movie."""
        pos = np.clip(centre[:, None] + np.arange(-w, w + 1)[None], 0, self.size[movie][:, None] - 1)
        return self.offset[movie][:, None] + pos


def pseudo_boundary(e: torch.Tensor) -> torch.Tensor:
    """DTW split of each window between its end shots: the index b of the left part's last shot."""
    e = F.normalize(e, dim=-1)
    left = (e * e[:, :1]).sum(-1)
    right = (e * e[:, -1:]).sum(-1)
    score = left.cumsum(1)[:, :-1] + right.flip(1).cumsum(1).flip(1)[:, 1:]
    return score.argmax(1)


def anchor_probs(durations: np.ndarray, alpha: float, duration: bool) -> np.ndarray:
    """The paper's duration-aware anchors: p(i) ∝ d_i^-alpha (else uniform). Durations must be > 0
    (load_split checks it; MovieNet's one-frame shots last 1/fps)."""
    q = np.asarray(durations, float) ** -alpha if duration else np.ones(len(durations))
    return q / q.sum()


def pretrain(movies: list[dict], gvecs: np.ndarray, cfg: dict, seed: int, use_genre: bool, duration: bool,
             device: str = "cpu") -> dict:
    m, p = cfg["model"], cfg["pretrain"]
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    w = m["window"]
    model = Model(movies[0]["mean"].shape[-1], m["hidden"], w, gvecs.shape[1], use_genre, m["proj"],
                  m.get("crn_layers", 1)).to(device)
    opt = AdamW(model.parameters(), lr=p["lr"], weight_decay=1e-4)
    sizes = np.array([len(mv["labels"]) for mv in movies], float)
    bank = Collated(movies)
    # rng.choice(n, p=q) draws one rng.random() and searches q's normalised cumulative sum: the same
    # draws, taken for the whole batch at once (test_collated_draws_match_per_window_choice)
    anchor_cdf = [_cdf(anchor_probs(mv["durations"], p["alpha"], duration)) for mv in movies]
    hits, total = 0, 0
    for _ in range(p["steps"]):
        which = rng.choice(len(movies), size=p["batch"], p=sizes / sizes.sum())
        u = rng.random(p["batch"])
        centres = np.array([anchor_cdf[j].searchsorted(uj, side="right") for j, uj in zip(which, u)])
        idx = bank.index(which, centres, w)
        x, g = torch.from_numpy(bank.mean[idx]).to(device), torch.from_numpy(gvecs[which]).to(device)
        e = model.shots(x, g)
        b = pseudo_boundary(e.detach())
        y = bank.labels[idx]   # diagnostic only (the synthetic pretrain split has labels; real: all 0)
        bn = b.cpu().numpy()[:, None]
        span = np.arange(2 * w + 1)[None]
        near = ((y != 0) & (span >= bn - 1) & (span <= bn + 1)).any(1)
        hits += int(near.sum())
        total += len(near)
        c = model.context(e)
        pos = torch.arange(2 * w + 1, device=device)[None]
        left = (pos <= b[:, None]).float().unsqueeze(-1)
        centre_left = (w <= b).float()[:, None]
        scene = (c * left).sum(1) / left.sum(1) * centre_left + \
            (c * (1 - left)).sum(1) / (1 - left).sum(1).clamp(min=1) * (1 - centre_left)
        q, k = F.normalize(model.ssm(e[:, w]), dim=-1), F.normalize(model.ssm(scene), dim=-1)
        loss = F.cross_entropy(q @ k.T / p["ssm_tau"], torch.arange(len(q), device=device))
        neg = torch.from_numpy(rng.integers(0, 2 * w, size=len(b))).to(device)
        neg = neg + (neg >= b).long()
        ar = torch.arange(len(b), device=device)
        logits = torch.cat([model.pp(c[ar, b]), model.pp(c[ar, neg])]).squeeze(-1)
        target = torch.cat([torch.ones(len(b)), torch.zeros(len(b))]).to(device)
        loss = loss + F.binary_cross_entropy_with_logits(logits, target)
        if use_genre:
            loss = loss + cfg["genre"]["align_weight"] * (1 - F.cosine_similarity(model.align(c.mean(1)), g)).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    labelled = bool(sum(mv["labels"].sum() for mv in movies))
    return {"model": model, "pseudo_precision": hits / max(total, 1), "labelled": labelled}


def finetune(model: Model, movies: list[dict], gvecs: np.ndarray, cfg: dict, seed: int) -> None:
    f, w = cfg["finetune"], cfg["model"]["window"]
    device = model.pos.device
    torch.manual_seed(seed + 1)
    rng = np.random.default_rng(seed + 1)
    for prm in (*model.inp.parameters(), *model.out.parameters(), *model.film.parameters()):
        prm.requires_grad_(False)
    opt = AdamW([q for q in (*model.crn.parameters(), model.pos, *model.head.parameters())], lr=f["lr"])
    bank = Collated(movies)
    unit_movie = np.concatenate([np.full(len(mv["labels"]) - 1, j) for j, mv in enumerate(movies)])
    unit_shot = np.concatenate([np.arange(len(mv["labels"]) - 1) for mv in movies])
    for _ in range(f["steps"]):
        pick = rng.choice(len(unit_movie), size=f["batch"])
        j, i = unit_movie[pick], unit_shot[pick]
        x = bank.mean[bank.index(j, i, w)]
        g = gvecs[j]
        y = torch.from_numpy(bank.labels[bank.offset[j] + i].astype(np.float32)).to(device)
        with torch.no_grad():
            e = model.shots(torch.from_numpy(x).to(device), torch.from_numpy(g).to(device))
        logit = model.boundary(model.context(e), w)
        loss = F.binary_cross_entropy_with_logits(logit, y)
        opt.zero_grad()
        loss.backward()
        opt.step()


def segments(mv: dict, tau: float | None, split=None) -> tuple[np.ndarray, np.ndarray]:
    """Unit features and each unit's shot: a shot (its key frames' mean), or with tau a shot longer
    than tau (and, when `split` is given, marked in it) becomes min(ceil(d/tau), 3) segments, each the
    mean of the key frames in its part of the shot (frame k at time (k + 0.5)/3 of the shot)."""
    if tau is None:
        return np.asarray(mv["mean"], np.float32), np.arange(len(mv["labels"]))
    feats, owner = [], []
    for i, (fr, d) in enumerate(zip(mv["features"], mv["durations"])):
        n = int(min(np.ceil(d / tau), fr.shape[0])) or 1
        if split is not None and not split[i]:
            n = 1
        fr = np.asarray(fr, np.float32)
        for s in range(n):
            ks = [k for k in range(fr.shape[0]) if s / n <= (k + 0.5) / fr.shape[0] < (s + 1) / n]
            feats.append(fr[ks].mean(0))
            owner.append(i)
    return np.asarray(feats, np.float32), np.asarray(owner)


READINGS = ("max", "last")


@torch.no_grad()
def score(model: Model, movies: list[dict], gvecs: np.ndarray, cfg: dict, tau: float | None,
          reading: str = "max", split: list | None = None) -> list[np.ndarray]:
    """Scene-end probability of every shot of every movie (the last shot's is unused). With the
    test-time split a shot's score is read from its segments: `max` (the highest of its segments'
    boundary scores, our reading) or `last` (its last segment's, the card's reading); `split`: per
    movie, which long shots are split (None: all of them)."""
    w, out, device = cfg["model"]["window"], [], model.pos.device
    for j, mv in enumerate(movies):
        feats, owner = segments(mv, tau, None if split is None else split[j])
        x = torch.from_numpy(windows(feats, np.arange(len(feats)), w)).to(device)
        g = torch.from_numpy(np.repeat(gvecs[j][None], len(feats), 0)).to(device)
        p = torch.sigmoid(model.boundary(model.context(model.shots(x, g)), w)).cpu().numpy()
        s = np.full(len(mv["labels"]), -np.inf)
        if reading == "max":
            np.maximum.at(s, owner, p)
        elif reading == "last":
            last = np.r_[owner[1:] != owner[:-1], True]      # each shot's last segment
            s[owner[last]] = p[last]
        else:
            raise ValueError(f"reading must be one of {READINGS}, got {reading!r}")
        out.append(s)
    return out
