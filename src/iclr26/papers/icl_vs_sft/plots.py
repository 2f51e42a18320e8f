"""Figures of card 04 from the records: learning curves over k (accuracy on pro and anti tasks,
confidence and over-confidence, label-axis variance fraction, probe selectivity) and the probes layer by
layer at k_max. Points are seed means, bars their min-max range."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from iclr26.core import figures as core_figures

from . import PAPER


def make_all(cfg: dict, records, out_dir: Path) -> list[Path]:
    plt = core_figures.pyplot()
    methods = [m for m in PAPER.methods if (records["method"] == m).any()]
    colours = {m: plt.cm.tab10(i) for i, m in enumerate(methods)}
    return [learning_curves(plt, records, methods, colours, out_dir / "learning_curves.png"),
            probes_by_layer(plt, cfg, records, methods, colours, out_dir / "probes_by_layer.png")]


def _curve(rows, metric):
    ks = sorted(rows["k"].unique())
    vals = [rows[rows["k"] == k][metric].to_numpy(float) for k in ks]
    return (np.array(ks), np.array([v.mean() for v in vals]), np.array([v.min() for v in vals]),
            np.array([v.max() for v in vals]))


def learning_curves(plt, records, methods, colours, path: Path) -> Path:
    panels = [(("acc_pro", "acc_anti"), "accuracy (solid pro, dashed anti)"),
              (("confidence", "overconfidence"), "confidence (solid), over-confidence (dashed)"),
              (("label_var_frac_mid", "label_var_frac"), "label-var frac. (solid mid, readout out; dashed last)"),
              (("r2_selectivity_mid", "r2_selectivity_last"), "R^2 rel - irr (solid mid, dashed last)")]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6))
    for ax, (metrics, title) in zip(axes, panels):
        for method in methods:
            rows = records[records["method"] == method]
            for metric, style in zip(metrics, ("-", "--")):
                ks, mean, lo, hi = _curve(rows, metric)
                ax.errorbar(ks, mean, yerr=[mean - lo, hi - mean], color=colours[method], ls=style, marker="o",
                            ms=3, capsize=2, label=f"{method} {metric}" if len(metrics) > 1 else method)
        ax.set(title=title, xlabel="shots k")
        ax.legend(fontsize=7)
    return core_figures.save(fig, path)


def probes_by_layer(plt, cfg, records, methods, colours, path: Path) -> Path:
    k = int(cfg["eval"]["k_max"])
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for method in methods:
        rows = records[(records["method"] == method) & (records["k"] == k)]
        if rows.empty:
            continue
        for column, style in (("r2_irrelevant_layers", "-"), ("r2_relevant_layers", "--")):
            curves = np.array(rows[column].tolist(), dtype=float)
            ax.plot(np.arange(curves.shape[1]), curves.mean(axis=0), color=colours[method], ls=style, marker="o",
                    label=f"{method}, {column.split('_')[1]}")
    ax.set(xlabel="layer (0 = embeddings)", ylabel="split-half ridge R^2", title=f"probes of the query state, k = {k}")
    ax.legend(fontsize=8)
    return core_figures.save(fig, path)
