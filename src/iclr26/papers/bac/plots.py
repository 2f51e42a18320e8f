"""Figure of card 18: action error against the uncached policy vs FLOPs speed-up, per row and S."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from iclr26.core.figures import pyplot, save


def make_all(cfg: dict, records, out_dir: Path) -> list[Path]:
    df = pd.DataFrame(records)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 4))
    head = df[df["headline"] == 1]   # equal S (bac at its n_bu); the compute-matched baselines hollow
    for method, rows in head[head["method"] != "full"].groupby("method", sort=False):
        agg = rows.groupby("S")[["flops_speedup", "action_l2"]].mean().reset_index()
        line, = ax.plot(agg["flops_speedup"], agg["action_l2"], "o-", label=method)
        for _, r in agg.iterrows():
            ax.annotate(f"S={int(r['S'])}", (r["flops_speedup"], r["action_l2"]), fontsize=7)
        matched = df[(df["method"] == method) & (df["matched"] == 1) & (df["headline"] == 0)]
        if len(matched):
            agg = matched.groupby("S")[["flops_speedup", "action_l2"]].mean().reset_index()
            ax.plot(agg["flops_speedup"], agg["action_l2"], "o--", mfc="none", color=line.get_color(),
                    label=f"{method} (matched to bac)")
    ax.set_xlabel("FLOPs speed-up per action chunk (matmul FLOPs)")
    ax.set_ylabel("action L2 vs uncached (same noise), mean over seeds")
    ax.set_title("BAC: accuracy vs compute", fontsize=10)
    ax.legend(fontsize=8)
    return [save(fig, out_dir / "bac_tradeoff.png")]
