"""Figures of card 01 from the records of every method: train-loss curves per regime, and kappa(J)
at init against test accuracy in the headline regime."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from iclr26.core import figures as core_figures

from . import PAPER


def make_all(cfg: dict, records, out_dir: Path) -> list[Path]:
    plt = core_figures.pyplot()
    methods = [m for m in PAPER.methods if (records["method"] == m).any()]  # table order
    colours = {m: plt.cm.tab10(i) for i, m in enumerate(methods)}
    regimes = [r for r in cfg["train"]["regimes"] if (records["regime"] == r).any()]  # headline first
    return [loss_curves(plt, cfg, records, methods, regimes, colours, out_dir / "loss_curves.png"),
            kappa_vs_accuracy(plt, records, methods, regimes[0], colours, out_dir / "kappa_vs_accuracy.png")]


def loss_curves(plt, cfg, records, methods, regimes, colours, path: Path) -> Path:
    """One panel per regime; thin lines are seeds, thick lines their mean."""
    fig, axes = plt.subplots(1, len(regimes), figsize=(5.5 * len(regimes), 4), squeeze=False)
    for ax, regime in zip(axes[0], regimes):
        for method in methods:
            rows = records[(records["regime"] == regime) & (records["method"] == method)]
            if rows.empty:
                continue
            curves = np.array(rows["loss_curve"].tolist(), dtype=float)
            steps = rows["loss_curve_step"].iloc[0]
            for curve in curves:
                ax.plot(steps, curve, color=colours[method], alpha=0.25, lw=0.8)
            ax.plot(steps, curves.mean(axis=0), color=colours[method], lw=2, label=f"{method} (n={len(curves)})")
        ax.axhline(cfg["eval"]["target_loss"], color="grey", ls=":", lw=1, label="target loss")
        ax.set(title=f"train loss, {regime}", xlabel="step", ylabel="cross-entropy")
        ax.legend(fontsize=8)
    return core_figures.save(fig, path)


def kappa_vs_accuracy(plt, records, methods, regime, colours, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for method in methods:
        rows = records[(records["regime"] == regime) & (records["method"] == method)]
        ax.scatter(rows["kappa_J_init"], rows["test_acc"], color=colours[method], label=method)
    ax.set(xscale="log", xlabel="kappa(J) of attention layer 1 at init", ylabel="test accuracy",
           title=f"conditioning at init vs accuracy ({regime})")
    ax.legend(fontsize=8)
    return core_figures.save(fig, path)
