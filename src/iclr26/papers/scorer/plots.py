"""Learning curves: mean over seeds of the binned online return, one line per method."""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from iclr26.core.figures import pyplot, save

from . import PAPER


def learning_curves(cfg: dict, records, out_dir) -> Path:
    plt = pyplot()
    slots = [d for d in PAPER.datasets if d in set(records["env"])]
    total = int(cfg["train"]["total_steps"])
    fig, axes = plt.subplots(1, max(1, len(slots)), figsize=(4.2 * max(1, len(slots)), 3.4), squeeze=False)
    for ax, slot in zip(axes[0], slots):
        for method in PAPER.methods:
            rows = records[(records["env"] == slot) & (records["method"] == method)]
            if rows.empty:
                continue
            curves = np.array([[np.nan if v is None else v for v in c] for c in rows["curve"]], dtype=float)
            x = (np.arange(curves.shape[1]) + 0.5) / curves.shape[1] * total
            with warnings.catch_warnings():  # a bin where no seed finished an episode stays a gap
                warnings.simplefilter("ignore", RuntimeWarning)
                ax.plot(x, np.nanmean(curves, axis=0), label=method)
        ax.set(title=cfg["data"][slot].get("label", slot), xlabel="env steps per seed",
               ylabel="episodic return (mean over seeds)")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    return save(fig, Path(out_dir) / "learning_curves.png", dpi=110)
