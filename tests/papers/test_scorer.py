"""SCORER: the objectives, the two players' updates, seed batching, the environments, all stages."""
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from iclr26.core.errors import DataError
from iclr26.core.job import run_paper, run_stage
from iclr26.papers.scorer import envs as scorer_envs
from iclr26.papers.scorer.agents import (Batch, ReplayBuffer, SeedBatchedAgent, clip_grad_norm_per_seed_, msbe,
                                         td_variance)
from iclr26.papers.scorer.experiment import episode_metrics

HP = dict(gamma=0.99, max_grad_norm=0.3, lr=1e-3, lr_ratio=3, update_order="follower_first", arch="classic",
          latent=16, hidden=16, l1norm=False)
RECORD_KEYS = {"method", "seed", "env", "env_id", "final_return", "auc", "episodes", "curve"}


def _batch(n_seeds, batch_size, obs_dim=4, n_actions=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    return Batch(obs=torch.randn(n_seeds, batch_size, obs_dim, generator=g),
                 action=torch.randint(0, n_actions, (n_seeds, batch_size), generator=g),
                 reward=torch.randn(n_seeds, batch_size, generator=g),
                 next_obs=torch.randn(n_seeds, batch_size, obs_dim, generator=g),
                 terminated=(torch.rand(n_seeds, batch_size, generator=g) < 0.2).float())


def _fields(b):
    return (b.obs, b.action, b.reward, b.next_obs, b.terminated)


def _cat(a, b):
    return Batch(*(torch.cat([x, y], 1) for x, y in zip(_fields(a), _fields(b))))


def _seed(b, i):
    return Batch(*(x[i:i + 1] for x in _fields(b)))


def _update(agent, batch):
    """DQN: one step on the first half; SCORER: B_F = first half, B_L = second half."""
    if agent.is_stackelberg:
        agent.scorer_update(batch, 32, 0.7)
    else:
        agent.dqn_update(batch.split(32)[0], 0.7)


def _params(module):
    return [p.detach().clone() for p in module.parameters()]


def _same(a, b):
    return all(torch.equal(x, y) for x, y in zip(a, b))


# ----------------------------------------------------------------------------- objectives
def test_td_variance_hand_case_and_shift_invariance():
    delta = torch.tensor([[1.0, 2.0, 3.0, 4.0], [0.0, 0.0, 0.0, 2.0]])
    # mean d^2 - (mean d)^2: (30/4 - 2.5^2, 1 - 0.5^2)
    assert torch.allclose(td_variance(delta), torch.tensor([1.25, 0.75]))
    assert torch.allclose(msbe(delta), torch.tensor([7.5, 1.0]))

    shift = torch.zeros(1, requires_grad=True)
    base = torch.randn(3, 64, dtype=torch.float64)
    (g_var,) = torch.autograd.grad(td_variance(base + shift.double()).sum(), shift)
    (g_msbe,) = torch.autograd.grad(msbe(base + shift.double()).sum(), shift)
    assert abs(g_var.item()) < 1e-10          # a constant shift of all TD errors is invisible to the follower
    assert abs(g_msbe.item()) > 1e-3          # ...but not to the MSBE (so this test can fail)


def test_per_seed_clipping_is_independent():
    grads = [torch.tensor([[3.0, 4.0], [0.3, 0.4]]), torch.zeros(2, 1)]  # seed norms 5 and 0.5
    norms = clip_grad_norm_per_seed_(grads, 1.0)
    assert torch.allclose(norms, torch.tensor([5.0, 0.5]))
    assert torch.allclose(grads[0], torch.tensor([[0.6, 0.8], [0.3, 0.4]]))  # only seed 0 is scaled


# ----------------------------------------------------------------------------- the two players
@pytest.mark.parametrize("method", ["scorer", "scorer_msbe"])
def test_follower_and_leader_touch_only_their_own_parameters(method):
    agent = SeedBatchedAgent(method, 4, 2, [0, 1], HP)
    batch = _batch(2, 32)
    target = agent.td_target(batch)
    phi, theta = _params(agent.perception), _params(agent.control)

    agent.follower_update(batch, target, lr_frac=1.0)
    assert _same(_params(agent.control), theta), "follower step moved the leader"
    assert not _same(_params(agent.perception), phi), "follower step did not move the follower"

    phi = _params(agent.perception)
    agent.leader_update(batch, target, lr_frac=1.0)
    assert _same(_params(agent.perception), phi), "leader step moved the follower"
    assert not _same(_params(agent.control), theta), "leader step did not move the leader"
    # target networks move only on sync
    assert not _same(_params(agent.control_target), _params(agent.control))
    agent.sync_targets()
    assert _same(_params(agent.control_target), _params(agent.control))


def test_update_order_option():
    both = _cat(_batch(1, 32), _batch(1, 32, seed=1))
    a = SeedBatchedAgent("scorer", 4, 2, [0], {**HP, "update_order": "follower_first"})
    b = SeedBatchedAgent("scorer", 4, 2, [0], {**HP, "update_order": "leader_first"})
    a.scorer_update(both, 32, 1.0)
    b.scorer_update(both, 32, 1.0)
    # leader first: the follower then fits against the *updated* leader, so phi differs
    assert not _same(_params(a.perception), _params(b.perception))
    with pytest.raises(ValueError, match="update_order"):
        SeedBatchedAgent("scorer", 4, 2, [0], {**HP, "update_order": "simultaneous"})


def test_monolithic_dqn_moves_both_parts_and_per_layer_lr_differs():
    batch = _batch(1, 32)
    plain = SeedBatchedAgent("dqn", 4, 2, [0], HP)
    per_layer = SeedBatchedAgent("dqn_per_layer_lr", 4, 2, [0], HP)
    phi0, theta0 = _params(plain.perception), _params(plain.control)
    assert _same(phi0, _params(per_layer.perception))  # same init for the same seed
    plain.dqn_update(batch, 1.0)
    per_layer.dqn_update(batch, 1.0)
    assert not _same(_params(plain.perception), phi0) and not _same(_params(plain.control), theta0)
    assert _same(_params(plain.control), _params(per_layer.control))  # same head lr, same first step
    # the encoder moved ~r times further with the per-layer lr (Adam's first step is ~lr * sign)
    step_plain = (_params(plain.perception)[0] - phi0[0]).abs().mean()
    step_fast = (_params(per_layer.perception)[0] - phi0[0]).abs().mean()
    assert 2.5 < float(step_fast / step_plain) < 3.5


# ----------------------------------------------------------------------------- seed batching
@pytest.mark.parametrize("method", ["dqn", "scorer"])
def test_batched_seeds_equal_separate_networks(method):
    seeds = [3, 5, 7]
    together = SeedBatchedAgent(method, 4, 2, seeds, HP)
    alone = [SeedBatchedAgent(method, 4, 2, [s], HP) for s in seeds]
    obs = torch.randn(3, 10, 4)
    q_together = together.control(together.perception(obs))
    for i, agent in enumerate(alone):
        assert torch.allclose(q_together[i], agent.control(agent.perception(obs[i:i + 1]))[0], atol=1e-6)

    # one update on the same per-seed batches gives the same weights (clipping and Adam are per seed)
    batch = _cat(_batch(3, 32, seed=1), _batch(3, 32, seed=2))
    for i, agent in enumerate(alone):
        _update(agent, _seed(batch, i))
    _update(together, batch)
    for i, agent in enumerate(alone):
        for p_all, p_one in zip(together.perception.parameters(), agent.perception.parameters()):
            assert torch.allclose(p_all[i], p_one[0], atol=1e-6)
        for p_all, p_one in zip(together.control.parameters(), agent.control.parameters()):
            assert torch.allclose(p_all[i], p_one[0], atol=1e-6)


def test_replay_buffer_keeps_only_valid_transitions_per_seed():
    buf = ReplayBuffer(2, 5, 3, torch.float32)
    obs = torch.arange(2 * 3 * 3, dtype=torch.float32).view(2, 3, 3)
    valid = np.array([[True, False, True], [True, True, True]])
    buf.add(obs, torch.zeros(2, 3, dtype=torch.long), torch.ones(2, 3), obs + 100, torch.zeros(2, 3), valid)
    assert list(buf.size) == [2, 3]
    assert torch.equal(buf.obs[0, :2], obs[0, [0, 2]])      # the autoreset step of seed 0 was dropped
    buf.add(obs, torch.zeros(2, 3, dtype=torch.long), torch.ones(2, 3), obs + 100, torch.zeros(2, 3), valid)
    assert list(buf.size) == [4, 5] and list(buf.ptr) == [4, 1]  # seed 1 wrapped around
    sample = buf.sample(64, np.random.default_rng(0))
    assert torch.equal(sample.next_obs - sample.obs, torch.full_like(sample.obs, 100.0))


def test_episode_metrics_hand_case():
    # seed 0: episodes ending at steps 10, 50, 95 (the last 10% of 100 steps starts after step 90)
    episodes = np.array([[0, 10, 1.0], [0, 50, 3.0], [0, 95, 5.0], [1, 20, 2.0]])
    tr = {"final_fraction": 0.1, "auc_bins": 10, "curve_points": 2}
    m0, m1 = episode_metrics(episodes, 2, 100, tr)
    assert m0["final_return"] == 5.0 and m0["episodes"] == 3
    assert m0["auc"] == pytest.approx(3.0)        # mean over the non-empty bins of the learning curve
    assert m0["curve"] == [2.0, 5.0]                # steps (0, 50] and (50, 100]
    assert m1["final_return"] is None              # no episode ended in the last 10%: not made up


# ----------------------------------------------------------------------------- environments
@pytest.mark.parametrize("spec", [{"env_id": "CartPole-v1", "impl": "native"},
                                  {"env_id": "Acrobot-v1", "impl": "batched"}])
def test_training_envs_match_gymnasium(spec):
    check = scorer_envs.check_against_gymnasium(spec, n_steps=300, num_envs=8)
    assert check["max_abs_deviation"] <= 1e-6
    assert check["flag_mismatches"] == 0
    assert check["terminations"] > 0 and check["truncations"] > 0  # both ways an episode ends were compared


def test_env_check_catches_wrong_dynamics(monkeypatch):
    monkeypatch.setattr(scorer_envs.AcrobotVectorEnv, "dt", 0.21)
    check = scorer_envs.check_against_gymnasium({"env_id": "Acrobot-v1", "impl": "batched"}, 50, 4)
    assert check["max_abs_deviation"] > 1e-3


def test_distractor_wrapper_appends_noise():
    env = scorer_envs.make_vec_env({"env_id": "CartPole-v1", "impl": "native", "distractor_dims": 28}, 16)
    obs, _ = env.reset(seed=3)
    assert obs.shape == (16, 32) and env.single_observation_space.shape == (32,)
    nxt = env.step(np.zeros(16, dtype=np.int64))[0]
    assert not np.allclose(obs[:, 4:], nxt[:, 4:])  # fresh noise every step
    again, _ = scorer_envs.make_vec_env({"env_id": "CartPole-v1", "impl": "native", "distractor_dims": 28},
                                        16).reset(seed=3)
    assert np.array_equal(obs, again)               # seeded


def test_minatar_missing_is_one_clear_error():
    pytest.importorskip("gymnasium")
    try:
        import minatar  # noqa: F401
        pytest.skip("minatar is installed")
    except ImportError:
        pass
    with pytest.raises(DataError, match="minatar"):
        scorer_envs.describe({"env_id": "MinAtar/Breakout-v1", "impl": "sync"})


# ----------------------------------------------------------------------------- all stages
def _records(eval_files):
    out = {}
    for path in eval_files:
        payload = json.loads(Path(path).read_text())
        for r in payload["records"]:
            out[(payload["provenance"]["method"], r["seed"], r["env"])] = r
    return out


def test_smoke_all_stages(workdir):
    evals = run_paper("scorer", "smoke")
    records = _records(evals)
    assert len(evals) == 4 and len(records) == 4 * 2 * 3
    for (method, seed, env), r in records.items():
        assert RECORD_KEYS - {"method"} <= set(r), r.keys()
        assert r["episodes"] > 0 and r["final_return"] is not None
    assert (workdir / "data/smoke/scorer/prepared/acrobot/env_check.json").exists()
    assert (workdir / "runs/smoke/scorer/scorer/s0-1/curves.npz").exists()
    assert not (workdir / "runs/smoke/scorer/scorer/s0-1/checkpoint.pt").exists()

    import pandas as pd

    from iclr26.core.config import compose_job_config
    from iclr26.papers.scorer.experiment import figures

    df = pd.DataFrame([{"method": m, **r} for (m, _, _), r in records.items()])
    paths = figures(compose_job_config("scorer", "smoke"), df, workdir / "fig")
    assert all(Path(p).stat().st_size > 1000 for p in paths)


def test_same_seeds_same_records(workdir, monkeypatch):
    results = []
    for sub in ("a", "b"):
        (workdir / sub).mkdir()
        monkeypatch.chdir(workdir / sub)
        results.append(_records(run_paper("scorer", "smoke", methods=["scorer"])))
    assert results[0] == results[1]


def test_kill_and_resume_gives_the_same_records(workdir, monkeypatch):
    (workdir / "ref").mkdir()
    monkeypatch.chdir(workdir / "ref")
    reference = _records(run_paper("scorer", "smoke", methods=["scorer_msbe"]))

    (workdir / "killed").mkdir()
    monkeypatch.chdir(workdir / "killed")
    for dataset in ("cartpole", "cartpole_distractor", "acrobot"):
        run_stage("acquire", "scorer", "smoke", dataset=dataset)
        run_stage("prepare", "scorer", "smoke", dataset=dataset)
    # smoke: 550 vector steps per env, checkpoint every 100; crash in the 2nd env, right after step 200
    crash = ("train.fail_at_step=750",)
    with pytest.raises(RuntimeError, match="simulated preemption"):
        run_stage("train", "scorer", "smoke", crash, method="scorer_msbe", seed_block="s0-1")
    run_dir = Path("runs/smoke/scorer/scorer_msbe/s0-1")
    state = torch.load(run_dir / "checkpoint.pt", weights_only=False)
    assert list(state["done"]) == ["cartpole"] and state["run"]["it"] == 200
    assert not (run_dir / "metrics.json").exists()

    run_stage("train", "scorer", "smoke", method="scorer_msbe", seed_block="s0-1")
    resumed = _records([run_stage("evaluate", "scorer", "smoke", method="scorer_msbe", seed_block="s0-1")])
    assert resumed == reference  # bit-identical: weights, Adam moments, buffers, env and RNG states restored
    ref_metrics = json.loads((workdir / "ref" / run_dir / "metrics.json").read_text())
    assert json.loads((run_dir / "metrics.json").read_text())["n_updates"] == ref_metrics["n_updates"]


def test_full_scale_code_paths_on_cpu(workdir):
    """What full scale runs, minus MinAtar and the GPU: gymnasium's SyncVectorEnv (pickled into the
    checkpoints), the MinAtar-shaped networks (L1Norm, ReLU) and the official code's update order."""
    from iclr26.core.config import compose_job_config

    full = compose_job_config("scorer", "full")
    assert {e["env_id"] for e in full["data"]["envs"].values()} == {
        "MinAtar/Breakout-v1", "MinAtar/SpaceInvaders-v1", "MinAtar/Asterix-v1"}
    assert full["train"]["arch"] == "minatar" and full["device"] == "cuda"

    overrides = ("data.envs.cartpole.impl=sync", "data.envs.acrobot.impl=sync", "train.arch=minatar",
                 "train.latent=32", "train.hidden=32", "train.update_order=leader_first")
    records = _records(run_paper("scorer", "smoke", overrides, methods=["scorer"]))
    assert len(records) == 2 * 3 and all(r["episodes"] > 0 for r in records.values())
