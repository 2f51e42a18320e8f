"""Stages of card 18, BAC: block-wise adaptive caching for Diffusion Policy (arXiv 2506.13456).

    acquire   tiny/smoke: scripted two-mode "reach around the T" demonstrations in the Push-T
              low-dim zarr schema (env.py); full: the Diffusion Policy Push-T data (pusht.zip);
              then, before any training, the store's schema and counts and the rigid fit of the
              keypoint map the closed loop observes with (check_demonstrations -> keypoint_map.json)
    prepare   the policy BAC plugs into: DP-T (model.py) trained on the demonstrations with the
              official recipe (AdamW, cosine with warm-up, EMA, DDPM epsilon loss), its
              normalizer and the held-out episodes                         -> policy.pt
    train     bac only: its offline schedule calibration per seed (BAC trains nothing); the
              other calibrated rows run the same cheap calibration inside evaluate
    evaluate  per seed: for unified_acs and blockwise_acs (bac: read from its train job) one uncached pass
              on calibration windows drawn from the training episodes, every block's output at
              every step, the similarity matrices, ACS by DP, BUA (cache.py); then per budget S: the
              action error against the uncached policy on held-out windows with the same initial
              and per-step noise, the FFN blocks' error at their update steps, closed-loop success
              and score (tiny: the reach-around task; full: the official Push-T simulator, gym-pusht,
              pusht_sim.py),
              matmul FLOPs per chunk (torch.utils.flop_counter) and wall-clock per chunk against
              the uncached policy, interleaved in this process. The baselines also run at the
              compute-matched budget S' (`cache.match`: the smallest S' whose FLOPs per chunk reach
              bac's at S, from the same seed's calibration); the accuracy claims compare those.

A seed is one calibration set, one set of held-out windows and sampling noise, and one set of
closed-loop episodes; every row sees the same ones (paired by seed). One policy is trained (the
paper: 3 training seeds).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from . import env as envmod

DATASET = "pusht"
CALIBRATED = ("unified_acs", "blockwise_acs", "bac")


# ----------------------------------------------------------------------------------------- data
def acquire(job) -> dict:
    spec = job.cfg["data"][job.dataset]
    if spec["source"] == "synthetic":
        arrays = envmod.expert_episodes(spec["env"], spec["episodes"], spec["data_seed"])
        envmod.write_zarr(job.out_dir / spec["zarr"], arrays)
        modes = arrays.pop("meta/mode")
        info = {"source": "synthetic", "steps": int(len(arrays["data/action"])), "episodes": int(spec["episodes"]),
                "right_mode_fraction": float((modes > 0).mean())}
    elif spec["source"] == "official":
        import zipfile

        from iclr26.core.acquire import download

        archive = download(spec["url"], job.out_dir / Path(spec["url"]).name, spec["sha256"], progress=job.log)
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(job.out_dir)
        info = {"source": "official", "url": spec["url"], "sha256": spec["sha256"]}
    else:
        raise ValueError(f"data.{job.dataset}.source must be synthetic or official, got {spec['source']!r}")
    return {**info, **check_demonstrations(job.out_dir / spec["zarr"], spec.get("expect"), job.out_dir)}


def check_demonstrations(zarr_path: Path, expect: dict | None, out_dir: Path) -> dict:
    """Before any training: the store's schema (data/keypoint (N, 9, 2), data/state (N, 5),
    data/action (N, 2), meta/episode_ends ending at N), the episode and step counts `expect`s (full:
    the official 206 episodes, 25,650 steps), and the rigid fit of the block-frame keypoint map the
    closed loop observes with (pusht_sim.keypoint_map, to 0.5 px). Writes keypoint_map.json (read by
    evaluate); raises one DataError naming every problem."""
    import zarr

    from iclr26.core.errors import DataError
    from iclr26.core.io import write_json

    from . import pusht_sim

    root = zarr.open_group(str(zarr_path), mode="r")
    kp, state = np.asarray(root["data/keypoint"][:]), np.asarray(root["data/state"][:])
    action, ends = np.asarray(root["data/action"][:]), np.asarray(root["meta/episode_ends"][:])
    n = len(state)
    problems = [f"{key} has shape {arr.shape}, expected {want}"
                for key, arr, want in (("data/keypoint", kp, (n, 9, 2)), ("data/state", state, (n, 5)),
                                       ("data/action", action, (n, 2)))
                if arr.shape != want]
    if len(ends) == 0 or int(ends[-1]) != n:
        problems.append(f"meta/episode_ends ends at {int(ends[-1]) if len(ends) else None}, not at the {n} steps")
    for what, got in (("episodes", len(ends)), ("steps", n)):
        if expect and expect.get(what) is not None and int(expect[what]) != int(got):
            problems.append(f"{got} {what}, expected {int(expect[what])}")
    local, error = None, float("nan")
    if not problems:
        try:
            local, error = pusht_sim.keypoint_map(kp, state)
        except ValueError as err:
            problems.append(str(err))
    if problems:
        raise DataError(f"{zarr_path.name}: " + "; ".join(problems))
    write_json(out_dir / "keypoint_map.json", {"keypoint_map": local.tolist(), "max_error_px": error})
    return {"episodes_found": int(len(ends)), "steps_found": int(n), "keypoint_map_max_error_px": error}


def split_episodes(n_episodes: int, val_ratio: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The official split (diffusion_policy.common.sampler.get_val_mask): n_val = round(n * val_ratio),
    at least 1 and at most n - 1, drawn by default_rng(seed).choice. Returns (train, held-out), sorted."""
    n_val = min(max(1, round(n_episodes * val_ratio)), n_episodes - 1)
    val = np.zeros(n_episodes, bool)
    val[np.random.default_rng(seed).choice(n_episodes, size=n_val, replace=False)] = True
    return np.flatnonzero(~val), np.flatnonzero(val)


# ------------------------------------------------------------------------------------- policy
def prepare(job) -> dict:
    """Train the DP-T policy (the official recipe, sizes from the config)."""
    import torch
    from diffusers.optimization import get_cosine_schedule_with_warmup

    from iclr26.core.runtime import pick_device

    from . import model as M

    cfg, spec, t = job.cfg, job.cfg["data"][DATASET], job.cfg["train"]
    m = cfg["model"]
    device = pick_device(cfg.get("device"))
    data = envmod.load_zarr(job.raw_dir() / spec["zarr"])
    train_eps, held_eps = split_episodes(len(data["episode_ends"]), spec["heldout_fraction"], spec["split_seed"])
    train_eps = max_episodes(train_eps, t.get("max_train_episodes"), spec["split_seed"])
    wins = envmod.windows(data["episode_ends"], m["horizon"], m["n_obs_steps"], m["n_action_steps"], train_eps)
    obs, act = torch.from_numpy(data["obs"]), torch.from_numpy(data["action"])
    obs_norm, act_norm = M.Normalizer.fit(obs), M.Normalizer.fit(act)  # the official: fit on the whole dataset
    obs_n, act_n = obs_norm(obs).to(device), act_norm(act).to(device)
    wins_t = torch.from_numpy(wins).to(device)

    torch.manual_seed(t["seed"])
    net = M.build(cfg).to(device)
    ema = M.build(cfg).to(device).eval()
    ema.load_state_dict(net.state_dict())
    ema.requires_grad_(False)
    opt = torch.optim.AdamW(M.optim_groups(net, t["weight_decay"]), lr=t["lr"], betas=tuple(t["betas"]), foreach=True)
    lr_sched = get_cosine_schedule_with_warmup(opt, t["warmup_steps"], t["steps"])
    sched = M.scheduler(cfg)
    gen = torch.Generator(device=device).manual_seed(t["seed"])
    checkpointer = job.checkpointer()
    state = checkpointer.load()
    step, losses = 0, []
    if state is not None:
        net.load_state_dict(state["net"])
        ema.load_state_dict(state["ema"])
        opt.load_state_dict(state["opt"])
        lr_sched.load_state_dict(state["lr"])
        gen.set_state(state["gen"])
        torch.set_rng_state(state["torch_rng"])
        step, losses = state["step"], list(torch.as_tensor(state["losses"]).to(device).unbind())
    net.train()
    while step < t["steps"]:
        idx = wins_t[torch.randint(len(wins_t), (t["batch_size"],), generator=gen, device=device)]
        cond = obs_n[idx[:, : m["n_obs_steps"]]]
        traj = act_n[idx]
        noise = torch.randn(traj.shape, generator=gen, device=device)
        steps_ = torch.randint(0, sched.config.num_train_timesteps, (len(traj),), generator=gen, device=device)
        loss = torch.nn.functional.mse_loss(net(sched.add_noise(traj, noise, steps_), steps_, cond), noise)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        lr_sched.step()
        step += 1
        ema_update(ema, net, step, t["ema"])
        losses.append(loss.detach())   # no host sync per step: read back when logging
        if step % 500 == 0:
            job.log(f"DP-T step {step}/{t['steps']} loss {float(torch.stack(losses[-50:]).mean()):.4f}", every_s=10)
        if checkpointer.maybe_save(step, lambda step=step: {
                "net": net.state_dict(), "ema": ema.state_dict(), "opt": opt.state_dict(), "lr": lr_sched.state_dict(),
                "gen": gen.get_state(), "torch_rng": torch.get_rng_state(), "step": step,
                "losses": torch.stack(losses).cpu()}):
            raise SystemExit("stopped on request after a checkpoint")
    torch.save({"ema": {k: v.cpu() for k, v in ema.state_dict().items()},
                "obs_norm": obs_norm.state(), "act_norm": act_norm.state(),
                "train_episodes": torch.from_numpy(train_eps), "heldout_episodes": torch.from_numpy(held_eps)},
               job.out_dir / "policy.pt")
    checkpointer.clear()
    losses = torch.stack(losses).cpu().numpy() if losses else np.zeros(1)
    tail = max(1, len(losses) // 10)
    return {"steps": step, "train_episodes": int(len(train_eps)), "train_windows": int(len(wins)),
            "epochs": float(step * t["batch_size"] / max(1, len(wins))),
            "first_loss": float(np.mean(losses[:tail])), "last_loss": float(np.mean(losses[-tail:]))}


def max_episodes(train_eps: np.ndarray, limit, seed: int) -> np.ndarray:
    """The official `max_train_episodes` (diffusion_policy.common.sampler.downsample_mask): keep a
    random `limit` of the training episodes, drawn with the dataset seed; None keeps all."""
    if limit is None or len(train_eps) <= int(limit):
        return train_eps
    keep = np.random.default_rng(seed).choice(len(train_eps), int(limit), replace=False)
    return np.sort(train_eps[keep])


def ema_update(ema, net, step: int, e: dict) -> None:
    """The official EMAModel (diffusion_policy/model/diffusion/ema_model.py): decay
    1 - (1 + step / inv_gamma) ** -power, clipped to [min_value, max_value], 0 before warm-up."""
    import torch

    k = max(0, step - e["update_after_step"] - 1)
    decay = 0.0 if k <= 0 else min(max(1 - (1 + k / e["inv_gamma"]) ** -e["power"], e["min_value"]), e["max_value"])
    with torch.no_grad():
        ema_p, net_p = list(ema.parameters()), [p.detach() for p in net.parameters()]
        torch._foreach_mul_(ema_p, decay)
        torch._foreach_add_(ema_p, net_p, alpha=1 - decay)


class Policy:
    """The trained DP-T, its normalizers, data, windows and scheduler, loaded for calibration/eval."""

    def __init__(self, job):
        import torch

        from iclr26.core.runtime import pick_device

        from . import model as M

        cfg = job.cfg
        self.cfg, m, spec = cfg, cfg["model"], cfg["data"][DATASET]
        self.device = pick_device(cfg.get("device"))
        saved = torch.load(job.prepared_dir(DATASET) / "policy.pt", map_location=self.device, weights_only=True)
        self.net = M.build(cfg)
        self.net.load_state_dict(saved["ema"])
        self.net.to(self.device).eval()
        self.obs_norm = M.Normalizer.from_state({k: v.to(self.device) for k, v in saved["obs_norm"].items()})
        self.act_norm = M.Normalizer.from_state({k: v.to(self.device) for k, v in saved["act_norm"].items()})
        data = envmod.load_zarr(job.raw_dir(DATASET) / spec["zarr"])
        self.obs = torch.from_numpy(data["obs"]).to(self.device)
        self.act = torch.from_numpy(data["action"]).to(self.device)
        ends = data["episode_ends"]
        args = (m["horizon"], m["n_obs_steps"], m["n_action_steps"])
        self.train_windows = envmod.windows(ends, *args, saved["train_episodes"].cpu().numpy())
        self.heldout_windows = envmod.windows(ends, *args, saved["heldout_episodes"].cpu().numpy())
        self.raw_dir = job.raw_dir(DATASET)
        self.sched = M.scheduler(cfg)
        self.sched.set_timesteps(cfg["cache"]["num_inference_steps"])
        self.steps = len(self.sched.timesteps)
        self.horizon, self.n_obs, self.n_act = args
        self.action_dim = spec["action_dim"]

    def keypoint_map(self) -> np.ndarray:
        """The block-frame keypoint map the demonstrations' observations were recorded with (fitted
        and checked in acquire, check_demonstrations)."""
        from iclr26.core.io import read_json

        return np.asarray(read_json(self.raw_dir / "keypoint_map.json")["keypoint_map"], np.float64)

    def cond(self, windows: np.ndarray):
        import torch

        return self.obs_norm(self.obs[torch.from_numpy(windows[:, : self.n_obs]).to(self.device)])

    def executed(self, x):
        """The executed part of a sampled chunk, in action units (steps n_obs-1 .. +n_action_steps)."""
        lo = self.n_obs - 1
        return self.act_norm.inverse(x)[:, lo: lo + self.n_act]

    def shape(self, batch: int) -> tuple[int, int, int]:
        return (batch, self.horizon, self.action_dim)

    def generator(self, seed: int):
        import torch

        return torch.Generator(device=self.device).manual_seed(seed)


# -------------------------------------------------------------------------------- calibration
def calibration(policy: Policy, seed: int) -> tuple[dict, dict]:
    """Per block: the similarity matrix and the calibration features (K, B, D) of one seed."""
    from . import cache

    c = policy.cfg["cache"]
    rng = np.random.default_rng(seed)
    picks = policy.train_windows[rng.choice(len(policy.train_windows), c["calib_windows"], replace=False)]
    feats = cache.calibrate(policy.net, policy.sched, policy.cond(picks), policy.horizon, policy.action_dim,
                            seed=10_000 + seed)
    feats = {b: f.cpu() for b, f in feats.items()}
    return {b: cache.similarity(f) for b, f in feats.items()}, feats


def settings(cfg: dict, method: str) -> list[tuple[int, int]]:
    """(S, n_bu) pairs a row is run at: every budget; bac also the BU-n sweep at the sweep budget."""
    c = cfg["cache"]
    if method == "full":   # the uncached reference, one record per budget it is compared at
        return [(int(s), 0) for s in c["budgets"]]
    out = [(int(s), int(c["n_bu"]) if method == "bac" else 0) for s in c["budgets"]]
    if method == "bac":
        out += [(int(c["sweep_budget"]), int(n)) for n in c["bu_sweep"]]
    return out


def row_schedules(policy: Policy, method: str, seed: int, cost=None) -> dict:
    """Every setting's update steps for one row and seed: {"S<s>_n<n>": {block: steps}} plus each
    budget's block-wise ACS steps ("own_S<s>": where the FFN update-step error is measured). The
    calibrated rows calibrate on this seed's windows (one uncached pass, similarities, ACS, BUA).
    With `cost` (schedules -> compute per chunk), the row's compute-matched settings
    (`cache.match.rows`) too: "matched_S<s>": (S', schedules), see `matched_budget`; a row with
    matched settings calibrates to derive bac's schedules (uniform included)."""
    from . import cache

    c = policy.cfg["cache"]
    matched = [int(s) for s in ((c.get("match") or {}).get("rows") or {}).get(method) or []] if cost else []
    if method in CALIBRATED or matched:
        sims, feats = calibration(policy, seed)
    else:
        sims, feats = {b: None for b in policy.net.blocks}, {}
    out = {}
    for budget, n_bu in settings(policy.cfg, method):
        out[f"S{budget}_n{n_bu}"] = cache.schedules_for(method, sims, feats, budget, n_bu, c["phi"], policy.steps,
                                                        c["force_final"])
        if method in ("blockwise_acs", "bac"):
            out[f"own_S{budget}"] = cache.schedules_for("blockwise_acs", sims, feats, budget, 0, c["phi"],
                                                        policy.steps, c["force_final"])
    for budget in matched:
        bac = cache.schedules_for("bac", sims, feats, budget, int(c["n_bu"]), c["phi"], policy.steps, c["force_final"])
        out[f"matched_S{budget}"] = matched_budget(
            lambda s: cache.schedules_for(method, sims, feats, s, 0, c["phi"], policy.steps, c["force_final"]),
            cost, cost(bac), budget, policy.steps)
    return out


def matched_budget(schedules_at, cost, target: float, start: int, steps: int) -> tuple[int, dict]:
    """The compute-matched rule (fixed before the matched rows ran): the smallest per-block budget
    S' >= start at which the row's compute per chunk (`cache.match.by`: FLOPs or block evaluations)
    reaches `target`, bac's at the budget start = S with the same seed's calibration. So a matched
    baseline computes at least as much as bac, and one budget step less would compute less."""
    for budget in range(int(start), steps + 1):
        sched = schedules_at(budget)
        if cost(sched) >= target:
            return budget, sched
    raise ValueError(f"no budget up to {steps} reaches the target compute {target}")


def train(job) -> dict:
    """bac's offline schedule calibration, per seed (BAC trains nothing). unified_acs and
    blockwise_acs are training-free here: their calibration is the same cheap pass and runs
    inside their evaluate job (one job fewer each)."""
    import torch

    policy = Policy(job)

    def work(key):
        out = row_schedules(policy, job.method, int(key[1:]))
        torch.save({k: {f"{layer}_{kind}": torch.from_numpy(v) for (layer, kind), v in sched.items()}
                    for k, sched in out.items()}, job.out_dir / f"schedules_{key}.pt")
        return {f"{k}_updates": int(sum(len(v) for v in sched.values())) for k, sched in out.items()}

    return {"units": job.units([f"s{s}" for s in job.seeds], work, folder="calibration")}


def load_schedules(job, policy: Policy, seed: int, cost=None) -> dict:
    """The row's schedules: bac's from its train job, the other rows' computed here (with their
    compute-matched settings, `cost` per chunk)."""
    import torch

    if job.method in job.paper.training_free:
        return row_schedules(policy, job.method, seed, cost)
    saved = torch.load(job.out_dir / f"schedules_s{seed}.pt", weights_only=True)
    return {k: {(int(b.split("_")[0]), b.split("_")[1]): v.numpy() for b, v in sched.items()}
            for k, sched in saved.items()}


# --------------------------------------------------------------------------------- evaluation
def reference(policy: Policy, windows: np.ndarray, seed: int):
    """The uncached sampler on the held-out windows: its executed actions and the FFN blocks'
    outputs at every step (on the first `eval.error_windows` windows)."""
    import torch

    from . import cache

    n_err = policy.cfg["eval"]["error_windows"]
    rec = {b: [] for b in policy.net.blocks if b[1] == "ffn"}
    x = cache.sample(policy.net, policy.sched, policy.cond(windows), policy.shape(len(windows)),
                     policy.generator(seed), record=rec)
    with torch.no_grad():
        return policy.executed(x), {b: [o[:n_err] for o in v] for b, v in rec.items()}


def cached_errors(policy: Policy, windows: np.ndarray, masks: dict, seed: int, ref,
                  err_steps: dict | None = None) -> tuple[float, float]:
    """The cached sampler from the same x_T and per-step noise as `reference`: the action error of
    the executed chunk (L2 in the action's units, mean over windows) and the FFN blocks' relative
    output error at their update steps after the first (the error surge). `err_steps` ({FFN block:
    steps}) fixes the steps it is measured at (each FFN's own ACS steps for blockwise_acs and bac,
    which both update there: like for like); default: the row's own update steps."""
    from . import cache

    actions_full, ffn_full = ref
    n_err = policy.cfg["eval"]["error_windows"]
    rec = {b: [] for b in ffn_full}
    x = cache.sample(policy.net, policy.sched, policy.cond(windows), policy.shape(len(windows)),
                     policy.generator(seed), update=masks, record=rec)
    errs = []
    for b, outs in rec.items():
        steps = np.flatnonzero(masks[b]) if err_steps is None else np.asarray(err_steps[b])
        for k in steps[steps > 0]:
            assert masks[b][k], f"{b} is not recomputed at step {k}"
            full, cached = ffn_full[b][k], outs[k][:n_err]
            rel = (cached - full).flatten(1).norm(dim=1) / full.flatten(1).norm(dim=1).clamp_min(1e-12)
            errs.append(float(rel.mean()))
    l2 = float((policy.executed(x) - actions_full).norm(dim=-1).mean())
    return l2, float(np.mean(errs)) if errs else 0.0


def closed_loop(policy: Policy, masks: dict | None, seed: int) -> dict:
    """Closed-loop rollouts of `eval.episodes` episodes in lockstep, batched through the policy, as the
    official runner drives it: the last n_obs_steps observations (padded by repeating the first),
    the chunk's actions n_obs_steps-1 .. +n_action_steps, then a new chunk. `eval.simulator`:
    reach_around_t (the tiny task, env.py; its reward is the success indicator, so score = success)
    or gym_pusht (the official Push-T simulator, pusht_sim.py: the official test seeds, `score` =
    the mean max reward = the runner's test/mean_score, `max_coverage`). Returns the metrics."""
    import torch

    from . import cache

    e = policy.cfg["eval"]
    if not e["episodes"]:
        return {"success": float("nan"), "score": float("nan")}
    if e["simulator"] == "gym_pusht":
        from . import pusht_sim

        first = e["pusht"]["test_start_seed"]
        env = pusht_sim.PushTLowdim(policy.keypoint_map(), range(first, first + e["episodes"]), e["pusht"]["max_steps"])
        obs = env.reset()
    elif e["simulator"] == "reach_around_t":
        env = envmod.ReachAroundT(policy.cfg["data"][DATASET]["env"])
        obs = env.reset(np.random.default_rng(20_000 + seed), e["episodes"])
    else:
        raise ValueError(f"eval.simulator must be reach_around_t or gym_pusht, got {e['simulator']!r}")
    history = [obs] * policy.n_obs
    gen = policy.generator(30_000 + seed)
    done = np.zeros(e["episodes"], bool)
    while not done.all():
        cond = policy.obs_norm(torch.from_numpy(np.stack(history[-policy.n_obs:], 1)).float().to(policy.device))
        traj = cache.sample(policy.net, policy.sched, cond, policy.shape(e["episodes"]), gen, update=masks)
        actions = policy.act_norm.inverse(traj).cpu().numpy()
        for a in range(policy.n_act):
            obs, done, success = env.step(actions[:, policy.n_obs - 1 + a])
            history.append(obs)
            if done.all():
                break
    if e["simulator"] == "gym_pusht":
        env.close()
        return {"success": float(success.mean()), "score": float(env.max_reward.mean()),
                "max_coverage": float(env.max_coverage.mean())}
    return {"success": float(success.mean()), "score": float(success.mean())}


def evaluate(job) -> dict:
    from . import cache

    cfg, e = job.cfg, job.cfg["eval"]
    policy = Policy(job)
    net = policy.net
    per_block, rest = cache.block_flops(net, cfg["data"][DATASET]["obs_dim"], policy.horizon, policy.n_obs,
                                        policy.action_dim)
    full_flops = cache.chunk_flops({b: np.arange(policy.steps) for b in net.blocks}, per_block, rest, policy.steps)
    total_blocks = len(net.blocks) * policy.steps
    by = (cfg["cache"].get("match") or {}).get("by", "flops")
    if by not in ("flops", "blocks"):
        raise ValueError(f"cache.match.by must be flops or blocks, got {by!r}")
    cost = ((lambda s: cache.chunk_flops(s, per_block, rest, policy.steps)) if by == "flops"
            else (lambda s: sum(len(v) for v in s.values())))
    gpu = int(str(policy.device).startswith("cuda"))   # the wall-clock claim counts GPU timings only

    def work(key):
        seed = int(key[1:])
        rng = np.random.default_rng(40_000 + seed)
        held = policy.heldout_windows[rng.choice(len(policy.heldout_windows),
                                                 min(e["heldout_windows"], len(policy.heldout_windows)), replace=False)]
        timing_cond = policy.cond(held[:1])
        rows = load_schedules(job, policy, seed, cost)
        records, names, timed, once, ref = [], [], {"full": None}, None, None

        def one(sched, budget, n_bu, headline, matched, used, err_steps=None):
            nonlocal once, ref
            masks = None if job.method == "full" else {b: cache.mask_of(v, policy.steps) for b, v in sched.items()}
            if masks is None:   # the uncached policy: measured once, the same record at every budget
                once = once or {"action_l2": 0.0, "ffn_update_err": 0.0,
                                **closed_loop(policy, None, seed), **mechanism(policy, seed)}
                measured = dict(once)
            else:
                ref = ref or reference(policy, held, 50_000 + seed)
                l2, ffn_err = cached_errors(policy, held, masks, 50_000 + seed, ref, err_steps)
                run_loop = (budget in e["closed_loop_budgets"] and job.method in e["closed_loop_methods"]
                            and (not matched or headline or e.get("closed_loop_matched", True)))
                looped = closed_loop(policy, masks, seed) if run_loop else {"success": np.nan, "score": np.nan}
                measured = {"action_l2": l2, "ffn_update_err": ffn_err, **looped}
            flops = cache.chunk_flops(sched, per_block, rest, policy.steps)
            records.append({"seed": seed, "S": budget, "n_bu": n_bu, "headline": int(headline), "matched": int(matched),
                            "budget": used, **measured, "flops_speedup": full_flops / flops,
                            "gflops_chunk": flops / 1e9,
                            "block_frac": sum(len(v) for v in sched.values()) / total_blocks,
                            "gpu_timing": gpu})
            return masks

        for budget, n_bu in settings(cfg, job.method):
            headline = n_bu == (cfg["cache"]["n_bu"] if job.method == "bac" else 0)
            # matched = 1: the record is in the compute-matched comparison at S (bac's headline setting
            # itself; the uncached reference); the baselines' equal-S records are 0
            masks = one(rows[f"S{budget}_n{n_bu}"], budget, n_bu, headline, headline and job.method in ("full", "bac"),
                        policy.steps if job.method == "full" else budget, rows.get(f"own_S{budget}"))
            if job.method == "full":
                timed["full_again"] = None   # the uncached model against itself: the timer's noise
                names.append("full_again")
            elif headline:
                timed[f"S{budget}"] = masks   # the rows' headline settings (not the BU-n sweep)
                names.append(f"S{budget}")
            else:
                names.append(None)
        for budget in sorted(int(k.split("_S")[1]) for k in rows if k.startswith("matched_S")):
            used, sched = rows[f"matched_S{budget}"]   # the baseline at S' >= S, compute-matched to bac at S
            masks = one(sched, budget, 0, False, True, int(used))
            if e.get("time_matched", True):
                timed[f"M{budget}"] = masks
                names.append(f"M{budget}")
            else:
                names.append(None)
        times = cache.wallclock(net, policy.sched, timing_cond, policy.shape(1), timed, e["timing"]["warmup"],
                                e["timing"]["repeats"], seed=60_000 + seed, clock=e["timing"]["clock"])
        base = float(np.median(times["full"]))
        for rec, name in zip(records, names):
            if name is not None:
                rec.update({"wall_speedup": base / float(np.median(times[name])), "ms_full": 1e3 * base,
                            "ms_chunk": 1e3 * float(np.median(times[name]))})
        return {"records": records}

    done = job.units([f"s{s}" for s in job.seeds], work, folder="evaluation")
    return {"records": [r for key in done for r in done[key]["records"]]}


def mechanism(policy: Policy, seed: int) -> dict:
    """Pre-arm checks on the calibration features: how similar adjacent steps are per block (mean
    and spread over blocks), and how many distinct per-block ACS schedules the sweep budget gives."""
    from . import cache

    sims, _ = calibration(policy, seed)
    adjacent = {b: float(np.mean(np.diag(s, 1))) for b, s in sims.items()}
    c = policy.cfg["cache"]
    distinct = {tuple(cache.acs(s, int(c["sweep_budget"]), c["phi"])) for s in sims.values()}
    return {"adj_sim": float(np.mean(list(adjacent.values()))),
            "adj_sim_spread": float(max(adjacent.values()) - min(adjacent.values())),
            "distinct_schedules": float(len(distinct))}


def figures(cfg: dict, records, out_dir) -> list[Path]:
    from . import plots

    return plots.make_all(cfg, records, Path(out_dir))
