"""Figure 1 of the paper, ours: accuracy against the document usage ratio, per context length:
the fixed-ratio curve (top-similarity passages), long context, RAG, Adaptive-k, the oracle, and
LDAR (mean and each seed), on the trained task types (hallu, which no policy trains on, is left
out, as in the claims)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from iclr26.core.figures import pyplot, save

from .methods import ratio_of


def make_all(cfg: dict, records, out_dir: Path) -> list[Path]:
    df = pd.DataFrame(records)
    df = df[df["level"] == "trained"]
    lengths = list(dict.fromkeys(df["length"]))
    plt = pyplot()
    fig, axes = plt.subplots(1, len(lengths), figsize=(5 * len(lengths), 4), squeeze=False)
    for ax, length in zip(axes[0], lengths):
        d = df[df["length"] == length]
        mean = d.groupby("method")[["usage_ratio", "accuracy"]].mean()
        curve = mean[[ratio_of(m) is not None or m == "lc" for m in mean.index]].sort_values("usage_ratio")
        ax.plot(curve["usage_ratio"], curve["accuracy"], "o-", color="grey", label="fixed ratio (LC at 1.0)")
        for method, marker in (("rag", "s"), ("best_ratio", "D"), ("adaptive_k", "^"), ("oracle", "P")):
            if method in mean.index:
                ax.plot(*mean.loc[method, ["usage_ratio", "accuracy"]], marker, label=method)
        if "ldar" in mean.index:
            seeds = d[d["method"] == "ldar"]
            ax.plot(seeds["usage_ratio"], seeds["accuracy"], "*", color="C3", alpha=0.4)
            ax.plot(*mean.loc["ldar", ["usage_ratio", "accuracy"]], "*", color="C3", markersize=16, label="LDAR")
        ax.set(xlabel="document usage ratio", ylabel="accuracy", title=f"length {length}, trained task types",
               xlim=(0, 1.05))
        ax.legend(fontsize=7)
    fig.tight_layout()
    return [save(fig, out_dir / "accuracy_vs_usage.png")]
