"""The zoom-and-answer agent of card 02 section 6 and its GRPO training, vectorised over seeds.

State: the global view (the scan average-pooled `pool` times). Tool call: the zoom head picks one
cell of a grid (a categorical policy); the crop is that cell at full resolution. Answer: the answer
head reads [global view, crop] and samples an answer. Reward: 1 if the answer is right (RLVR).

GRPO (group-normalised advantages, card section 2): per question a group of G rollouts;
A_i = (r_i - mean(r)) / (std(r) + eps) within the group; loss = -mean(A * log pi(action)).
Arms (card section 6, with the audit's corrections):
  global_only   no tool: the crop input is blank (the text-only-RL analogue)
  outcome_grpo  zoom + answer, the outcome reward only (DeepEyes-like)
  outcome_grpo_matched  the same with `group_matched` rollouts per question: compute-matched to EVR
  evr           Entropy-guided Visual Re-grounding as a prefix branch: a rollout whose normalised
                answer entropy H(p)/log C exceeds tau branches at that point; the branch keeps the
                rollout's prefix (its first zoom and crop) and re-grounds: a second zoom drawn from
                the zoom policy with the first cell excluded (the region already seen), answered on
                the new crop. The branch joins the group as a rollout (prefix zoom, zoom 2, answer 2);
                the shared prefix zoom is credited once, with its own rollout's advantage only (the
                branch rejects that cell and answers on crop 2 alone, so its outcome says nothing
                about zoom 1; post hoc, audit 02b N6)
  cca           Consensus Credit Assignment: the consensus cell is the mode of the zooms of the
                group's correct rollouts, used when at least `min_correct` are correct and a
                fraction >= `agree` of them share it; the zoom step's advantage is computed from
                r + lambda r 1[zoom = consensus] (the bonus is paid on correct answers only, as
                DeepEyes pays its tool bonus); the answer step keeps the outcome advantage
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


def cca_bonus(cells, r, valid, n_cells: int, min_correct: int, agree: float) -> torch.Tensor:
    """CCA's zoom bonus 1[zoom = consensus cell], paid only on correct rollouts (r = 1) of groups
    with a consensus."""
    mode, use = consensus(cells, r * valid, n_cells, min_correct, agree)
    return r * (cells == mode[..., None]).float() * use[..., None].float()


def train_arm(arm: str, glob, crops, labels, base: list[np.ndarray], n_classes: int, cfg: dict,
              seeds: list[int], log=None) -> dict:
    """GRPO for one arm and a block of seeds. Returns numpy weights and training statistics."""
    a, t = cfg["agent"], cfg["train"]
    use_tool, use_evr, use_cca = arm != "global_only", arm in ("evr", "medvr"), arm in ("cca", "medvr")
    S, B = len(seeds), t["batch"]
    G = t["group_matched"] if arm == "outcome_grpo_matched" else t["group"]
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
        idxG = idx[:, :, None].expand(S, B, G)

        def answer_step(crop, gG=gG):
            logits = mlp(answer, torch.cat([gG, crop], -1).reshape(S, B * G, -1)).reshape(S, B, G, n_classes)
            return torch.distributions.Categorical(logits=logits)

        if use_tool:
            zlogits = mlp(zoom, g)[:, :, None].expand(S, B, G, n_cells)
            dz = torch.distributions.Categorical(logits=zlogits)
            cell = dz.sample()
            lpz, crop = dz.log_prob(cell), c_all[idxG, cell]
        else:
            cell, lpz, crop = None, torch.zeros(S, B, G), blank
        da = answer_step(crop)
        ans = da.sample()
        r, lpa = (ans == y[..., None]).float(), da.log_prob(ans)
        valid = torch.ones(S, B, G)
        if use_evr:   # branch at the uncertain answer; the branch re-grounds from the rollout's prefix
            branch = (da.entropy() / np.log(n_classes) > t["evr_tau"]).float()
            seen = torch.nn.functional.one_hot(cell, n_cells).bool()
            dz2 = torch.distributions.Categorical(logits=zlogits.masked_fill(seen, -1e9))
            cell2 = dz2.sample()
            da2 = answer_step(c_all[idxG, cell2])
            ans2 = da2.sample()
            r = torch.cat([r, (ans2 == y[..., None]).float()], -1)
            valid = torch.cat([valid, branch], -1)
            branch_rate.append(float(branch.mean()))
        adv = group_advantage(r, valid)
        adv_zoom = adv
        if use_cca:
            zoom_cells = torch.cat([cell, cell2], -1) if use_evr else cell   # a branch's last zoom
            bonus = cca_bonus(zoom_cells, r, valid, n_cells, t["cca_min_correct"], t["cca_agree"])
            adv_zoom = group_advantage(r + t["cca_lambda"] * bonus, valid)
        if use_evr:
            a1, a2 = adv[..., :G], adv[..., G:]
            z1, z2 = adv_zoom[..., :G], adv_zoom[..., G:]
            # the shared prefix zoom: credited with its own rollout's advantage only (the branch rejects
            # cell 1 and answers on crop 2 alone, so its outcome says nothing about zoom 1)
            terms = (a1.detach() * lpa + z1.detach() * lpz
                     + branch * (a2.detach() * da2.log_prob(ans2) + z2.detach() * dz2.log_prob(cell2)))
        else:
            terms = adv.detach() * lpa + adv_zoom.detach() * lpz
        per_seed = valid.sum((1, 2))
        loss = -terms.sum((1, 2)) / per_seed
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
