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


def windows(feats: np.ndarray, centres: np.ndarray, w: int) -> np.ndarray:
    """(len(centres), 2w+1, dim) windows of unit features centred on each unit, edges padded by
    replicating the first/last unit (BaSSL's SequenceShotSampler instead shifts the window inside the
    movie at its edges, dataset/sampler.py: a printed deviation)."""
    idx = np.clip(centres[:, None] + np.arange(-w, w + 1)[None], 0, len(feats) - 1)
    return feats[idx]


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
    opt = torch.optim.AdamW(model.parameters(), lr=p["lr"], weight_decay=1e-4)
    sizes = np.array([len(mv["labels"]) for mv in movies], float)
    anchor_p = [anchor_probs(mv["durations"], p["alpha"], duration) for mv in movies]
    hits, total = 0, 0
    for _ in range(p["steps"]):
        which = rng.choice(len(movies), size=p["batch"], p=sizes / sizes.sum())
        xs, gs, ys = [], [], []
        for j in which:
            mv = movies[j]
            c = rng.choice(len(mv["labels"]), p=anchor_p[j])
            xs.append(windows(mv["mean"], np.array([c]), w)[0])
            ys.append(windows(mv["labels"], np.array([c]), w)[0])
            gs.append(gvecs[j])
        x, g = torch.from_numpy(np.stack(xs)).to(device), torch.from_numpy(np.stack(gs)).to(device)
        e = model.shots(x, g)
        b = pseudo_boundary(e.detach())
        y = np.stack(ys)   # diagnostic only (the synthetic pretrain split has labels; real: all 0)
        near = [y[i, max(0, bi - 1): bi + 2].any() for i, bi in enumerate(b.cpu().numpy())]
        hits += int(np.sum(near))
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
    opt = torch.optim.AdamW([q for q in (*model.crn.parameters(), model.pos, *model.head.parameters())], lr=f["lr"])
    units = [(j, i) for j, mv in enumerate(movies) for i in range(len(mv["labels"]) - 1)]
    for _ in range(f["steps"]):
        pick = rng.choice(len(units), size=f["batch"])
        x = np.stack([windows(movies[units[u][0]]["mean"], np.array([units[u][1]]), w)[0] for u in pick])
        g = np.stack([gvecs[units[u][0]] for u in pick])
        y = torch.tensor([float(movies[units[u][0]]["labels"][units[u][1]]) for u in pick], device=device)
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
