"""Exact propagation of a sampler's law on a grid (card §6.2), and KL by quadrature.

Every scheme's step is  y -> F(y) = a y + b s(t_k, y)  followed by Gaussian noise of variance v
(samplers.py). With exact scores the law of Y_k has a density q_k, and
  - the deterministic part pushes it forward by change of variables,
        q'(z) = q(y) / det F'(y),   y = F^{-1}(z),   F'(y) = a I + b H(t_k, y)   (H = Hessian of log p_t);
  - the noise convolves it with N(0, v I), done exactly on the periodic grid by FFT.

Accuracy. The densities near t = delta are spikes of width ~sqrt(2 delta), so interpolating q or
log q between grid points loses accuracy. We interpolate instead the log-ratio to the exact marginal,
    rho_k = log q_k - log p_{t_k},
which is smooth and O(kappa) (it is the sampler's error). Only rho is interpolated; log p_{t_k}(y)
and det F'(y) are evaluated in closed form at the exact preimage y, which is found by inverting
the tabulated map and refining by Newton's method on the closed-form F. Grid convergence is
checked by the caller (sweeps.grid_sizes: every law on n and n/2 points).

Monotonicity. The change of variables is valid only if F is a bijection, i.e. F' > 0 (1-D) or
F' positive definite (F is then the gradient of a convex potential). Large steps break this
(card §6.7); `NonMonotone` is raised and the caller records the sweep point as skipped.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .samplers import Step
from .targets import Mixture


class NonMonotone(RuntimeError):
    """The deterministic part of a step is not a bijection on the grid: its push-forward is undefined."""


@dataclass(frozen=True)
class Grid:
    """The periodic grid [lo, lo + n dx)^d with n points per axis (d = 1 or 2)."""

    lo: float
    hi: float
    n: int
    dim: int = 1

    @property
    def dx(self) -> float:
        return (self.hi - self.lo) / self.n

    @property
    def axis(self) -> np.ndarray:
        return self.lo + self.dx * np.arange(self.n)

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.n,) * self.dim

    def points(self) -> np.ndarray:
        """All grid points as an (n^d, d) array, axis 0 varying slowest."""
        mesh = np.meshgrid(*([self.axis] * self.dim), indexing="ij")
        return np.stack([m.ravel() for m in mesh], axis=1)


# ----------------------------------------------------------------------------- pieces
def gaussian_smooth(log_q: np.ndarray, var: float, grid: Grid) -> np.ndarray:
    """log of (q * N(0, var I)) by FFT: multiply the transform by exp(-var |k|^2 / 2).

    Round-off leaves ~1e-16 relative noise where the density is astronomically small; clipping
    at the smallest positive double keeps its log finite (that mass is below 1e-14)."""
    top = log_q.max()
    q = np.exp(log_q - top)
    full, half = 2 * np.pi * np.fft.fftfreq(grid.n, grid.dx), 2 * np.pi * np.fft.rfftfreq(grid.n, grid.dx)
    freqs = [full] * (grid.dim - 1) + [half]  # the real FFT halves the last axis
    k2 = sum(np.meshgrid(*[f**2 for f in freqs], indexing="ij"))
    smoothed = np.fft.irfftn(np.fft.rfftn(q) * np.exp(-0.5 * var * k2), s=q.shape)
    return np.log(np.maximum(smoothed, np.finfo(float).tiny)) + top


def normalise(log_q: np.ndarray, grid: Grid) -> np.ndarray:
    """Make exp(log_q) integrate to one on the grid (the transport conserves mass only up to
    interpolation error; renormalising each step keeps that error out of the KL)."""
    top = log_q.max()
    return log_q - top - np.log(np.exp(log_q - top).sum() * grid.dx**grid.dim)


def kl(log_p: np.ndarray, log_q: np.ndarray, grid: Grid) -> float:
    """KL(p || q) = sum p log(p/q) dx by quadrature, both densities renormalised on the grid
    (so that KL(p || p) = 0 exactly and KL >= 0)."""
    log_p, log_q = normalise(log_p, grid), normalise(log_q, grid)
    p = np.exp(log_p)
    mask = p > 0
    return float(np.sum(p[mask] * (log_p[mask] - log_q[mask])) * grid.dx**grid.dim)


# ----------------------------------------------------------------------------- inverse of F
def _map(st: Step, target: Mixture, y: np.ndarray):
    """F(y), the Jacobian F'(y), and log p_{t_k}(y), for points y of shape (m, d)."""
    log_p, s, hess = target.evaluate(st.t, y)
    jac = st.a * np.eye(target.dim) + st.b * hess
    return st.a * y + st.b * s, jac, log_p


def _det(jac: np.ndarray) -> np.ndarray:
    """det F'(y) for stacks of 1x1 or 2x2 matrices, written out (np.linalg is slow on tiny matrices)."""
    if jac.shape[1] == 1:
        return jac[:, 0, 0]
    return jac[:, 0, 0] * jac[:, 1, 1] - jac[:, 0, 1] * jac[:, 1, 0]


def _newton_step(jac: np.ndarray, residual: np.ndarray) -> np.ndarray:
    """-F'(y)^{-1} (F(y) - z), by Cramer's rule."""
    if jac.shape[1] == 1:
        return -residual / jac[:, 0]
    det = _det(jac)
    r0, r1 = residual[:, 0], residual[:, 1]
    step = np.stack([jac[:, 1, 1] * r0 - jac[:, 0, 1] * r1, jac[:, 0, 0] * r1 - jac[:, 1, 0] * r0], axis=1)
    return -step / det[:, None]


def _log_det(jac: np.ndarray) -> np.ndarray:
    return np.log(_det(jac))


def _check_monotone(jac: np.ndarray, values: np.ndarray, grid: Grid) -> None:
    if grid.dim == 1:
        ok = (jac[:, 0, 0] > 0).all() and (np.diff(values[:, 0]) > 0).all()
    else:  # a symmetric 2x2 matrix is positive definite iff its trace and determinant are positive
        ok = (jac[:, 0, 0] + jac[:, 1, 1] > 0).all() and (_det(jac) > 0).all()
    if not ok:
        raise NonMonotone("F'(y) is not positive (definite) everywhere on the grid")


def _invert(st: Step, target: Mixture, z: np.ndarray, grid: Grid, f_grid: np.ndarray, iters: int,
            tol: float = 1e-11):
    """Preimages y = F^{-1}(z) of the grid points z, with F'(y) and log p_{t_k}(y) there.

    1-D: invert the increasing table x -> F(x) by linear interpolation, then Newton on the
    closed-form F. 2-D: F = grad of the convex potential a|y|^2/2 + b log p_t(y), so F(y) = z is
    the minimiser of psi(y) = a|y|^2/2 + b log p_t(y) - z.y; damped Newton with backtracking on psi
    converges from any start; we start from y = z - (F(z) - z), exact when F - id is constant.
    """
    if grid.dim == 1:
        y = np.interp(z[:, 0], f_grid[:, 0], z[:, 0])[:, None]
        lower, upper = _bracket(z[:, 0], f_grid[:, 0])
    else:
        y = 2 * z - f_grid
    f, jac, log_p = _map(st, target, y)
    for _ in range(iters):
        if _relevant_residual(f, z, jac, log_p) < tol:
            break
        step = _newton_step(jac, f - z)
        if grid.dim == 1:  # safeguarded Newton: never leave the grid cell that brackets the root
            y = np.clip(y + step, lower, upper)
        else:
            y = _damped(st, target, y, step, z, log_p)
        f, jac, log_p = _map(st, target, y)
    return y, jac, log_p, _relevant_residual(f, z, jac, log_p)


def _relevant_residual(f, z, jac, log_p) -> float:
    """max |F(y) - z| where the new density log p(y) - log det F'(y) is within e^-40 of its peak.
    (Between the atoms at tiny t, F is nearly a jump and Newton stalls, but that region carries
    mass ~exp(-1000): it cannot move the KL.)"""
    log_new = log_p - _log_det(jac)
    relevant = log_new > log_new.max() - 40.0
    return float(np.abs(f - z)[relevant].max())


def _bracket(z: np.ndarray, table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each z, the grid cell [x_j, x_{j+1}] with F(x_j) <= z <= F(x_{j+1}) (open beyond the edges)."""
    axis = z  # the grid points are both the table's abscissae and the targets z
    j = np.searchsorted(table, z)           # table[j-1] < z <= table[j]
    lower = np.where(j > 0, axis[np.maximum(j - 1, 0)], -np.inf)
    upper = np.where(j < len(table), axis[np.minimum(j, len(table) - 1)], np.inf)
    return lower[:, None], upper[:, None]


def _damped(st: Step, target: Mixture, y, step, z, log_p):
    """One backtracking line search on psi, per point (halve the step where psi would increase)."""
    def psi(u, lp):
        return 0.5 * st.a * np.sum(u * u, axis=1) + st.b * lp - np.sum(z * u, axis=1)

    base = psi(y, log_p)
    alpha = np.ones(len(y))
    for _ in range(30):
        trial = y + alpha[:, None] * step
        worse = psi(trial, target.log_p(st.t, trial)) > base + 1e-12 * np.abs(base)
        if not worse.any():
            break
        alpha[worse] *= 0.5
    return y + alpha[:, None] * step


# ----------------------------------------------------------------------------- propagation
def _interp(rho: np.ndarray, y: np.ndarray, grid: Grid) -> np.ndarray:
    """rho at off-grid points: linear (no overshoot), constant beyond the grid's edge."""
    if grid.dim == 1:
        return np.interp(y[:, 0], grid.axis, rho)
    from scipy.ndimage import map_coordinates

    coords = (y.T - grid.lo) / grid.dx
    return map_coordinates(rho, coords, order=1, mode="nearest")


def step_law(log_q: np.ndarray, st: Step, target: Mixture, grid: Grid, newton_iters: int = 2):
    """One sampler step on the law: log q_k -> log q_{k+1} on the grid.

    Returns the new log density and the largest residual |F(y) - z| left by the inversion."""
    z = grid.points()
    f_grid, jac_grid, log_p_grid = _map(st, target, z)
    _check_monotone(jac_grid, f_grid, grid)
    rho = log_q - log_p_grid.reshape(grid.shape)          # rho_k = log q_k - log p_{t_k}: smooth, O(kappa)
    y, jac, log_p_y, residual = _invert(st, target, z, grid, f_grid, newton_iters)
    rho_y = _interp(rho, y, grid)
    # change of variables: log q'(z) = log q_k(y) - log det F'(y), with log q_k = log p_{t_k} + rho_k
    log_q = (rho_y + log_p_y - _log_det(jac)).reshape(grid.shape)
    if st.var > 0:
        log_q = gaussian_smooth(log_q, st.var, grid)
    return normalise(log_q, grid), residual


def propagate(target: Mixture, step_list: list[Step], times: np.ndarray, grid: Grid,
              newton_iters: int = 2, log=None) -> tuple[np.ndarray, float]:
    """The law of Y_N on the grid (log q_N) and the worst inversion residual.

    Started from the exact p_T, so that only the discretisation error is measured, no
    initialisation error. Raises NonMonotone (with the step) if a step is not a bijection."""
    log_q = normalise(target.log_p(times[0], grid.points()).reshape(grid.shape), grid)
    worst = 0.0
    for k, st in enumerate(step_list):
        try:
            log_q, residual = step_law(log_q, st, target, grid, newton_iters)
        except NonMonotone as err:
            raise NonMonotone(f"step {k} (t={st.t:.4g}): {err}") from None
        worst = max(worst, residual)
        if log is not None:
            log(f"step {k + 1}/{len(step_list)} t={times[k + 1]:.3g}", every_s=10.0)
    return log_q, worst
