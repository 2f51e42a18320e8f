"""The four reward dimensions per arm (mean and each seed), and the multi-dimensional reward against
the network evaluations each arm spent training (the speed claim)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from iclr26.core.figures import pyplot, save

PANELS = (("semantic", "semantic (cos) up"), ("onset_err", "onset error (frames) down"),
          ("pan_err", "pan error down"), ("aesthetic", "aesthetic (dyn. range) up"))


def make_all(cfg: dict, records, out_dir: Path) -> list[Path]:
    df = pd.DataFrame(records)
    methods = list(dict.fromkeys(df["method"]))
    plt = pyplot()
    fig, axes = plt.subplots(1, len(PANELS) + 1, figsize=(4 * (len(PANELS) + 1), 3.6))
    for ax, (metric, title) in zip(axes, PANELS):
        means = df.groupby("method")[metric].mean().reindex(methods)
        ax.bar(range(len(methods)), means.to_numpy(), color=[f"C{i}" for i in range(len(methods))])
        for i, m in enumerate(methods):
            ax.plot([i] * int((df["method"] == m).sum()), df.loc[df["method"] == m, metric], "k.", alpha=0.5)
        ax.set_xticks(range(len(methods)), methods, rotation=30, fontsize=7)
        ax.set_title(title, fontsize=9)
    ax = axes[-1]
    for i, m in enumerate(methods):
        d = df[df["method"] == m]
        ax.plot(d["nfe_fwd"] + d["nfe_bwd"], d["reward"], "o", color=f"C{i}", label=m)
    ax.set(xlabel="training network evaluations (fwd + bwd)", ylabel="multi-dim reward (test)")
    ax.legend(fontsize=7)
    return [save(fig, out_dir / "reward_dimensions.png")]
