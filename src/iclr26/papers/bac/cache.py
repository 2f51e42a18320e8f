"""BAC (Ji et al., ICLR 2026, arXiv 2506.13456): block-wise caching schedules and the cached sampler.

Card 18, section 2 (the official BACInfer module was read, not copied):
- calibration: one uncached DDPM pass on calibration observation windows, every block's output
  b_k at every denoising step k = 0..K-1 (k in the sampler's order);
- similarity sim(i, j): cosine similarity of b_i and b_j, averaged over calibration samples;
- Adaptive Caching Scheduler (ACS): the update steps C = {0 = c_0 < ... < c_{S-1}} maximising
  sum_m phi(c_m, c_{m+1} - 1), phi(i, j) = sum_{k=i+1..j} sim(i, k) (pairwise form; `adjacent`
  uses sim(k-1, k) instead), solved exactly by dynamic programming, O(S K^2) per block;
- Uniform: every block updates every K/S steps (the official `threshold` mode, no forced step);
  the calibrated rows (the official `optimal` and `fix` modes) also update every block at the
  last step K-1 (the official `_update_cache_flags` adds the final steps to every block's set);
  Unified ACS: the last block's ACS schedule shared by all blocks (the official RDT wrapper's
  `fix` mode, RDTCacheAccelerator: "all blocks share the last block's optimal steps");
  Block-wise ACS: each block its own; BAC = Block-wise ACS + the Bubbling Union Algorithm (BUA):
  the n blocks with the largest l_j = the mean over all step pairs i < j of the mean L1 distance
  between the uncached outputs b_i and b_j (the official `compute_block_l1_errors`, independent of
  any schedule) get the union of the update steps of every FFN block at the same or a deeper
  layer; as in the official wrapper, BU is skipped when at most one block is picked.
"""
from __future__ import annotations

import time

import numpy as np
import torch

Block = tuple[int, str]


@torch.no_grad()
def sample(model, sched, cond, shape, generator, update=None, record=None):
    """The official conditional_sample: x_T ~ N(0, I), then `scheduler.step` over every timestep,
    with the model's block updates given per step index by `update` ({block: bool array (K,)})."""
    x = torch.randn(shape, generator=generator, device=generator.device)
    cache = {} if update is not None else None
    per_step = per_step_updates(update, len(sched.timesteps))
    for k, t in enumerate(sched.timesteps):
        eps = model(x, t, cond, update=per_step[k], cache=cache, record=record)
        x = sched.step(eps, t, x, generator=generator).prev_sample
    return x


def per_step_updates(update, steps: int) -> list:
    """{block: bool (K,)} -> one {block: bool} per step (None: every block every step)."""
    if update is None:
        return [None] * steps
    return [{b: bool(u[k]) for b, u in update.items()} for k in range(steps)]


@torch.no_grad()
def calibrate(model, sched, cond, horizon: int, action_dim: int, seed: int) -> dict[Block, torch.Tensor]:
    """Every block's output at every step, (K, B, horizon * d), on calibration conditions."""
    record = {b: [] for b in model.blocks}
    gen = torch.Generator(device=cond.device).manual_seed(seed)
    sample(model, sched, cond, (cond.shape[0], horizon, action_dim), gen, record=record)
    return {b: torch.stack(v).flatten(2) for b, v in record.items()}


def similarity(features: torch.Tensor) -> np.ndarray:
    """sim(i, j): cosine similarity of steps i and j, averaged over samples. features (K, B, D)."""
    unit = torch.nn.functional.normalize(features.double(), dim=-1)
    return torch.einsum("ibd,jbd->ij", unit, unit).div(features.shape[1]).numpy()


def acs(sim: np.ndarray, budget: int, phi: str = "pairwise") -> np.ndarray:
    """The ACS update steps: exact DP over where each of the `budget` cached segments starts.

    value(i, j) = phi(i, j) = sum_{k=i+1..j} sim(i, k) (pairwise) or sim(k-1, k) (adjacent): the
    similarity kept by reusing step i's output until step j. g[m, e] = the best total for steps
    0..e with m updates, the last segment ending at e; g[m, e] = max_i g[m-1, i-1] + phi(i, e)."""
    steps = sim.shape[0]
    budget = min(budget, steps)
    if phi == "pairwise":
        gain = np.triu(sim, 1)
        value = np.cumsum(gain, axis=1)                     # value[i, j] = sum_{k=i+1..j} sim(i, k)
    elif phi == "adjacent":
        adj = np.concatenate([[0.0], np.diag(sim, 1)])      # adj[k] = sim(k-1, k)
        cum = np.cumsum(adj)
        value = cum[None, :] - cum[:, None]                 # sum_{k=i+1..j} adj[k]
    else:
        raise ValueError(f"phi must be pairwise or adjacent, got {phi!r}")
    value = np.where(np.arange(steps)[None, :] >= np.arange(steps)[:, None], value, -np.inf)
    g = np.full((budget + 1, steps), -np.inf)
    arg = np.zeros((budget + 1, steps), np.int64)
    g[1] = value[0]
    for m in range(2, budget + 1):
        for e in range(m - 1, steps):
            starts = np.arange(m - 1, e + 1)                # the last segment starts at i, 1 <= i <= e
            total = g[m - 1, starts - 1] + value[starts, e]
            best = int(np.argmax(total))
            g[m, e], arg[m, e] = total[best], starts[best]
    updates, e = [], steps - 1
    for m in range(budget, 1, -1):
        i = arg[m, e]
        updates.append(i)
        e = i - 1
    return np.array(sorted([0, *updates]), np.int64)


def mask_of(updates, steps: int) -> np.ndarray:
    mask = np.zeros(steps, bool)
    mask[np.asarray(list(updates), np.int64)] = True
    return mask


def uniform(steps: int, budget: int) -> np.ndarray:
    """Every steps / budget steps (the code's 'threshold' mode), starting at step 0."""
    return np.unique(np.floor(np.arange(budget) * steps / budget).astype(np.int64))


def reuse_error(features: torch.Tensor, updates: np.ndarray) -> float:
    """Mean L1 distance (per element) between the cached output and each step that reuses it under
    the schedule `updates` (a diagnostic; BUA ranks blocks by `pair_l1`)."""
    steps = features.shape[0]
    source = np.maximum.accumulate(mask_of(updates, steps) * np.arange(steps))  # the update each step reuses
    reused = np.flatnonzero(source != np.arange(steps))
    if reused.size == 0:
        return 0.0
    return float((features[reused] - features[source[reused]]).abs().mean())


def pair_l1(features: torch.Tensor) -> float:
    """BUA's l_j: the mean over all step pairs i < j of mean |b_i - b_j| (per element) of the
    uncached outputs, features (K, B, D) (the official `compute_block_l1_errors` without a cache)."""
    steps = features.shape[0]
    if steps < 2:
        return 0.0
    flat = features.float().flatten(1)                      # (K, B * D)
    total = sum(float((flat[i + 1:] - flat[i]).abs().mean(dim=1).double().sum()) for i in range(steps - 1))
    return total / (steps * (steps - 1) / 2)


def bubbling_union(schedules: dict[Block, np.ndarray], errors: dict[Block, float], n: int) -> dict[Block, np.ndarray]:
    """BUA: the n blocks with the largest error also update whenever an FFN block at their layer or
    deeper updates. As the official wrapper (`len(bu_blocks) <= 1`: no BU), n <= 1 changes nothing."""
    out = dict(schedules)
    if n <= 1:
        return out
    for block in sorted(errors, key=lambda b: -errors[b])[:n]:
        ffn = [s for (layer, kind), s in schedules.items() if kind == "ffn" and layer >= block[0]]
        out[block] = np.unique(np.concatenate([schedules[block], *ffn]))
    return out


def force_final(schedules: dict[Block, np.ndarray], steps: int) -> dict[Block, np.ndarray]:
    """The official adaptive modes' forced update: every block is computed at the last step K-1."""
    return {b: np.union1d(s, [steps - 1]).astype(np.int64) for b, s in schedules.items()}


def schedules_for(variant: str, sims: dict[Block, np.ndarray], features: dict[Block, torch.Tensor], budget: int,
                  n_bu: int, phi: str, steps: int, final: bool = True) -> dict[Block, np.ndarray]:
    """The update steps of every block. `final`: the calibrated rows also update at step K-1 (the
    official `optimal`/`fix` modes); Uniform (`threshold`) never does. Blocks in the model's order."""
    blocks = list(sims)
    if variant == "full":
        return {b: np.arange(steps) for b in blocks}
    if variant == "uniform":
        return {b: uniform(steps, budget) for b in blocks}
    if variant == "unified_acs":
        shared = acs(sims[blocks[-1]], budget, phi)          # the last block's (the official `fix` mode)
        out = {b: shared for b in blocks}
    else:
        own = {b: acs(sims[b], budget, phi) for b in blocks}
        if variant == "blockwise_acs" or n_bu == 0:
            out = own
        elif variant == "bac":
            out = bubbling_union(own, {b: pair_l1(features[b]) for b in blocks}, n_bu)
        else:
            raise ValueError(f"unknown variant {variant!r}")
    return force_final(out, steps) if final else out


def block_flops(model, cond_dim: int, horizon: int, n_obs: int, action_dim: int) -> tuple[dict[Block, int], int]:
    """Matmul FLOPs of one block at batch 1 and of the per-step remainder (embeddings, condition
    encoder, head), counted by torch.utils.flop_counter on one forward."""
    from torch.utils.flop_counter import FlopCounterMode

    device = next(model.parameters()).device
    sample_ = torch.zeros(1, horizon, action_dim, device=device)
    cond = torch.zeros(1, n_obs, cond_dim, device=device)
    with torch.no_grad():
        with FlopCounterMode(display=False) as total:
            model(sample_, 0, cond)
        x, memory = model.embed(sample_, 0, cond)
        per_block = {}
        for i, layer in enumerate(model.layers):
            for kind in ("sa", "ca", "ffn"):
                with FlopCounterMode(display=False) as fc:
                    layer.branch(kind, x, memory, model.mask, model.memory_mask)
                per_block[(i, kind)] = fc.get_total_flops()
    return per_block, total.get_total_flops() - sum(per_block.values())


def chunk_flops(schedules: dict[Block, np.ndarray], per_block: dict[Block, int], rest: int, steps: int) -> int:
    return steps * rest + sum(len(schedules[b]) * per_block[b] for b in schedules)


def wallclock(model, sched, cond, shape, masks: dict[str, dict], warmup: int, repeats: int,
              seed: int, clock: str = "perf_counter") -> dict[str, np.ndarray]:
    """Seconds per action chunk of each schedule, interleaved in one process: warm-up rounds, then
    `repeats` rounds, each timing every schedule once in a rotated order. clock "blocks" replaces
    the timer by a deterministic count (blocks computed + steps) for reproducible smoke records."""
    names = list(masks)
    sync = torch.cuda.synchronize if cond.is_cuda else (lambda: None)
    times = {n: [] for n in names}
    for r in range(warmup + repeats):
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order:
            gen = torch.Generator(device=cond.device).manual_seed(seed)
            sync()
            t0, b0 = time.perf_counter(), model.executed
            sample(model, sched, cond, shape, gen, update=masks[name])
            sync()
            if r >= warmup:
                blocks = model.executed - b0 + len(sched.timesteps)
                times[name].append(time.perf_counter() - t0 if clock == "perf_counter" else float(blocks))
    return {n: np.array(v) for n, v in times.items()}
