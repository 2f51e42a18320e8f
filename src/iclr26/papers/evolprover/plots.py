"""Figure: pass@k per benchmark and arm (mean over seeds)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from iclr26.core.figures import pyplot, save

BENCHES = ("minif2f", "formalmath_lite", "ineq_seed", "ineq_type1", "ineq_type2")


def make_all(cfg: dict, records, out_dir: Path) -> list[Path]:
    df = pd.DataFrame(records)
    df = df[df["bench"].isin(BENCHES)]
    plt = pyplot()
    ks = sorted({int(k) for k in cfg["eval"]["k"]} | {int(cfg["eval"]["n_samples"])})
    fig, axes = plt.subplots(1, len(ks), figsize=(4.5 * len(ks), 3.6), squeeze=False)
    methods = list(dict.fromkeys(df["method"]))
    x = np.arange(len(BENCHES))
    for ax, k in zip(axes[0], ks):
        for i, m in enumerate(methods):
            means = [df[(df.method == m) & (df.bench == b)][f"pass_at_{k}"].mean() for b in BENCHES]
            ax.bar(x + (i - len(methods) / 2) * 0.8 / len(methods), means, 0.8 / len(methods), label=m)
        ax.set_xticks(x, BENCHES, rotation=30, fontsize=7)
        ax.set_title(f"pass@{k}")
        ax.set_ylim(0, 1)
    axes[0][0].legend(fontsize=6)
    return [save(fig, out_dir / "pass_at_k.png")]
