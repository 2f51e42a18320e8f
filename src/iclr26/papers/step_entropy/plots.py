"""The figure of card 07 (its Fig. 1): answer accuracy against the mask ratio, per rule and dataset."""
from __future__ import annotations

from pathlib import Path

from iclr26.core.figures import pyplot, save


def accuracy_vs_mask_ratio(records, methods, datasets, out_dir) -> Path:
    plt = pyplot()
    prune = records[records["stage"] == "prune"]
    datasets = [d for d in datasets if (prune["dataset"] == d).any()]
    fig, axes = plt.subplots(1, len(datasets), figsize=(5.5 * len(datasets), 4), squeeze=False)
    for ax, dataset in zip(axes[0], datasets):
        for method in methods:
            rows = prune[(prune["dataset"] == dataset) & (prune["method"] == method)]
            if rows.empty:
                continue
            curve = rows.groupby("kappa")["accuracy"].agg(["mean", "std"]).reset_index()
            ax.errorbar(curve["kappa"], curve["mean"], yerr=curve["std"].fillna(0), marker="o", capsize=3,
                        label=f"{method} (n={rows['seed'].nunique()} seeds)")
        ax.set(title=f"accuracy vs mask ratio ({dataset})", xlabel="mask ratio kappa", ylabel="answer accuracy",
               ylim=(-0.02, 1.02))
        ax.legend(fontsize=8)
    return save(fig, Path(out_dir) / "accuracy_vs_mask_ratio.png")
