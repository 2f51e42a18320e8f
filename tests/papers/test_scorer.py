"""SCORER: the objectives and their written-out gradients, the two players' updates, seed batching,
the environments and their checkpoint state, resume inside a later environment, the full-scale path.
(All stages, determinism and a kill at the first checkpoint: tests/test_contract.py.)"""
import numpy as np
import pytest
import torch

from iclr26.core import faults
from iclr26.core.errors import DataError
from iclr26.core.job import load_records, run_paper
from iclr26.papers.scorer import envs as scorer_envs
from iclr26.papers.scorer.agents import (
    SeedBatchedAgent,
    clip_grad_norm_per_seed_,
    msbe,
    msbe_grad,
    td_variance,
    td_variance_grad,
)
from iclr26.papers.scorer.networks import control_net, perception_net, seed_generators
from iclr26.papers.scorer.replay import Batch, ReplayBuffer
from iclr26.papers.scorer.training import episode_metrics

HP = dict(gamma=0.99, max_grad_norm=0.3, lr=1e-3, lr_ratio=3, update_order="follower_first", arch="classic",
          latent=16, hidden=16, l1norm=False)


def _batch(n_seeds, batch_size, obs_dim=4, n_actions=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    return Batch(obs=torch.randn(n_seeds, batch_size, obs_dim, generator=g),
                 action=torch.randint(0, n_actions, (n_seeds, batch_size), generator=g),
                 reward=torch.randn(n_seeds, batch_size, generator=g),
                 next_obs=torch.randn(n_seeds, batch_size, obs_dim, generator=g),
                 terminated=(torch.rand(n_seeds, batch_size, generator=g) < 0.2).float())


def _cat(a, b):
    return Batch(*(torch.cat([x, y], 1) for x, y in zip(a.fields(), b.fields())))


def _seed(b, i):
    return Batch(*(x[i:i + 1] for x in b.fields()))


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

    base = torch.randn(3, 64, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    shift = torch.full((3, 1), 0.7, dtype=torch.float64)
    assert torch.allclose(td_variance_grad(base + shift).sum(-1), torch.zeros(3, dtype=torch.float64), atol=1e-12)
    assert (msbe_grad(base + shift).sum(-1) - msbe_grad(base).sum(-1)).abs().min() > 1e-3  # MSBE sees it


@pytest.mark.parametrize("objective, gradient", [(msbe, msbe_grad), (td_variance, td_variance_grad)])
def test_written_out_loss_gradients_equal_autograd(objective, gradient):
    delta = torch.randn(4, 48, dtype=torch.float64, generator=torch.Generator().manual_seed(1), requires_grad=True)
    (expected,) = torch.autograd.grad(objective(delta).sum(), delta)
    assert torch.allclose(gradient(delta.detach()), expected, rtol=1e-12, atol=1e-15)


def _autograd_forward(net, x, params):
    """The network's forward in differentiable torch ops, for the reference gradients."""
    weights = iter(params)
    for op, layer in net.plan:
        if op == "linear":
            weight, bias = next(weights), next(weights)
            x = torch.baddbmm(bias, x, weight.transpose(1, 2) if layer.transposed else weight)
        elif op == "tanh":
            x = torch.tanh(x)
        elif op == "relu":
            x = torch.relu(x)
        else:
            x = x / x.abs().mean(-1, keepdim=True).clamp_min(1e-8)
    return x


@pytest.mark.parametrize("arch, l1norm", [("classic", False), ("classic", True), ("minatar", False)])
@pytest.mark.parametrize("player", ["perception", "control"])
def test_written_out_backward_equals_autograd(arch, l1norm, player):
    gens = seed_generators([0, 1, 2])
    net = (perception_net(10, 16, arch, gens, l1norm) if player == "perception"
           else control_net(16, 12, 3, arch, gens)).double()
    x = torch.randn(3, 20, 10 if player == "perception" else 16, dtype=torch.float64,
                    generator=torch.Generator().manual_seed(2))
    out_grad = torch.randn(3, 20, 16 if player == "perception" else 3, dtype=torch.float64,
                           generator=torch.Generator().manual_seed(3))
    params = [p.detach().clone().requires_grad_(True) for p in net.parameters()]
    x_ref = x.clone().requires_grad_(True)
    expected = torch.autograd.grad(_autograd_forward(net, x_ref, params), [x_ref, *params], out_grad)

    out, saved = net.forward_saving(x)
    assert torch.allclose(out, _autograd_forward(net, x, params).detach(), rtol=1e-12, atol=1e-12)
    x_grad, param_grads = net.backward(saved, out_grad, input_grad=True, param_grads=True)
    assert len(param_grads) == len(params)
    for got, want in zip([x_grad, *param_grads], expected):
        assert torch.allclose(got, want, rtol=1e-10, atol=1e-12)
    # parameter gradients only: the same numbers, and no input gradient
    x_grad, only_params = net.backward(saved, out_grad, input_grad=False, param_grads=True)
    assert x_grad is None and _same(only_params, param_grads)


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
    obs = torch.randn(3, 10, 4, generator=torch.Generator().manual_seed(4))
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


@pytest.mark.parametrize("obs_dtype", [torch.float32, torch.uint8])  # packed rows / separate uint8 fields
def test_replay_buffer_keeps_only_valid_transitions_per_seed(obs_dtype):
    buf = ReplayBuffer(2, 5, 3, obs_dtype)
    assert buf.packed == (obs_dtype == torch.float32)
    obs = np.arange(2 * 3 * 3, dtype=np.float32).reshape(2 * 3, 3)  # rows of 2 seeds x 3 envs
    reward, terminated = np.linspace(-1, 1, 6), np.array([True, False, False, True, False, False])
    valid = np.array([[True, False, True], [True, True, True]])
    buf.add(obs, np.arange(6), reward, obs + 100, terminated, valid)
    assert list(buf.size) == [2, 3]
    # the autoreset step of seed 0 was dropped
    assert torch.equal(buf.field("obs")[0, :2].float(), torch.from_numpy(obs[[0, 2]]))
    assert torch.equal(buf.field("next_obs")[1, :3].float(), torch.from_numpy(obs[3:] + 100))
    assert buf.field("action")[0, :2].tolist() == [0, 2] and buf.field("action")[1, :3].tolist() == [3, 4, 5]
    assert torch.allclose(buf.field("reward")[1, :3], torch.from_numpy(reward[3:]).float())
    assert buf.field("terminated")[0, :2].tolist() == [1.0, 0.0]
    assert buf.field("terminated")[1, :3].tolist() == [1.0, 0.0, 0.0]
    buf.add(obs, np.arange(6), reward, obs + 100, terminated, valid)
    assert list(buf.size) == [4, 5] and list(buf.ptr) == [4, 1]  # seed 1 wrapped around
    assert buf.field("action")[1].tolist() == [5, 4, 5, 3, 4]   # the 6th transition overwrote the 1st
    sample = buf.sample(64, np.random.default_rng(0))
    assert sample.action.dtype == torch.long and sample.obs.dtype == torch.float32
    assert torch.equal(sample.next_obs - sample.obs, torch.full_like(sample.obs, 100.0))
    # each sampled row is one stored transition: action, reward and terminated travel with its obs
    row = (sample.obs[..., 0] / 3).long()                        # obs row i starts at 3 i
    assert torch.equal(sample.action, row)
    assert torch.allclose(sample.reward, torch.from_numpy(reward).float()[row])
    assert torch.equal(sample.terminated, torch.from_numpy(terminated).float()[row])

    restored = ReplayBuffer(2, 5, 3, obs_dtype)
    restored.load_state_dict(buf.state_dict())
    for name in ReplayBuffer.FIELDS:
        assert torch.equal(restored.field(name), buf.field(name))
    assert list(restored.ptr) == list(buf.ptr) and list(restored.size) == list(buf.size)


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
    spec = {"env_id": "CartPole-v1", "impl": "native", "distractor_dims": 28}
    env = scorer_envs.make_vec_env(spec, 16)
    obs, _ = env.reset(seed=3)
    assert obs.shape == (16, 32) and env.single_observation_space.shape == (32,)
    nxt = env.step(np.zeros(16, dtype=np.int64))[0]
    assert not np.allclose(obs[:, 4:], nxt[:, 4:])  # fresh noise every step
    again, _ = scorer_envs.make_vec_env(spec, 16).reset(seed=3)
    assert np.array_equal(obs, again)               # seeded


def _through_a_checkpoint(state):
    """`state` as training saves it and reads it back: tensors and plain data, weights_only=True."""
    import io

    from iclr26.papers.scorer.training import numpy_to_tensors, tensors_to_numpy

    buffer = io.BytesIO()
    torch.save(numpy_to_tensors(state), buffer)
    buffer.seek(0)
    return tensors_to_numpy(torch.load(buffer, weights_only=True))


def _assert_restores_the_same_trajectory(spec, n_envs=6):
    def run(env, steps, seed):
        actions = np.random.default_rng(seed).integers(0, int(env.single_action_space.n), size=(steps, n_envs))
        return [np.concatenate([np.ravel(x).astype(float) for x in env.step(a)[:4]]) for a in actions]

    env = scorer_envs.make_vec_env(spec, n_envs)
    env.reset(seed=5)
    run(env, 40, seed=0)
    state = _through_a_checkpoint(scorer_envs.env_state(env))
    expected = np.stack(run(env, 200, seed=1))
    restored = scorer_envs.restore_env_state(scorer_envs.make_vec_env(spec, n_envs), state)
    assert np.array_equal(np.stack(run(restored, 200, seed=1)), expected)
    return expected[:, -2 * n_envs:]   # terminated, truncated of every step


@pytest.mark.parametrize("spec", [{"env_id": "CartPole-v1", "impl": "native", "distractor_dims": 3},
                                  {"env_id": "Acrobot-v1", "impl": "batched"},
                                  {"env_id": "CartPole-v1", "impl": "sync", "distractor_dims": 2}])
def test_env_state_restores_the_same_trajectory(spec):
    """A checkpointed env continues exactly as the original would (autoresets and noise included)."""
    _assert_restores_the_same_trajectory(spec)


def test_full_scale_minatar_env_state_restores_the_same_trajectory():
    """The full-scale games through a weights_only checkpoint: every game object's arrays, numbers,
    lists and numpy scalars, and the RandomState that minatar.Environment shares with its game once
    seeded. Sticky actions on (the package default 0.1) so that this stream is drawn every step, and
    40-step episodes so that time-limit truncations and autoresets come in."""
    from iclr26.core.config import compose_job_config

    for spec in compose_job_config("scorer", "full")["data"].values():
        flags = _assert_restores_the_same_trajectory({**spec, "make_kwargs": {"sticky_action_prob": 0.1},
                                                      "max_episode_steps": 40}, n_envs=3)
        assert flags.any(), spec["env_id"]   # episodes ended after the restore: autoresets were compared


def test_minatar_missing_is_one_clear_error(monkeypatch):
    import sys

    import gymnasium

    monkeypatch.setitem(sys.modules, "minatar.gym", None)  # as if the package were not installed
    monkeypatch.setattr(gymnasium.envs.registration, "registry", {})
    monkeypatch.setattr(gymnasium, "registry", {}, raising=False)
    monkeypatch.setattr(scorer_envs.gym, "registry", {}, raising=False)
    with pytest.raises(DataError, match="needs the 'minatar' package"):
        scorer_envs.describe({"env_id": "MinAtar/Breakout-v1", "impl": "sync"})


def test_the_pinned_minatar_gives_the_full_scale_games():
    """The full-scale games exist in the pinned package, with the observation shape the
    MinAtar-shaped networks expect (10 x 10 x channels)."""
    from iclr26.core.config import compose_job_config

    for spec in compose_job_config("scorer", "full")["data"].values():
        info = scorer_envs.describe(spec)
        assert info["env_id"] == spec["env_id"] and "(10, 10, " in str(info["observation_space"]), info


def test_full_scale_minatar_matches_gymnax_settings():
    """Full scale asks for no sticky actions and a 1000-step time limit (Gymnax's MinAtar); the
    training env gets them: episodes are truncated (not terminated) at the limit, and the env's game
    really has sticky_action_prob 0."""
    from iclr26.core.config import compose_job_config

    spec = {**compose_job_config("scorer", "full")["data"]["headline"], "max_episode_steps": 5}
    assert spec["make_kwargs"] == {"sticky_action_prob": 0.0}
    env = scorer_envs.make_vec_env(spec, 2)
    assert all(e.unwrapped.game.sticky_action_prob == 0.0 for e in env.envs)
    env.reset(seed=0)
    flags = [env.step(np.zeros(2, dtype=np.int64))[2:4] for _ in range(5)]  # no-op: the ball is still in play
    assert not any(te.any() or tr.any() for te, tr in flags[:4]) and flags[4][1].all() and not flags[4][0].any()
    info = scorer_envs.describe(spec)
    assert info["max_episode_steps"] == 5 and info["make_kwargs"] == {"sticky_action_prob": 0.0}
    plain = scorer_envs.make_vec_env({k: v for k, v in spec.items()
                                      if k not in ("make_kwargs", "max_episode_steps")}, 1)
    assert plain.envs[0].unwrapped.game.sticky_action_prob == 0.1  # the package default the config overrides
    with pytest.raises(Exception, match="need impl=sync"):
        scorer_envs.make_vec_env({**spec, "impl": "native"}, 1)


def test_full_scale_target_sync_matches_the_official_counter():
    """DQN_SCORER.py copies the targets when `timesteps % 1e3 == 0`, timesteps += num_envs per vector
    step: with 128 envs that is every 16,000 env steps; the full config's target_every gives the same."""
    from iclr26.core.config import compose_job_config
    from iclr26.papers.scorer.training import crossed

    tr = compose_job_config("scorer", "full")["train"]
    E, steps = int(tr["num_envs"]), range(1, 2000)
    official = [t for t in steps if (t * E) % 1000 == 0]
    ours = [t for t in steps if crossed(t * E, E, int(tr["target_every"]))]
    assert ours == official and official[:2] == [125, 250]


@pytest.mark.parametrize("scale", ["smoke", "tiny", "full"])
def test_title_percentage_is_the_final_fraction(scale):
    from iclr26.core.config import compose_job_config

    cfg = compose_job_config("scorer", scale)
    assert cfg["table"]["final_window"] == f"{100 * float(cfg['train']['final_fraction']):g}%"
    assert cfg["table"]["final_window"] in cfg["table"]["title"]


# ----------------------------------------------------------------------------- resume, full-scale path
def _records(evals):
    return sorted(load_records(evals), key=lambda r: (r["method"], r["env"], r["seed"]))


def _killed_and_resumed(tmp_path, monkeypatch, name, overrides, after):
    """Train scorer_msbe at smoke scale, stopped right after its `after`-th checkpoint, then resumed."""
    (tmp_path / name).mkdir()
    monkeypatch.chdir(tmp_path / name)
    with faults.armed("train", "checkpoint", after=after), pytest.raises(faults.InjectedFault):
        run_paper("scorer", "smoke", overrides, methods=["scorer_msbe"])
    checkpoint = torch.load("runs/smoke/scorer/scorer_msbe/s0-1/checkpoint.pt", weights_only=True)
    return checkpoint["state"], _records(run_paper("scorer", "smoke", overrides, methods=["scorer_msbe"]))


def test_resume_inside_a_later_environment_from_a_weights_only_checkpoint(tmp_path, monkeypatch):
    (tmp_path / "reference").mkdir()
    monkeypatch.chdir(tmp_path / "reference")
    reference = _records(run_paper("scorer", "smoke", methods=["scorer_msbe"]))
    # smoke: 550 vector steps per environment, a checkpoint every 100: the 7th is step 200 of `second`
    state, resumed = _killed_and_resumed(tmp_path, monkeypatch, "killed", (), after=7)
    assert (state["slot"], state["it"]) == ("second", 200)
    assert resumed == reference  # weights, Adam moments, buffers, env and RNG states all restored


def test_full_scale_code_paths_on_cpu(tmp_path, monkeypatch):
    """What full scale runs, minus MinAtar and the GPU: gymnasium's SyncVectorEnv (saved in the
    checkpoints as plain data), the MinAtar-shaped networks (L1Norm, ReLU) and the official code's update order;
    killed inside the first environment and resumed, it gives the uninterrupted run's records."""
    from iclr26.core.config import compose_job_config

    full = compose_job_config("scorer", "full")
    assert {spec["env_id"] for spec in full["data"].values()} == {
        "MinAtar/Breakout-v1", "MinAtar/SpaceInvaders-v1", "MinAtar/Asterix-v1"}
    assert full["train"]["arch"] == "minatar" and full["device"] == "cuda"

    overrides = ("data.headline.impl=sync", "data.third.impl=sync", "train.arch=minatar",
                 "train.latent=32", "train.hidden=32", "train.update_order=leader_first")
    (tmp_path / "reference").mkdir()
    monkeypatch.chdir(tmp_path / "reference")
    reference = _records(run_paper("scorer", "smoke", overrides, methods=["scorer_msbe"]))
    assert len(reference) == 2 * 3 and all(r["episodes"] > 0 for r in reference)
    state, resumed = _killed_and_resumed(tmp_path, monkeypatch, "killed", overrides, after=2)
    assert (state["slot"], state["it"]) == ("headline", 200) and set(state["env"]) == {"autoreset", "envs", "rngs"}
    assert resumed == reference
