"""Card 18, BAC: the caching schedules, the DP-T re-implementation, the task, the Push-T simulator's
low-dim observation (gym-pusht), and the offline full-scale path (a pusht.zip in the real zarr layout
served over loopback, sha256-checked; closed loop in the real gym-pusht simulator)."""
from __future__ import annotations

import itertools
import zipfile

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from iclr26.papers.bac import cache, env, pusht_sim  # noqa: E402
from iclr26.papers.bac import model as M  # noqa: E402


def brute_force(sim, budget):
    steps, best, arg = sim.shape[0], -np.inf, None
    for rest in itertools.combinations(range(1, steps), budget - 1):
        c = [0, *rest, steps]
        total = sum(sim[c[m], k] for m in range(budget) for k in range(c[m] + 1, c[m + 1]))
        if total > best:
            best, arg = total, [0, *rest]
    return np.array(arg)


def test_acs_dp_is_the_exact_optimum():
    rng = np.random.default_rng(0)
    for _ in range(5):
        x = rng.normal(size=(9, 4))
        sim = (x @ x.T) / np.outer(np.linalg.norm(x, axis=1), np.linalg.norm(x, axis=1))
        for budget in (1, 2, 3, 4):
            got = cache.acs(sim, budget)
            assert got[0] == 0 and len(got) == budget
            np.testing.assert_array_equal(got, brute_force(sim, budget))


def test_acs_follows_the_similarity_drops():
    # blocks of steps that are similar within and dissimilar across: updates land on the block starts
    sim = np.zeros((12, 12))
    for a, b in ((0, 5), (5, 8), (8, 12)):
        sim[a:b, a:b] = 1.0
    np.testing.assert_array_equal(cache.acs(sim, 3), [0, 5, 8])
    np.testing.assert_array_equal(cache.acs(sim, 3, phi="adjacent"), [0, 5, 8])


def test_uniform_and_bubbling_union():
    np.testing.assert_array_equal(cache.uniform(100, 10), np.arange(0, 100, 10))
    assert len(cache.uniform(100, 5)) == 5
    sched = {(0, "sa"): np.array([0, 50]), (0, "ffn"): np.array([0, 30]), (1, "sa"): np.array([0, 10]),
             (1, "ffn"): np.array([0, 70])}
    errors = {(0, "sa"): 1.0, (0, "ffn"): 0.1, (1, "sa"): 0.9, (1, "ffn"): 0.0}
    out = cache.bubbling_union(sched, errors, 2)
    np.testing.assert_array_equal(out[(0, "sa")], [0, 30, 50, 70])    # every FFN at its layer or deeper
    np.testing.assert_array_equal(out[(1, "sa")], [0, 10, 70])         # only the deeper FFN
    np.testing.assert_array_equal(out[(0, "ffn")], [0, 30])            # not selected
    assert cache.bubbling_union(sched, errors, 0) == sched
    assert cache.bubbling_union(sched, errors, 1) == sched             # official: no BU for one block


def test_bua_ranking_and_forced_final_step():
    f = torch.tensor([[0.0], [1.0], [3.0]])[:, None, :]                # (K, B, D)
    assert cache.pair_l1(f) == pytest.approx((1.0 + 3.0 + 2.0) / 3)   # mean over all pairs i < j
    rng = np.random.default_rng(0)
    feats = {(0, "sa"): torch.from_numpy(rng.normal(size=(12, 2, 3))), (0, "ffn"): torch.zeros(12, 2, 3)}
    sims = {b: cache.similarity(v) for b, v in feats.items()}
    for variant in ("unified_acs", "blockwise_acs", "bac"):
        out = cache.schedules_for(variant, sims, feats, 3, 2, "pairwise", 12)
        assert all(s[0] == 0 and s[-1] == 11 for s in out.values())   # the official adaptive modes
    assert 11 not in cache.schedules_for("uniform", sims, feats, 3, 0, "pairwise", 12)[(0, "sa")]
    shared = cache.schedules_for("unified_acs", sims, feats, 3, 0, "pairwise", 12, final=False)
    np.testing.assert_array_equal(shared[(0, "sa")], cache.acs(sims[(0, "ffn")], 3))   # the last block's


def test_reuse_error():
    f = torch.tensor([[0.0], [1.0], [3.0], [3.0]])[:, None, :]   # (K, B, D)
    assert cache.reuse_error(f, np.array([0, 1, 2, 3])) == 0.0
    assert cache.reuse_error(f, np.array([0, 2])) == pytest.approx((1.0 + 0.0) / 2)


def small_model(layers=2):
    torch.manual_seed(0)
    return M.TransformerForDiffusion(2, 2, horizon=8, n_obs_steps=2, cond_dim=20, n_layer=layers, n_head=2,
                                     n_emb=16).eval()


def test_decoder_layer_matches_torch_transformer_decoder_layer():
    net = small_model(1)
    ref = torch.nn.TransformerDecoderLayer(16, 2, 64, dropout=0.0, activation="gelu", batch_first=True,
                                           norm_first=True).eval()
    ref.load_state_dict(net.layers[0].state_dict())   # the official checkpoint's names load unchanged
    x, memory = torch.randn(3, 8, 16), torch.randn(3, 3, 16)
    ours = x.clone()
    for kind in M.KINDS:
        ours = ours + net.layers[0].branch(kind, ours, memory, net.mask, net.memory_mask)
    want = ref(x, memory, tgt_mask=net.mask, memory_mask=net.memory_mask)
    torch.testing.assert_close(ours, want, atol=1e-5, rtol=1e-5)


def test_cached_sampler_all_updates_equals_uncached_and_reuse_changes_it():
    net = small_model()
    sched = M.scheduler({"noise_scheduler": {"num_train_timesteps": 100, "beta_schedule": "squaredcos_cap_v2",
                                             "clip_sample": True, "prediction_type": "epsilon",
                                             "variance_type": "fixed_small"}})
    sched.set_timesteps(20)
    cond = torch.randn(4, 2, 20)
    every = {b: np.ones(20, bool) for b in net.blocks}
    a = cache.sample(net, sched, cond, (4, 8, 2), torch.Generator().manual_seed(1))
    b = cache.sample(net, sched, cond, (4, 8, 2), torch.Generator().manual_seed(1), update=every)
    torch.testing.assert_close(a, b)
    few = {blk: cache.mask_of(cache.uniform(20, 4), 20) for blk in net.blocks}
    c = cache.sample(net, sched, cond, (4, 8, 2), torch.Generator().manual_seed(1), update=few)
    assert not torch.allclose(a, c)
    per_block, rest = cache.block_flops(net, 20, 8, 2, 2)
    assert all(v > 0 for v in per_block.values()) and rest > 0
    full = cache.chunk_flops({blk: np.arange(20) for blk in net.blocks}, per_block, rest, 20)
    cached = cache.chunk_flops({blk: cache.uniform(20, 4) for blk in net.blocks}, per_block, rest, 20)
    assert full / cached > 2


SPEC = dict(block_centre=[256, 200], block_jitter=30, max_angle=0.35, start_x=[-50, 50], start_y=[-90, -50],
            max_speed=20, goal_radius=15, max_steps=64, expert_step=12, expert_noise=1.0)


def test_demonstrations_are_two_mode_in_the_pusht_schema(tmp_path):
    arrays = env.expert_episodes(SPEC, 20, 0)
    modes = arrays.pop("meta/mode")
    assert 0 < (modes > 0).sum() < 20                                    # both modes present
    env.write_zarr(tmp_path / "d.zarr", arrays)
    data = env.load_zarr(tmp_path / "d.zarr")
    n = len(arrays["data/action"])
    assert data["obs"].shape == (n, 20) and data["action"].shape == (n, 2) and data["episode_ends"][-1] == n
    # averaging the two modes drives into the T: the midpoint of the two first waypoints collides
    e = env.ReachAroundT(SPEC)
    e.reset(np.random.default_rng(0), 1)
    mid = env.to_world(np.array([[[0.0, 15.0]]]), e.pose)[:, 0]
    assert env.collides(mid, e.pose).all()
    w = env.windows(data["episode_ends"], 16, 2, 8)
    assert w.shape[1] == 16 and w.min() == 0 and w.max() == n - 1


def test_full_scale_path_offline(workdir, static_server):
    """scale=full with a pusht.zip in the official layout on a loopback server (sha256 checked):
    DP-T trains in prepare, the schedules calibrate, every row's records come out."""
    import pandas as pd

    from iclr26.core.io import sha256_file
    from iclr26.core.job import load_records, run_paper

    root, base = static_server
    arrays = env.expert_episodes(SPEC, 8, 1)
    arrays.pop("meta/mode")
    store = workdir / "build" / "pusht" / "pusht_cchi_v7_replay.zarr"
    env.write_zarr(store, arrays)
    with zipfile.ZipFile(root / "pusht.zip", "w") as zf:
        for f in sorted(store.rglob("*")):
            if f.is_file():
                zf.write(f, f.relative_to(workdir / "build").as_posix())
    overrides = ["device=cpu", "threads=1", f"data.pusht.url={base}/pusht.zip",
                 f"data.pusht.sha256={sha256_file(root / 'pusht.zip')}", "data.pusht.heldout_fraction=0.25",
                 "model.n_layer=1", "model.n_emb=16", "model.n_head=2", "train.steps=3", "train.batch_size=8",
                 "train.warmup_steps=1", "cache.calib_windows=4", "cache.bu_sweep=[]", "cache.budgets=[5]",
                 "cache.num_inference_steps=10", "eval.heldout_windows=4", "eval.error_windows=2",
                 "eval.timing.warmup=0", "eval.timing.repeats=1", "seed_batch=3"]
    # the closed loop in the real gym-pusht simulator: 2 of the official test episodes, 12 steps each
    overrides += ["eval.episodes=2", "eval.pusht.max_steps=12", "eval.closed_loop_budgets=[5]"]
    # acquire checks the counts (full: 206 episodes, 25,650 steps) and the keypoint map before training
    overrides += ["data.pusht.expect.episodes=8", f"data.pusht.expect.steps={len(arrays['data/action'])}",
                  "cache.match.rows.uniform=[5]"]
    records = pd.DataFrame(load_records(run_paper("bac", "full", overrides, seeds=[0, 1, 2],  # 3: claim tests
                                                  methods=["full", "uniform", "bac"])))
    assert set(records["method"]) == {"full", "uniform", "bac"} and len(records) == 12
    for column in ("success", "score", "max_coverage"):                # every row ran the simulator
        assert records[column].between(0, 1).all(), column
    assert (records["score"] >= records["success"]).all()              # a success has reward 1
    assert (records["score"] <= records["max_coverage"] / 0.95 + 1e-9).all()
    bac = records[records["method"] == "bac"]
    assert len(bac) == 3 and (bac["action_l2"] > 0).all() and (bac["flops_speedup"] > 1).all()
    assert (bac["wall_speedup"] > 0).all() and (bac["matched"] == 1).all() and (bac["gpu_timing"] == 0).all()
    # uniform: the equal-S record and the compute-matched one (closed loop and timing included at full)
    uni = records[records["method"] == "uniform"].set_index("seed")
    matched, equal = uni[uni["matched"] == 1], uni[uni["matched"] == 0]
    assert len(matched) == 3 and len(equal) == 3 and (equal["budget"] == 5).all()
    assert (matched["gflops_chunk"] >= bac.set_index("seed")["gflops_chunk"] - 1e-12).all()
    assert (matched["budget"] > 5).all() and matched["wall_speedup"].notna().all() and matched["score"].notna().all()


def test_pusht_lowdim_observation_matches_gym_pusht():
    """The low-dim observation is built from gym-pusht's state as the official keypoint manager builds
    it (block-frame points moved by the block's pose): with gym-pusht's own 8 corner keypoints as the
    map, it equals gym-pusht's `environment_state`, and `keypoint_map` recovers that map from
    (keypoints, state) pairs; the official seeds' initial states are set."""
    import gymnasium

    sim = pusht_sim.PushTLowdim(np.zeros((8, 2)), [100000, 100001], max_steps=6)   # registers the env
    ref = gymnasium.make(pusht_sim.ENV_ID, obs_type="environment_state_agent_pos", disable_env_checker=True)
    rng = np.random.default_rng(0)
    states, corners = [], []
    for seed in (100000, 100001):
        start = pusht_sim.official_initial_state(seed)
        assert 50 <= start[0] < 450 and 100 <= start[2] < 400 and start.shape == (5,)
        ref_obs, _ = ref.reset(seed=seed, options={"reset_to_state": start})
        np.testing.assert_allclose(ref_obs["agent_pos"], start[:2])
        env = sim.envs[seed - 100000]
        state, _ = env.reset(seed=seed, options={"reset_to_state": start})
        for _ in range(6):                          # push toward the block so that it moves and turns
            target = state[2:4] + rng.normal(0, 20, 2)
            ref_obs, *_ = ref.step(target)
            state, *_ = env.step(target)
            states.append(state)
            corners.append(ref_obs["environment_state"].reshape(8, 2))
    states, corners = np.array(states), np.array(corners)
    assert np.ptp(states[:, 4]) > 0 or np.ptp(states[:, 2]) > 0      # the block's pose varies
    local, error = pusht_sim.keypoint_map(corners, states)
    assert error < 1e-3
    sim.local = local
    np.testing.assert_allclose(sim.observe(states)[:, :16], corners.reshape(len(states), 16), atol=1e-3)
    np.testing.assert_allclose(sim.observe(states)[:, 16:], states[:, :2], atol=1e-4)
    with pytest.raises(ValueError, match="rigid"):
        pusht_sim.keypoint_map(corners + rng.normal(0, 5, corners.shape), states)
    # the episode bookkeeping: the official seeds' starts, done after max_steps, rewards in range
    obs = sim.reset()
    assert obs.shape == (2, 16 + 2)
    np.testing.assert_allclose(obs[:, 16:], [pusht_sim.official_initial_state(s)[:2] for s in (100000, 100001)])
    start = obs[:, 16:].copy()
    for t in range(6):
        obs, done, success = sim.step(obs[:, 16:] + 10.0)
        assert done.all() == (t == 5)
    assert (obs[:, 16:] - start > 5.0).all()                       # the PD-controlled agent followed the targets
    assert ((0 <= sim.max_reward) & (sim.max_reward <= 1) & (0 <= sim.max_coverage)).all()
    sim.close()
    ref.close()


def test_official_split_and_downsample():
    """get_val_mask / downsample_mask as in diffusion_policy.common.sampler (seed 42, 206 episodes)."""
    from iclr26.papers.bac import stages

    train, held = stages.split_episodes(206, 0.02, 42)
    np.testing.assert_array_equal(held, [18, 90, 134, 157])             # the official validation episodes
    assert len(train) == 202 and not set(train) & set(held)
    kept = stages.max_episodes(train, 90, 42)
    assert len(kept) == 90 and set(kept) <= set(train)
    mask = np.zeros(206, bool)
    mask[train] = True
    want = np.flatnonzero(mask)[np.random.default_rng(42).choice(202, 90, replace=False)]
    np.testing.assert_array_equal(kept, np.sort(want))


def test_demonstration_check_fails_with_one_data_error(tmp_path):
    from iclr26.core.errors import DataError
    from iclr26.papers.bac import stages

    arrays = env.expert_episodes(SPEC, 4, 0)
    arrays.pop("meta/mode")
    env.write_zarr(tmp_path / "ok.zarr", arrays)
    info = stages.check_demonstrations(tmp_path / "ok.zarr", {"episodes": 4}, tmp_path)
    assert info["episodes_found"] == 4 and info["keypoint_map_max_error_px"] < 0.5
    assert (tmp_path / "keypoint_map.json").exists()
    with pytest.raises(DataError, match="expected 206"):
        stages.check_demonstrations(tmp_path / "ok.zarr", {"episodes": 206}, tmp_path)
    noise = np.random.default_rng(0).normal(0, 5, arrays["data/keypoint"].shape)
    arrays["data/keypoint"] = arrays["data/keypoint"] + noise
    env.write_zarr(tmp_path / "bad.zarr", arrays)
    with pytest.raises(DataError, match="rigid"):
        stages.check_demonstrations(tmp_path / "bad.zarr", None, tmp_path)


def test_matched_budget_reaches_the_target_with_the_smallest_budget():
    from iclr26.papers.bac import stages

    blocks = [(0, "sa"), (0, "ffn")]
    at = lambda s: {b: cache.uniform(20, s) for b in blocks}   # noqa: E731
    count = lambda sched: sum(len(v) for v in sched.values())  # noqa: E731
    used, sched = stages.matched_budget(at, count, 13, 5, 20)
    assert used == 7 and count(sched) == 14                   # 6 per block is 12 < 13
    assert stages.matched_budget(at, count, 10, 5, 20)[0] == 5


def test_closed_loop_runs_the_cached_schedule(monkeypatch):
    """The closed loop samples every chunk with the row's masks: the blocks the model computes over an
    episode batch equal the chunks sampled times the schedule's updates per chunk (uncached: all)."""
    from iclr26.papers.bac import stages

    net = small_model()
    sched = M.scheduler({"noise_scheduler": {"num_train_timesteps": 100, "beta_schedule": "squaredcos_cap_v2",
                                             "clip_sample": True, "prediction_type": "epsilon",
                                             "variance_type": "fixed_small"}})
    sched.set_timesteps(10)
    policy = stages.Policy.__new__(stages.Policy)
    policy.cfg = {"eval": {"episodes": 3, "simulator": "reach_around_t"},
                  "data": {"pusht": {"env": dict(SPEC, block_jitter=0, max_angle=0.0, max_steps=16)}}}
    policy.net, policy.sched, policy.device, policy.steps = net, sched, torch.device("cpu"), 10
    policy.horizon, policy.n_obs, policy.n_act, policy.action_dim = 8, 2, 4, 2
    policy.obs_norm = M.Normalizer(torch.zeros(20), torch.full((20,), 512.0))
    policy.act_norm = M.Normalizer(torch.zeros(2), torch.full((2,), 512.0))
    calls, real = [], cache.sample
    monkeypatch.setattr(cache, "sample", lambda *a, **k: calls.append(k.get("update")) or real(*a, **k))
    masks = {b: cache.mask_of(cache.uniform(10, 3), 10) for b in net.blocks}
    for update, per_chunk in ((masks, 3 * len(net.blocks)), (None, 10 * len(net.blocks))):
        calls.clear()
        before = net.executed
        out = stages.closed_loop(policy, update, seed=0)
        assert calls and all(c is update for c in calls) and 0 <= out["success"] <= 1
        assert net.executed - before == len(calls) * per_chunk
