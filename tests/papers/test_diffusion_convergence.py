"""diffusion_convergence: closed forms, exact law propagation, and a smoke run of every stage."""
import json
import math
from pathlib import Path

import numpy as np
import pytest

from iclr26.papers.diffusion_convergence import analysis, samplers, transport
from iclr26.papers.diffusion_convergence.targets import Mixture, sigma2, triangle_spec

SLUG = "diffusion_convergence"
ATOMS_1D = {"atoms": [-1.0, 1.5], "weights": [0.3, 0.7]}


# ----------------------------------------------------------------------------- closed forms
@pytest.mark.parametrize("spec", [ATOMS_1D, {"atoms": [-1.0, 0.5], "weights": [0.6, 0.4], "widths": [0.2, 0.0]},
                                  triangle_spec()])
@pytest.mark.parametrize("t", [0.05, 0.5, 2.0])
def test_score_and_hessian_match_finite_differences(spec, t):
    target = Mixture.from_spec(spec)
    rng = np.random.default_rng(0)
    x = target.sample(t, 50, rng)
    log_p, score, hess = target.evaluate(t, x)
    eps = 1e-5
    for j in range(target.dim):
        e = np.zeros(target.dim)
        e[j] = eps
        fd_score = (target.log_p(t, x + e) - target.log_p(t, x - e)) / (2 * eps)
        fd_hess = (target.score(t, x + e) - target.score(t, x - e)) / (2 * eps)
        np.testing.assert_allclose(score[:, j], fd_score, rtol=1e-5, atol=1e-5 / sigma2(t))
        np.testing.assert_allclose(hess[:, :, j], fd_hess, rtol=1e-4, atol=1e-4 / sigma2(t) ** 2)
    np.testing.assert_allclose(log_p, target.log_p(t, x))


def test_marginal_integrates_to_one_and_matches_ou_moments():
    target = Mixture.from_spec(ATOMS_1D)
    grid = transport.Grid(-7.0, 7.0, 4096)
    t = 0.3
    p = np.exp(target.log_p(t, grid.points()))
    mean = np.sum(grid.axis * p) * grid.dx
    assert np.sum(p) * grid.dx == pytest.approx(1.0, abs=1e-10)
    assert mean == pytest.approx(np.exp(-t) * (0.3 * -1.0 + 0.7 * 1.5), rel=1e-10)  # E X_t = e^-t E X_0


def test_time_grid_reproduces_card_step_counts():
    # card §6.5: T = 10, delta = 1e-3, kappa = 0.4 ... 0.025 gives N = 37, 76, 156, 315, 633
    counts = [len(samplers.time_grid(10.0, 1e-3, k)) - 1 for k in (0.4, 0.2, 0.1, 0.05, 0.025)]
    assert counts == [37, 76, 156, 315, 633]
    times = samplers.time_grid(8.0, 1e-4, 0.1)
    assert times[0] == 8.0 and times[-1] == pytest.approx(1e-4, rel=1e-12)
    h = -np.diff(times)
    assert (h > 0).all() and (h <= 0.1 * np.minimum(1.0, times[:-1]) * 1.001).all()


def test_noising_step_folds_overshoot_and_ou_noise():
    """a, b, v of ei_ode_noise equal the literal two-stage step (overshooting ODE, then OU noising)."""
    target = Mixture.from_spec(ATOMS_1D)
    t_k, t_next, c = 0.2, 0.18, 0.7
    h, eta = t_k - t_next, c * (t_k - t_next)
    y = np.linspace(-2, 2, 11)[:, None]
    xi = np.random.default_rng(1).standard_normal(y.shape)
    s = target.score(t_k, y)
    z = np.exp(h + eta) * y + np.expm1(h + eta) * s                        # ODE step to t_{k+1} - eta
    literal = np.exp(-eta) * z + np.sqrt(-np.expm1(-2 * eta)) * xi         # OU noising for time eta
    st = samplers.step_coefficients("ei_ode_noise", t_k, t_next, c)
    np.testing.assert_allclose(st.a * y + st.b * s + np.sqrt(st.var) * xi, literal, rtol=1e-12)
    ode = samplers.step_coefficients("ei_ode", t_k, t_next)
    no_noise = samplers.step_coefficients("ei_ode_noise", t_k, t_next, 0.0)
    assert (no_noise.a, no_noise.b, no_noise.var) == pytest.approx((ode.a, ode.b, ode.var))


# ----------------------------------------------------------------------------- transport
def test_kl_of_identical_densities_is_zero_and_positive_otherwise():
    grid = transport.Grid(-7.0, 7.0, 1024)
    target = Mixture.from_spec(ATOMS_1D)
    log_p = target.log_p(0.01, grid.points())
    assert transport.kl(log_p, log_p, grid) == pytest.approx(0.0, abs=1e-14)
    other = target.log_p(0.02, grid.points())
    assert transport.kl(log_p, other, grid) > 1e-3 and transport.kl(other, log_p, grid) > 1e-3


@pytest.mark.parametrize("scheme", samplers.SCHEMES)
def test_grid_propagation_matches_gaussian_closed_form(scheme):
    """Data = one atom at 0: p_t = N(0, sigma_t^2), each step is linear, the KL is closed form."""
    target = Mixture.from_spec({"atoms": [0.0], "weights": [1.0]})
    grid = transport.Grid(-7.0, 7.0, 2048)
    times = samplers.time_grid(4.0, 0.01, 0.2)
    log_q, _ = transport.propagate(target, samplers.steps(scheme, times, 0.5), times, grid)
    log_p = target.log_p(times[-1], grid.points())
    exact_fwd, exact_rev = samplers.gaussian_coordinate_kl(scheme, times, 0.5)
    assert exact_fwd > 1e-3  # a real discretisation error, not a trivially zero one
    assert transport.kl(log_p, log_q, grid) == pytest.approx(exact_fwd, rel=2e-3)
    assert transport.kl(log_q, log_p, grid) == pytest.approx(exact_rev, rel=2e-3)


@pytest.mark.parametrize("scheme", samplers.SCHEMES)
def test_grid_law_matches_sampler_particles(scheme):
    """The propagated law is the law of the sampler: compare with running it on particles."""
    target = Mixture.from_spec(ATOMS_1D)
    grid = transport.Grid(-7.0, 7.0, 2048)
    times = samplers.time_grid(4.0, 0.01, 0.4)  # coarse steps: a visible bias to reproduce
    log_q, _ = transport.propagate(target, samplers.steps(scheme, times, 0.5), times, grid)
    q = np.exp(log_q) * grid.dx
    y = samplers.sample(target, scheme, times, 40000, np.random.default_rng(3))[:, 0]
    for f in (lambda u: u, lambda u: u**2, lambda u: (u > 0.0).astype(float), lambda u: (u > 1.5).astype(float)):
        values = f(y)
        se = values.std() / np.sqrt(len(values))
        assert abs(np.sum(q * f(grid.axis)) - values.mean()) < 4.5 * se + 1e-3


def test_two_dimensional_propagation_matches_particles():
    target = Mixture.from_spec(triangle_spec())
    grid = transport.Grid(-5.0, 5.0, 48, 2)
    times = samplers.time_grid(3.0, 0.2, 0.4)
    log_q, residual = transport.propagate(target, samplers.steps("ei_ode_noise", times, 0.5), times, grid, 30)
    assert residual < 1e-8
    q = np.exp(log_q) * grid.dx**2
    points = grid.points()
    y = samplers.sample(target, "ei_ode_noise", times, 20000, np.random.default_rng(4), 0.5)
    for j in range(2):
        se = y[:, j].std() / np.sqrt(len(y))
        assert abs(np.sum(q.ravel() * points[:, j]) - y[:, j].mean()) < 4.5 * se + 2e-3


def test_non_monotone_step_raises():
    """EI-SDE with kappa = 0.8: F' = 2 - e^0.8 < 0 where p_t is near-Gaussian (t >= 1)."""
    target = Mixture.from_spec(ATOMS_1D)
    grid = transport.Grid(-7.0, 7.0, 512)
    times = samplers.time_grid(4.0, 0.01, 0.8)
    with pytest.raises(transport.NonMonotone):
        transport.propagate(target, samplers.steps("ei_sde", times), times, grid)
    transport.propagate(target, samplers.steps("ei_ode", times), times, grid)  # the ODE map stays monotone


# ----------------------------------------------------------------------------- analysis
def test_power_fit_and_eps_exponent():
    n = np.array([37, 76, 156, 315])
    fit = analysis.power_fit(n, 3.0 * n**-2.0)
    assert fit["slope"] == pytest.approx(-2.0) and fit["slope_hi"] - fit["slope_lo"] < 1e-8
    assert analysis.eps_exponent(fit)["eps_exponent"] == pytest.approx(1.0)
    noisy = analysis.power_fit(n, 3.0 * n**-1.0 * np.array([1.0, 1.1, 0.9, 1.05]))
    assert noisy["slope_lo"] < noisy["slope"] < noisy["slope_hi"]
    assert analysis.eps_exponent(noisy)["eps_exponent"] == pytest.approx(2.0, abs=0.3)  # KL ∝ 1/N: N* ∝ 1/eps^2


def test_girsanov_term_is_seeded_and_decays():
    target = Mixture.from_spec(ATOMS_1D)
    cfg = {"T": 4.0, "delta": 0.01, "kappas": [0.4, 0.2], "samples": 300, "nodes": 2}
    first = analysis.girsanov_records(target, cfg, [0, 1])
    assert first == analysis.girsanov_records(target, cfg, [0, 1])
    values = {(r["seed"], r["kappa"]): r["girsanov"] for r in first if r["sweep"] == "girsanov"}
    assert values[(0, 0.4)] != values[(1, 0.4)]
    assert values[(0, 0.2)] < values[(0, 0.4)]


# ----------------------------------------------------------------------------- the pipeline
def _records(evals):
    from iclr26.core.job import load_records

    return load_records(evals)


def test_smoke_pipeline_is_complete_finite_and_deterministic(workdir, monkeypatch):
    from iclr26.core.job import run_paper

    records = _records(run_paper(SLUG, "smoke"))
    by = lambda **kw: [r for r in records if all(r.get(k) == v for k, v in kw.items())]  # noqa: E731
    for method in samplers.SCHEMES:
        rate = by(method=method, sweep="rate")
        assert len(rate) == 3 and all(r["status"] == "ok" for r in rate)
        for r in rate + by(method=method, sweep="delta") + by(method=method, sweep="rate_2d"):
            for key in ("kl_fwd", "kl_fwd_lo", "kl_fwd_hi", "kl_rev", "N"):
                assert math.isfinite(r[key]), (method, key, r)
            assert 0 < r["kl_fwd_lo"] <= r["kl_fwd"] <= r["kl_fwd_hi"]
        for sweep in ("rate_fit", "rate_2d_fit"):
            (fit,) = by(method=method, sweep=sweep)
            for key in ("slope", "slope_lo", "slope_hi", "eps_exponent", "eps_exponent_lo", "eps_exponent_hi"):
                assert math.isfinite(fit[key]), (method, sweep, key)
            assert fit["slope_lo"] <= fit["slope"] <= fit["slope_hi"] < 0
        (d_fit,) = by(method=method, sweep="d_fit")
        assert math.isfinite(d_fit["d_exponent"])
    assert {r["c"] for r in by(method="ei_ode_noise", sweep="c")} == {0.0, 0.5}
    # EI-ODE + noising with c = 0 is EI-ODE: two independent propagations must agree
    (c0,) = by(method="ei_ode_noise", sweep="c", c=0.0)
    (ode,) = by(method="ei_ode", sweep="rate", kappa=c0["kappa"])
    assert c0["kl_fwd"] == pytest.approx(ode["kl_fwd"], rel=1e-9)
    # Girsanov: one record per seed and step size, only for EI-SDE; it upper-bounds the marginal KL
    girsanov = by(sweep="girsanov")
    assert {r["method"] for r in girsanov} == {"ei_sde"} and {r["seed"] for r in girsanov} == {0, 1}
    for g in girsanov:
        (true,) = by(method="ei_sde", sweep="rate", kappa=g["kappa"])
        assert g["N"] == true["N"] and g["girsanov"] > true["kl_fwd"]
    assert len(by(sweep="girsanov_fit")) == 1

    from iclr26.core.config import compose_job_config
    from iclr26.papers.diffusion_convergence.experiment import figures
    import pandas as pd

    paths = figures(compose_job_config(SLUG, "smoke"), pd.DataFrame(records), workdir / "figures")
    assert {p.name for p in paths} >= {"kl_vs_n.png", "delta_sweep.png", "c_sweep.png", "girsanov.png"}
    assert all(p.stat().st_size > 0 for p in paths)

    second = workdir / "again"
    second.mkdir()
    monkeypatch.chdir(second)
    assert _records(run_paper(SLUG, "smoke")) == records


def test_non_monotone_point_is_skipped_and_recorded(workdir):
    from iclr26.core.job import run_paper

    records = _records(run_paper(SLUG, "smoke", overrides=["train.sweeps.rate.kappas=[0.8,0.4,0.3,0.2]"],
                                 methods=["ei_sde"]))
    (skipped,) = [r for r in records if r["sweep"] == "rate" and r["kappa"] == 0.8]
    assert skipped["status"] == "skipped_nonmonotone" and skipped["kl_fwd"] is None
    (fit,) = [r for r in records if r["sweep"] == "rate_fit"]
    assert fit["skipped_points"] == 1 and fit["n_points"] == 3
    points = json.loads(Path("runs/smoke/diffusion_convergence/ei_sde/s0-1/points.json").read_text())
    assert any(p["status"] == "skipped_nonmonotone" for p in points)


def test_train_resumes_from_finished_points(workdir):
    from iclr26.core.job import run_stage

    for stage in ("acquire", "prepare"):
        for dataset in ("atoms_1d", "triangle_2d"):
            run_stage(stage, SLUG, "smoke", dataset=dataset)
    run_stage("train", SLUG, "smoke", method="ei_ode", seed_block="s0-1")
    laws = sorted(Path("runs/smoke/diffusion_convergence/ei_ode/s0-1/laws").glob("*.npz"))
    stamps = [p.stat().st_mtime_ns for p in laws]
    laws[0].unlink()  # as if the job had been killed before this point was written
    run_stage("train", SLUG, "smoke", method="ei_ode", seed_block="s0-1")
    assert [p.stat().st_mtime_ns for p in laws[1:]] == stamps[1:]  # finished points were not redone
    assert laws[0].exists()
