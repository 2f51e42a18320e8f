"""Accuracy per row and task (mean over seeds, each seed a dot)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from iclr26.core.figures import pyplot, save


def make_all(cfg: dict, records, out_dir: Path) -> list[Path]:
    df = pd.DataFrame(records)
    df = df[df["task"].isin(["gt_llm", "gt_random", "llm_random"])]
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(10, 4))
    methods = list(dict.fromkeys(df["method"]))
    tasks = ["gt_llm", "gt_random", "llm_random"]
    width = 0.8 / len(tasks)
    for t, task in enumerate(tasks):
        d = df[df["task"] == task]
        for m, method in enumerate(methods):
            acc = d[d["method"] == method]["accuracy"]
            if len(acc):
                ax.bar(m + t * width, acc.mean(), width, color=f"C{t}", label=task if m == 0 else None)
                ax.plot([m + t * width] * len(acc), acc, "k.", ms=3)
    ax.axhline(0.5, color="grey", lw=0.8, ls="--")
    ax.set_xticks([m + width for m in range(len(methods))], methods, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("test accuracy")
    ax.set_ylim(0.3, 1.0)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return [save(fig, out_dir / "accuracy.png")]
