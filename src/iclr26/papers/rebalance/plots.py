"""The figure of card 03: accuracy against thinking length, one point per arm (dots: seeds)."""
from __future__ import annotations

from pathlib import Path

from iclr26.core.figures import pyplot, save


def accuracy_vs_thinking_tokens(records, methods, out_dir) -> Path:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for method in methods:
        rows = records[records["method"] == method]
        if rows.empty:
            continue
        ax.scatter(rows["thinking_tokens"], rows["accuracy"], alpha=0.4)
        ax.errorbar(rows["thinking_tokens"].mean(), rows["accuracy"].mean(), xerr=rows["thinking_tokens"].std(),
                    yerr=rows["accuracy"].std(), marker="o", capsize=3, label=f"{method} (n={len(rows)})")
    ax.set(title="accuracy vs thinking tokens (dots: seeds)", xlabel="mean thinking tokens", ylabel="accuracy")
    ax.legend(fontsize=8)
    return save(fig, Path(out_dir) / "accuracy_vs_thinking_tokens.png")
