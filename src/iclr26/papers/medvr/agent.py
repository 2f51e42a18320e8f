"""The zoom-and-answer agent of card 02 section 6 and its GRPO training, vectorised over seeds.

State: the global view (the scan average-pooled `pool` times). Tool call: the zoom head picks one
cell of a grid (a categorical policy); the crop is that cell at full resolution. Answer: the answer
head reads [global view, crop] and samples an answer. Reward: 1 if the answer is right (RLVR).

GRPO (group-normalised advantages, card section 2): per question a group of G rollouts;
A_i = (r_i - mean(r)) / (std(r) + eps) within the group; loss = -mean(A * log pi(action)).
Arms (card section 6):
  global_only   no tool: the crop input is blank (the text-only-RL analogue)
  outcome_grpo  zoom + answer, the outcome reward only (DeepEyes-like)
  evr           Entropy-guided Visual Re-grounding: a rollout whose normalised answer entropy
                H(p)/log C exceeds tau branches: a new zoom is sampled from the same state and
                answered again; the branch joins the group as an extra rollout (its zoom and answer
                credited with its own advantage)
  cca           Consensus Credit Assignment: the consensus cell is the mode of the zooms of the
                group's correct rollouts, used when at least `min_correct` are correct and a
                fraction >= `agree` of them share it; the zoom step's advantage is computed from
                r + lambda 1[zoom = consensus], the answer step keeps the outcome advantage
  medvr         evr + cca
No localisation label is used in training; the lesion cell only scores grounding at evaluation.
Seeds run side by side: every weight has a leading seed axis (bmm), the loss is the sum over seeds,
and Adam is element-wise, so the seeds' weights never interact; each seed draws its own questions,
but the sampling of zooms and answers uses one torch stream per block, so a seed's numbers depend on
its block (the same block in every arm: the arms stay paired).
"""
from __future__ import annotations

import numpy as np
import torch

EPS = 1e-6


def views(images: np.ndarray, grid: int, pool: int) -> tuple[np.ndarray, np.ndarray]:
    """(global views [N, (S/pool)^2], standardised per image; crops of every cell [N, grid^2, cell^2])."""
    n, size, _ = images.shape
    cell = size // grid
    glob = images.reshape(n, size // pool, pool, size // pool, pool).mean((2, 4)).reshape(n, -1)
    glob = (glob - glob.mean(1, keepdims=True)) / (glob.std(1, keepdims=True) + 1e-6)
    crops = images.reshape(n, grid, cell, grid, cell).transpose(0, 1, 3, 2, 4).reshape(n, grid * grid, cell * cell)
    return glob.astype(np.float32), crops.astype(np.float32)


# ----------------------------------------------------------------------------- seed-batched MLP
def init_mlp(n_seeds: int, sizes: list[int], gen: torch.Generator) -> list[torch.Tensor]:
    params = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        params.append((torch.randn(n_seeds, a, b, generator=gen) / np.sqrt(a)).requires_grad_())
        params.append(torch.zeros(n_seeds, 1, b, requires_grad=True))
    return params


def mlp(params, x: torch.Tensor) -> torch.Tensor:
    """x [S, N, in] -> [S, N, out]; tanh hidden layers."""
    for i in range(0, len(params), 2):
        x = torch.baddbmm(params[i + 1], x, params[i])
        if i + 2 < len(params):
            x = torch.tanh(x)
    return x


def mlp_np(params: list[np.ndarray], x: np.ndarray) -> np.ndarray:
    """The same forward pass in numpy (evaluation needs no torch): x [S, N, in]."""
    for i in range(0, len(params), 2):
        x = x @ params[i] + params[i + 1]
        if i + 2 < len(params):
            x = np.tanh(x)
    return x


def to_np(params) -> list[np.ndarray]:
    return [p.detach().numpy().copy() for p in params]


# ----------------------------------------------------------------------------- base perception
def warm_start(glob, crops, cells, labels, n_classes: int, cfg: dict, seed: int) -> tuple[list, list[float]]:
    """The "base VLM": the answer head trained by supervised learning on the true crops (its
    perception); no zoom policy. Returns its weights and the loss curve."""
    a = cfg["agent"]
    gen = torch.Generator().manual_seed(seed)
    params = init_mlp(1, [glob.shape[1] + crops.shape[2], a["hidden"], n_classes], gen)
    opt = torch.optim.Adam(params, lr=a["warm_lr"])
    g, c, y = torch.from_numpy(glob), torch.from_numpy(crops[np.arange(len(cells)), cells]), torch.from_numpy(labels)
    rng = np.random.default_rng(seed)
    curve = []
    for _ in range(a["warm_steps"]):
        i = torch.from_numpy(rng.integers(len(y), size=a["warm_batch"]))
        logits = mlp(params, torch.cat([g[i], c[i]], 1)[None])[0]
        loss = torch.nn.functional.cross_entropy(logits, y[i])
        opt.zero_grad()
        loss.backward()
        opt.step()
        curve.append(float(loss.detach()))
    return to_np(params), curve


# ----------------------------------------------------------------------------- GRPO
def group_advantage(r: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """(r - mean) / (std + eps) over the valid rollouts of each group (last axis); 0 where invalid."""
    n = valid.sum(-1, keepdim=True).clamp(min=1)
    mean = (r * valid).sum(-1, keepdim=True) / n
    std = (((r - mean) ** 2 * valid).sum(-1, keepdim=True) / n).sqrt()
    return (r - mean) / (std + EPS) * valid


def consensus(cells: torch.Tensor, correct: torch.Tensor, n_cells: int, min_correct: int, agree: float):
    """The consensus cell of each group (mode of the correct rollouts' zooms) and whether it is used."""
    counts = (torch.nn.functional.one_hot(cells, n_cells) * correct[..., None]).sum(-2)
    n_ok = correct.sum(-1)
    top, mode = counts.max(-1)
    use = (n_ok >= min_correct) & (top >= agree * n_ok.clamp(min=1))
    return mode, use


def train_arm(arm: str, glob, crops, labels, base: list[np.ndarray], n_classes: int, cfg: dict,
              seeds: list[int], log=None) -> dict:
    """GRPO for one arm and a block of seeds. Returns numpy weights and training statistics."""
    a, t = cfg["agent"], cfg["train"]
    use_tool, use_evr, use_cca = arm != "global_only", arm in ("evr", "medvr"), arm in ("cca", "medvr")
    S, B, G = len(seeds), t["batch"], t["group"]
    n_cells = crops.shape[1]
    gen = torch.Generator().manual_seed(int(seeds[0]) * 7919 + 17)
    zoom = init_mlp(S, [glob.shape[1], a["hidden"], n_cells], gen)
    answer = [torch.from_numpy(np.repeat(p, S, 0)).requires_grad_() for p in base]
    groups = [{"params": answer, "lr": t["answer_lr"]}] + ([{"params": zoom, "lr": t["lr"]}] if use_tool else [])
    opt = torch.optim.Adam(groups)
    rngs = [np.random.default_rng([int(s), 1]) for s in seeds]
    g_all, c_all, y_all = torch.from_numpy(glob), torch.from_numpy(crops), torch.from_numpy(labels)
    torch.manual_seed(int(seeds[0]) * 104729 + 3)
    blank = torch.zeros(S, B, G, crops.shape[2])
    sizes, branch_rate, reward_curve = [], [], []
    for step in range(t["steps"]):
        idx = torch.from_numpy(np.stack([r.integers(len(labels), size=B) for r in rngs]))   # [S, B]
        g, y = g_all[idx], y_all[idx]                                                        # [S, B, D], [S, B]
        gG = g[:, :, None].expand(S, B, G, g.shape[-1])

        def rollout(zlogits, idx=idx):
            """One zoom and one answer per group member: (cell, logp zoom, answer logits, crop)."""
            if not use_tool:
                return None, torch.zeros(S, B, G), blank
            dz = torch.distributions.Categorical(logits=zlogits[:, :, None].expand(S, B, G, n_cells))
            cell = dz.sample()
            crop = c_all[idx[:, :, None].expand(S, B, G), cell]
            return cell, dz.log_prob(cell), crop

        zlogits = mlp(zoom, g) if use_tool else None
        cell, lpz, crop = rollout(zlogits)
        alog = mlp(answer, torch.cat([gG, crop], -1).reshape(S, B * G, -1)).reshape(S, B, G, n_classes)
        da = torch.distributions.Categorical(logits=alog)
        ans = da.sample()
        r, lpa = (ans == y[..., None]).float(), da.log_prob(ans)
        valid = torch.ones(S, B, G)
        if use_evr:   # branch where the answer is uncertain: re-ground from the same state
            ent = da.entropy() / np.log(n_classes)
            branch = (ent > t["evr_tau"]).float()
            cell2, lpz2, crop2 = rollout(zlogits)
            alog2 = mlp(answer, torch.cat([gG, crop2], -1).reshape(S, B * G, -1)).reshape(S, B, G, n_classes)
            da2 = torch.distributions.Categorical(logits=alog2)
            ans2 = da2.sample()
            r = torch.cat([r, (ans2 == y[..., None]).float()], -1)
            lpa, lpz = torch.cat([lpa, da2.log_prob(ans2)], -1), torch.cat([lpz, lpz2], -1)
            cell = torch.cat([cell, cell2], -1)
            valid = torch.cat([valid, branch], -1)
            branch_rate.append(float(branch.mean()))
        adv_answer = group_advantage(r, valid)
        adv_zoom = adv_answer
        if use_cca:
            mode, use = consensus(cell, r * valid, n_cells, t["cca_min_correct"], t["cca_agree"])
            rz = r + t["cca_lambda"] * (cell == mode[..., None]).float() * use[..., None].float()
            adv_zoom = group_advantage(rz, valid)
        per_seed = valid.sum((1, 2))
        loss = -((adv_answer.detach() * lpa + adv_zoom.detach() * lpz) * valid).sum((1, 2)) / per_seed
        opt.zero_grad()
        loss.sum().backward()
        opt.step()
        sizes.append((valid.sum((1, 2)) / B).numpy())
        reward_curve.append(((r * valid).sum((1, 2)) / per_seed).numpy())
        if log:
            log(f"{arm} step {step + 1}/{t['steps']} reward {reward_curve[-1].mean():.3f}", every_s=10)
    return {"answer": to_np(answer), "zoom": to_np(zoom), "rollouts_per_question": np.mean(sizes, 0),
            "branch_rate": float(np.mean(branch_rate)) if branch_rate else 0.0,
            "reward_curve": np.stack(reward_curve)}


# ----------------------------------------------------------------------------- evaluation (numpy)
def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def evaluate(answer, zoom, glob, crops, labels, cells=None, mode: str = "greedy") -> dict:
    """Greedy zoom (mode greedy), the true cell (oracle), a uniform random cell (random: the states
    an untrained zoom head reaches) or no crop (blank); greedy answer.
    Per seed: accuracy, grounding hit (zoom = lesion cell), sd of the normalised answer entropy."""
    S, N = answer[0].shape[0], len(labels)
    g = np.broadcast_to(glob, (S, *glob.shape))
    if mode == "blank":
        crop, pick = np.zeros((S, N, crops.shape[2]), np.float32), None
    elif mode in ("oracle", "random"):
        pick = (np.broadcast_to(cells, (S, N)) if mode == "oracle"
                else np.random.default_rng(0).integers(crops.shape[1], size=(S, N)))
        crop = crops[np.arange(N), pick]
    else:
        pick = mlp_np(zoom, g).argmax(-1)
        crop = crops[np.arange(N)[None], pick]
    p = softmax(mlp_np(answer, np.concatenate([g, crop], -1)))
    ent = -(p * np.log(p + 1e-12)).sum(-1) / np.log(p.shape[-1])
    out = {"accuracy": (p.argmax(-1) == labels).mean(1), "entropy_sd": ent.std(1)}
    out["grounding_hit"] = ((pick == cells).mean(1) if pick is not None and cells is not None
                            else np.full(S, np.nan))
    return out
