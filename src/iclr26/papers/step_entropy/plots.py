"""The figure of card 07 (its Fig. 1): answer accuracy against the mask ratio, per rule and dataset."""
from __future__ import annotations

from pathlib import Path

from iclr26.core.figures import pyplot, save


def accuracy_vs_mask_ratio(records, methods, datasets, out_dir) -> Path:
    """One panel per dataset, one curve per rule: mean accuracy over seeds at each kappa (bars: std)."""
    plt = pyplot()
    prune = records[records["stage"] == "prune"]
    datasets = [d for d in datasets if (prune["dataset"] == d).any()]
    fig, axes = plt.subplots(1, len(datasets), figsize=(5.5 * len(datasets), 4), squeeze=False)
    for ax, dataset in zip(axes[0], datasets):
        panel = prune[prune["dataset"] == dataset]
        curves = panel.groupby(["method", "kappa"])["accuracy"].agg(["mean", "std"]).reset_index()
        seeds = panel.groupby("method")["seed"].nunique()
        for method in (m for m in methods if m in seeds.index):
            curve = curves[curves["method"] == method]
            ax.errorbar(curve["kappa"], curve["mean"], yerr=curve["std"].fillna(0), marker="o", capsize=3,
                        label=f"{method} (n={seeds[method]} seeds)")
        ax.set(title=f"accuracy vs mask ratio ({dataset})", xlabel="mask ratio kappa", ylabel="answer accuracy",
               ylim=(-0.02, 1.02))
        ax.legend(fontsize=8)
    return save(fig, Path(out_dir) / "accuracy_vs_mask_ratio.png")
