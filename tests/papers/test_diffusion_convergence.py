"""diffusion_convergence: closed forms, exact law propagation, the sweep design and the records
built from the laws (the stages themselves are covered by tests/test_contract.py)."""
import math
import re

import numpy as np
import pytest

from iclr26.core.config import compose_job_config
from iclr26.papers.diffusion_convergence import analysis, samplers, sweeps, transport
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
    log_q, residual = transport.propagate(target, samplers.steps("ei_ode", times), times, grid)  # stays monotone
    assert np.isfinite(log_q).all() and residual < 1e-6


# ----------------------------------------------------------------------------- analysis
def test_power_fit_and_eps_exponent():
    n = np.array([37, 76, 156, 315])
    fit = analysis.power_fit(n, 3.0 * n**-2.0)
    assert fit["slope"] == pytest.approx(-2.0) and fit["slope_hi"] - fit["slope_lo"] < 1e-8
    assert analysis.eps_exponent(fit)["eps_exponent"] == pytest.approx(1.0)
    noisy = analysis.power_fit(n, 3.0 * n**-1.0 * np.array([1.0, 1.1, 0.9, 1.05]))
    assert noisy["slope_lo"] < noisy["slope"] < noisy["slope_hi"]
    assert analysis.eps_exponent(noisy)["eps_exponent"] == pytest.approx(2.0, abs=0.3)  # KL ∝ 1/N: N* ∝ 1/eps^2


def test_path_kl_records_of_both_analyses():
    target = Mixture.from_spec(ATOMS_1D)
    cfg = {"T": 4.0, "delta": 0.01, "kappas": [0.2, 0.15, 0.1], "samples": 300, "nodes": 2}
    first = analysis.path_kl_records(target, cfg, "ei_sde", "girsanov", [0, 1], c=0.5)
    assert first == analysis.path_kl_records(target, cfg, "ei_sde", "girsanov", [0, 1], c=0.5)  # seeded
    values = {(r["seed"], r["kappa"]): r["path_kl"] for r in first if r["sweep"] == "path_kl"}
    assert values[(0, 0.2)] != values[(1, 0.2)]
    assert values[(0, 0.1)] < values[(0, 0.2)]
    assert {r["bound"] for r in first} == {"girsanov"}
    # the fit is of the seed means: one point per step size, not seeds x step sizes
    (fit,) = [r for r in first if r["sweep"] == "path_kl_fit"]
    assert fit["n_seeds"] == 2 and fit["n_points"] == 3
    n_steps = sorted({r["N"] for r in first if r["sweep"] == "path_kl"})
    means = [np.mean([v for (_, k), v in values.items() if k == kappa]) for kappa in (0.2, 0.15, 0.1)]
    assert fit["slope"] == pytest.approx(np.polyfit(np.log(n_steps), np.log(means), 1)[0])
    assert fit["eps_exponent"] == pytest.approx(-2.0 / fit["slope"])
    seed_slopes = [r["slope"] for r in first if r["sweep"] == "path_kl_fit_seed"]
    assert fit["slope_seed_sd"] == pytest.approx(np.std(seed_slopes, ddof=1))

    axes = [transport.Grid(-7.0, 7.0, n).axis for n in (1024, 512)]
    for method in ("ei_ode_noise", "ei_sde"):  # the chain rule applies to both: EI-SDE reads as ODE step + noising
        noised = analysis.path_kl_records(target, cfg, method, "chain_rule", [5, 6], c=0.5, axes=axes)
        points = [r for r in noised if r["sweep"] == "path_kl"]
        assert all(r["status"] == "ok" and r["path_kl_lo"] <= r["path_kl"] <= r["path_kl_hi"] for r in points)
        assert [r["seed"] for r in points] == [5, 5, 5] and points[2]["path_kl"] < points[0]["path_kl"]
        (fit,) = [r for r in noised if r["sweep"] == "path_kl_fit"]
        assert fit["slope"] == pytest.approx(np.polyfit(np.log([p["N"] for p in points]),
                                                        np.log([p["path_kl"] for p in points]), 1)[0])
    # kappa = 0.4: EI-SDE's noise variance e^{0.8} - 1 > 1 has no ODE + noising reading: recorded, left out
    wide = analysis.path_kl_records(target, {**cfg, "kappas": [0.4, 0.2, 0.1]}, "ei_sde", "chain_rule", [0],
                                    c=0.5, axes=axes)
    assert [r["status"] for r in wide if r["sweep"] == "path_kl"] == ["undefined", "ok", "ok"]
    (fit,) = [r for r in wide if r["sweep"] == "path_kl_fit"]
    assert fit["n_points"] == 2 and fit["skipped_points"] == 1
    with pytest.raises(ValueError, match="quadrature points"):
        analysis.path_kl_records(target, cfg, "ei_ode_noise", "chain_rule", [0], c=0.5)
    for method, bound in (("ei_ode", "chain_rule"), ("ei_ode_noise", "girsanov"), ("ei_sde", "other")):
        with pytest.raises(ValueError, match="no path-KL bound"):
            analysis.path_kl_records(target, cfg, method, bound, [0], c=0.5, axes=axes)


def test_ei_sde_step_reads_as_ode_step_plus_noising():
    """EI-SDE's noise e^{2h} - 1 equals forward noising for eta with 1 - e^{-2 eta} = e^{2h} - 1, eta = h + O(h^2),
    and its score coefficient 2(e^h - 1) differs from the overshooting ODE step's e^h - e^{-eta} by O(h^2);
    the noising scheme's overshoot is c h by construction; no reading for v >= 1 or past t = 0."""
    for h in (0.1, 0.05, 0.025):
        sde = samplers.step_coefficients("ei_sde", 1.0 + h, 1.0)
        eta = analysis.noising_overshoot(sde, 1.0)
        assert -np.expm1(-2 * eta) == pytest.approx(np.expm1(2 * h))
        assert 0 < eta - h < 3 * h * h  # eta = h + 2 h^2 + O(h^3)
        assert abs(sde.b - (np.exp(h) - np.exp(-eta))) < 3 * h * h
        noisy = samplers.step_coefficients("ei_ode_noise", 1.0 + h, 1.0, 0.5)
        assert analysis.noising_overshoot(noisy, 1.0) == pytest.approx(0.5 * h)
    with pytest.raises(ValueError, match="noise variance"):
        analysis.noising_overshoot(samplers.step_coefficients("ei_sde", 1.4, 1.0), 1.0)
    with pytest.raises(ValueError, match="pass t = 0"):
        analysis.noising_overshoot(samplers.step_coefficients("ei_sde", 0.3, 0.1), 0.1)


# ----------------------------------------------------------------------------- the exact flow and the chain-rule bound
def test_flow_map_is_the_exact_probability_flow():
    """Closed form for one atom (p_t = N(0, sigma_t^2): Phi(y) = y sigma_to / sigma_from), and a fine RK4
    integration of the probability-flow ODE dx/dt = -x - s(t, x) for the two-atom mixture."""
    atom = Mixture.from_spec({"atoms": [0.0], "weights": [1.0]})
    y = np.linspace(-5, 5, 11) * np.sqrt(sigma2(0.3))
    np.testing.assert_allclose(atom.flow_map(0.3, 0.1, y), y * np.sqrt(sigma2(0.1) / sigma2(0.3)), atol=1e-12)

    target = Mixture.from_spec(ATOMS_1D)
    y = np.linspace(-2.5, 2.5, 11)
    x, t, n = y[:, None].copy(), 0.5, 400
    h = (0.05 - 0.5) / n
    f = lambda t, x: -x - target.score(t, x)  # noqa: E731
    for _ in range(n):
        k1 = f(t, x)
        k2 = f(t + h / 2, x + h / 2 * k1)
        k3 = f(t + h / 2, x + h / 2 * k2)
        k4 = f(t + h, x + h * k3)
        x, t = x + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4), t + h
    np.testing.assert_allclose(target.flow_map(0.5, 0.05, y), x[:, 0], atol=1e-7)
    far = target.flow_map(0.0011, 0.001, np.array([-30.0, 30.0]))  # both tails resolved
    assert np.isfinite(far).all() and far[0] < -28 and far[1] > 28


@pytest.mark.parametrize("scheme", ["ei_ode_noise", "ei_sde"])
def test_chain_rule_path_kl_matches_the_gaussian_closed_form(scheme):
    """One atom at 0: Phi(y) = y sigma_{t'}/sigma_{t_k}, the step's mean is A y with A = a - b/sigma_{t_k}^2, so
    each step adds (e^{-eta} sigma_{t'}/sigma_{t_k} - A)^2 sigma_{t_k}^2 / (2 v), t' = t_{k+1} - eta."""
    target = Mixture.from_spec({"atoms": [0.0], "weights": [1.0]})
    times, c = samplers.time_grid(4.0, 0.01, 0.2), 0.5
    expected = 0.0
    for t_k, t_next in zip(times[:-1], times[1:]):
        st = samplers.step_coefficients(scheme, t_k, t_next, c)
        eta, s2 = -0.5 * np.log1p(-st.var), sigma2(t_k)
        if scheme == "ei_ode_noise":
            assert eta == pytest.approx(c * (t_k - t_next))
        slope = st.a - st.b / s2
        expected += (np.exp(-eta) * np.sqrt(sigma2(t_next - eta) / s2) - slope) ** 2 * s2 / (2 * st.var)
    assert expected > 1e-4
    axis = transport.Grid(-7.0, 7.0, 1024).axis
    assert analysis.chain_rule_path_kl(target, times, scheme, c, axis) == pytest.approx(expected, rel=1e-9)
    assert analysis.chain_rule_path_kl(target, times, "ei_ode_noise", 0.0, axis) == float("inf")  # no noise
    assert analysis.chain_rule_path_kl(target, times, "ei_ode", c, axis) == float("inf")


@pytest.mark.parametrize("scheme,kappas", [("ei_ode_noise", (0.4, 0.2)), ("ei_sde", (0.2,))])
def test_chain_rule_path_kl_bounds_the_marginal_kl_and_converges_in_nodes(scheme, kappas):
    """KL of the path laws >= KL of the marginals at t = delta (data processing): the chain-rule bound must
    exceed the exactly propagated KL(p_delta || q_N) of the same scheme; and the quadrature is converged."""
    target = Mixture.from_spec(ATOMS_1D)
    grid = transport.Grid(-7.0, 7.0, 2048)
    for kappa in kappas:
        times = samplers.time_grid(4.0, 0.01, kappa)
        log_q, _ = transport.propagate(target, samplers.steps(scheme, times, 0.5), times, grid)
        marginal = transport.kl(target.log_p(times[-1], grid.points()), log_q, grid)
        bound = analysis.chain_rule_path_kl(target, times, scheme, 0.5, transport.Grid(-7.0, 7.0, 1024).axis)
        assert bound > marginal > 1e-3
        finer = analysis.chain_rule_path_kl(target, times, scheme, 0.5, transport.Grid(-7.0, 7.0, 2048).axis)
        assert finer == pytest.approx(bound, rel=1e-3)


def test_girsanov_path_term_bounds_the_marginal_kl():
    """KL of the path laws >= KL of their marginals at t = delta (data processing): the Monte-Carlo
    path term of EI-SDE must exceed the exactly propagated KL(p_delta || q_N)."""
    target = Mixture.from_spec(ATOMS_1D)
    grid = transport.Grid(-7.0, 7.0, 2048)
    for kappa in (0.4, 0.2):
        times = samplers.time_grid(4.0, 0.01, kappa)
        log_q, _ = transport.propagate(target, samplers.steps("ei_sde", times), times, grid)
        marginal = transport.kl(target.log_p(times[-1], grid.points()), log_q, grid)
        path, se = analysis.girsanov_term(target, times, 300, 2, np.random.default_rng(0))
        assert path - 4 * se > marginal > 1e-3


# ----------------------------------------------------------------------------- the sweep design
def test_law_keys_name_each_law_once_and_sweeps_share_laws():
    cfg = compose_job_config("diffusion_convergence", "tiny")
    for method in samplers.SCHEMES:
        points = sweeps.sweep_points(cfg, method)
        laws = {}
        for point in points:
            for n in sweeps.grid_sizes(cfg, point["dataset"]):
                setting = tuple(point[k] for k in ("dataset", "T", "kappa", "delta", "c")) + (n,)
                laws.setdefault(sweeps.law_key(method, point, n), set()).add(setting)
        assert all(len(settings) == 1 for settings in laws.values()), method  # one law per key
        assert len(laws) < 2 * len(points)  # the delta, c and d sweeps share the point T=8, kappa=0.1, delta=1e-3
    noisy = sweeps.sweep_points(cfg, "ei_ode_noise")
    assert {p["c"] for p in noisy if p["sweep"] == "c"} == {0.0, 0.25, 0.5, 1.0, 2.0}
    assert all(p["c"] is None for p in sweeps.sweep_points(cfg, "ei_sde"))
    assert sweeps.grid_sizes(cfg, "atoms_1d") == [8192, 4096]
    assert sweeps.deltas_used(cfg, "atoms_1d") == [0.01, 0.001, 0.0001]


def test_non_monotone_point_is_skipped_and_left_out_of_the_fit():
    cfg = compose_job_config("diffusion_convergence", "smoke")
    target = Mixture.from_spec(ATOMS_1D)
    point = {"sweep": "rate", "dataset": "atoms_1d", "T": 4.0, "kappa": 0.8, "delta": 0.01, "c": None}
    messages = []
    log_q, summary = sweeps.propagate_law(cfg, target, "ei_sde", point, 512, messages.append)
    assert log_q is None and summary["status"] == "skipped_nonmonotone" and "WARNING" in messages[0]

    rows = [{"sweep": "rate", "dataset": "atoms_1d", "delta": 0.01, "N": n, "status": "ok",
             "kl_fwd": 3.0 * n**-2.0, "kl_fwd_coarse": 3.1 * n**-2.0, "kl_rev": 2.0 * n**-2.0,
             "kl_rev_coarse": 2.1 * n**-2.0} for n in (20, 40, 80)]
    rows.append({**rows[0], "N": 10, "status": "skipped_nonmonotone", "kl_fwd": float("nan")})
    fit = analysis.rate_fit(rows, "rate", seed=0)
    assert fit["skipped_points"] == 1 and fit["n_points"] == 3
    assert fit["slope"] == pytest.approx(-2.0) and fit["eps_exponent"] == pytest.approx(1.0)


# ----------------------------------------------------------------------------- records from laws
def _point(n, key, status="ok", kappa=0.2):
    return {"sweep": "rate", "dataset": "atoms_1d", "T": 4.0, "kappa": kappa, "delta": 0.01, "c": None,
            "n": n, "key": key, "N": 30, "status": status, "residual": 0.0}


def test_kl_rows_take_the_fine_grid_with_the_coarse_difference_as_error_bar():
    kls = {"fine": (0.10, 0.20), "coarse": (0.13, 0.19), "fine_b": (0.05, 0.06)}
    points = [_point(2048, "fine"), _point(1024, "coarse"),
              _point(2048, "fine_b", kappa=0.4), _point(1024, "bad", "skipped_nonmonotone", kappa=0.4)]
    good, skipped = analysis.kl_rows(points, kls)
    assert good["grid_n"] == 2048 and "c" not in good
    assert (good["kl_fwd"], good["kl_fwd_coarse"]) == (0.10, 0.13)
    assert (good["kl_fwd_lo"], good["kl_fwd_hi"]) == pytest.approx((0.07, 0.13))
    assert (good["kl_rev_lo"], good["kl_rev_hi"]) == pytest.approx((0.19, 0.21))
    assert skipped["status"] == "skipped_nonmonotone" and math.isnan(skipped["kl_fwd"])  # skipped on one grid


def test_d_sweep_adds_closed_form_gaussian_coordinates():
    times = samplers.time_grid(4.0, 0.01, 0.3)
    row = {"sweep": "d", "dataset": "atoms_1d", "T": 4.0, "kappa": 0.3, "delta": 0.01, "N": len(times) - 1,
           "status": "ok", "kl_fwd": 0.05, "kl_fwd_lo": 0.04, "kl_fwd_hi": 0.06, "kl_fwd_coarse": 0.055,
           "kl_rev": 0.07}
    records = analysis.d_sweep([row], "d", [1, 4, 16], "ei_ode", seed=0)
    gauss_fwd, gauss_rev = samplers.gaussian_coordinate_kl("ei_ode", times)
    by_d = {r["d"]: r for r in records if r["sweep"] == "d"}
    assert by_d[1]["kl_fwd"] == row["kl_fwd"] and gauss_fwd > 1e-4
    assert by_d[16]["kl_fwd"] == pytest.approx(0.05 + 15 * gauss_fwd)
    assert by_d[16]["kl_rev"] == pytest.approx(0.07 + 15 * gauss_rev)
    (fit,) = [r for r in records if r["sweep"] == "d_fit"]
    slope = np.polyfit(np.log([1, 4, 16]), np.log([by_d[d]["kl_fwd"] for d in (1, 4, 16)]), 1)[0]
    assert fit["d_exponent"] == pytest.approx(slope) and 0 < slope < 1


# ----------------------------------------------------------------------------- per-scale text
def _sweep_spec(cfg: dict, sweep: str) -> dict | None:
    if sweep == "path_kl":
        return cfg["eval"]["path_kl"]
    return cfg["train"]["sweeps"].get(sweep)


def _values(spec: dict, key: str) -> list:
    return list(spec[f"{key}s"]) if f"{key}s" in spec else [spec[key]]


@pytest.mark.parametrize("scale", ["smoke", "tiny", "full"])
def test_table_columns_and_claims_name_points_that_the_scale_runs(scale):
    """Every column and claim selects a point its scale runs, and every N, δ, d or c that a column label
    quotes is that point's (N from the schedule): the table's text is true at every scale."""
    cfg = compose_job_config(SLUG, scale)
    selections = [({**sec.get("where", {}), **col.get("where", {})}, col["label"])
                  for sec in cfg["table"]["sections"] for col in sec["columns"]]
    selections += [(claim["where"], "") for claim in cfg["claims"]]
    for where, label in selections:
        spec = _sweep_spec(cfg, where["sweep"])
        if spec is None:  # a fit record (rate_fit, d_fit, path_kl_fit, ...): one per scheme, nothing to name
            assert where["sweep"].endswith("_fit"), where
            continue
        for key, plural in (("kappa", "kappa"), ("delta", "delta"), ("c", "c"), ("d", "dim")):
            if key in where:
                allowed = _values(spec, plural) if key != "c" or "cs" in spec else [cfg["train"]["c"]]
                assert where[key] in allowed, (scale, where, label)
        if found := re.search(r"N=(\d+)", label):
            kappa, delta = where.get("kappa", spec.get("kappa")), where.get("delta", spec.get("delta"))
            assert int(found.group(1)) == len(samplers.time_grid(spec["T"], delta, kappa)) - 1, (scale, label)
        for key, pattern in (("delta", r"δ=([0-9.e-]+)"), ("d", r"^d=(\d+)"), ("c", r"^c=([0-9.]+)")):
            if found := re.search(pattern, label):
                assert float(found.group(1)) == float(where[key]), (scale, label)
