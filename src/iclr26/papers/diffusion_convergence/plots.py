"""Figures: KL versus N (log-log, fitted slopes), delta and c sweeps, d sweep, path-KL bounds."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from iclr26.core.figures import pyplot, save

LABELS = {"ei_sde": "EI-SDE (Benton et al.)", "ei_ode": "EI-ODE (no noise)",
          "ei_ode_noise": "EI-ODE + noising (our reading)"}
COLORS = {"ei_sde": "tab:blue", "ei_ode": "tab:orange", "ei_ode_noise": "tab:green"}


def _rows(records, **where):
    df = records
    for key, value in where.items():
        if key not in df:
            return df.iloc[0:0]
        df = df[df[key] == value]
    return df


def _finite(df, col):
    return df[np.isfinite(df[col].astype(float))] if col in df else df.iloc[0:0]


def _plain_log_ticks(fig) -> None:
    """Plain numbers on log axes (matplotlib's minor labels like 3x10^2 collide)."""
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    for ax in fig.axes:
        if ax.get_xscale() == "log":
            ax.xaxis.set_major_formatter(ScalarFormatter())
            ax.xaxis.set_minor_formatter(NullFormatter())


def _kl_with_error_bar(ax, pts, x: str, **style) -> None:
    """KL(p_delta || q_N) against `x`, with the grid-refinement interval [kl_fwd_lo, kl_fwd_hi]."""
    ax.errorbar(pts[x], pts["kl_fwd"], yerr=[pts["kl_fwd"] - pts["kl_fwd_lo"], pts["kl_fwd_hi"] - pts["kl_fwd"]],
                marker="o", **style)


def _save(fig, path: Path) -> Path:
    _plain_log_ticks(fig)
    return save(fig, path)


def kl_vs_n(records, out_dir: Path) -> Path | None:
    plt = pyplot()
    panels = [(s, t) for s, t in (("rate", "1-D Dirac mixture"), ("rate_2d", "2-D triangle (non-product)"))
              if len(_rows(records, sweep=s))]
    if not panels:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4.2), squeeze=False)
    for ax, (sweep, title) in zip(axes[0], panels):
        for method, color in COLORS.items():
            pts = _finite(_rows(records, sweep=sweep, method=method), "kl_fwd").sort_values("N")
            if pts.empty:
                continue
            fit = _rows(records, sweep=f"{sweep}_fit", method=method)
            slope = f", slope {fit['slope'].iloc[0]:.2f}" if len(fit) else ""
            _kl_with_error_bar(ax, pts, "N", color=color, label=f"{LABELS[method]}{slope}")
            ax.plot(pts["N"], pts["kl_rev"], ls=":", color=color)
        n = np.array(sorted(_finite(_rows(records, sweep=sweep), "kl_fwd")["N"].unique()), float)
        if len(n):
            ref = _finite(_rows(records, sweep=sweep), "kl_fwd")["kl_fwd"].max()
            ax.plot(n, ref * (n / n[0]) ** -2.0, "k--", lw=0.8, label="∝ N^-2 (paper)")
            ax.plot(n, ref * (n / n[0]) ** -1.0, "k-.", lw=0.8, label="∝ N^-1 (prior bound)")
        ax.set(xscale="log", yscale="log", xlabel="steps N", title=title,
               ylabel="KL(p_δ‖q_N) (solid), KL(q_N‖p_δ) (dotted)")
        ax.legend(fontsize=7)
    return _save(fig, out_dir / "kl_vs_n.png")


def sweep_plot(records, out_dir: Path, sweep: str, x: str, xlabel: str, name: str, logx: bool) -> Path | None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 4.2))
    drawn = False
    for method, color in COLORS.items():
        pts = _finite(_rows(records, sweep=sweep, method=method), "kl_fwd")
        if pts.empty or x not in pts:
            continue
        pts = pts.sort_values(x)
        _kl_with_error_bar(ax, pts, x, color=color, label=LABELS[method])
        drawn = True
    if not drawn:
        plt.close(fig)
        return None
    ax.set(xscale="log" if logx else "linear", yscale="log", xlabel=xlabel, ylabel="KL(p_δ‖q_N)")
    ax.legend(fontsize=8)
    return _save(fig, out_dir / name)


def path_kl_plot(records, out_dir: Path) -> Path | None:
    """The path-KL bounds against N: EI-SDE's Girsanov term (mean and sd over seeds) and the chain-rule
    bound of steps read as ODE step + noising, for EI-SDE and the noising scheme; with the true KL of the
    same schemes from the rate sweep."""
    plt = pyplot()
    pts = _rows(records, sweep="path_kl")
    if pts.empty or "bound" not in pts.columns:
        return None
    fig, ax = plt.subplots(figsize=(5.5, 4.2))
    names = {("ei_sde", "girsanov"): ("Girsanov path term (prior analysis), EI-SDE", ":"),
             ("ei_sde", "chain_rule"): ("chain-rule path KL, EI-SDE", "--"),
             ("ei_ode_noise", "chain_rule"): ("chain-rule path KL, ODE + noising", "--")}
    for (method, bound), (name, ls) in names.items():
        mine = _finite(_rows(pts, method=method, bound=bound), "path_kl")
        if mine.empty:
            continue
        stats = mine.groupby("N")["path_kl"].agg(["mean", "std"]).reset_index()
        fit = _rows(records, sweep="path_kl_fit", method=method, bound=bound)
        slope = f", slope {fit['slope'].iloc[0]:.2f}" if len(fit) else ""
        ax.errorbar(stats["N"], stats["mean"], yerr=stats["std"].fillna(0), marker="s", ls=ls,
                    color=COLORS[method], label=f"{name}{slope}")
    for method in ("ei_sde", "ei_ode_noise"):
        true = _finite(_rows(records, sweep="rate", method=method), "kl_fwd").sort_values("N")
        if len(true):
            ax.plot(true["N"], true["kl_fwd"], marker="o", color=COLORS[method],
                    label=f"true KL(p_δ‖q_N) (rate sweep), {LABELS[method]}")
    ax.set(xscale="log", yscale="log", xlabel="steps N", ylabel="KL",
           title="path-KL bounds (dashed, dotted), true KL (solid)")
    ax.legend(fontsize=7, loc="lower left")
    return _save(fig, out_dir / "path_kl.png")


def make_all(cfg: dict, records, out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    made = [kl_vs_n(records, out_dir),
            sweep_plot(records, out_dir, "delta", "delta", "early-stopping time δ", "delta_sweep.png", True),
            sweep_plot(records, out_dir, "c", "c", "noising fraction c (η = c h)", "c_sweep.png", False),
            sweep_plot(records, out_dir, "d", "d", "dimension d (product target)", "d_sweep.png", True),
            path_kl_plot(records, out_dir)]
    return [p for p in made if p is not None]
