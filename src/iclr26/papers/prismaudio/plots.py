"""The four reward dimensions per arm (mean and each seed); the stored training curves (training
reward against cumulative training network evaluations, fwd + bwd, per arm: the speed claim); and
the measured training time per arm (median CPU and wall seconds over seeds, read from each train
job's metrics.json: a measurement, outside the records and the golden file). The timing is also
written as timing.md next to table.md."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from iclr26.core.figures import pyplot, save
from iclr26.core.io import atomic_write
from iclr26.core.job import run_dir

PANELS = (("semantic", "semantic (cos) up"), ("onset_err", "onset error (frames) down"),
          ("pan_err", "pan error down"), ("aesthetic", "aesthetic (in- minus off-band dB) up"))


def timings(cfg: dict, methods: list[str]) -> dict[str, dict[str, float]]:
    """{method: {cpu_s, wall_s, n}}: medians over the seeds of the train jobs' metrics.json files
    (runs/<scale>/<slug>/<method>/*/metrics.json under the working directory); {} when absent."""
    out = {}
    for m in methods:
        rows = []
        for path in sorted(run_dir(cfg["scale"], cfg["slug"], m, "x").parent.glob("*/metrics.json")):
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            rows += [v for k, v in data.items() if k.startswith("seed_") and isinstance(v, dict) and "cpu_s" in v]
        if rows:
            out[m] = {"cpu_s": float(np.median([r["cpu_s"] for r in rows])),
                      "wall_s": float(np.median([r["wall_s"] for r in rows])), "n": len(rows)}
    return out


def make_all(cfg: dict, records, out_dir: Path) -> list[Path]:
    df = pd.DataFrame(records)
    methods = list(dict.fromkeys(df["method"]))
    plt = pyplot()
    fig, axes = plt.subplots(1, len(PANELS) + 2, figsize=(4 * (len(PANELS) + 2), 3.6))
    for ax, (metric, title) in zip(axes, PANELS):
        means = df.groupby("method")[metric].mean().reindex(methods)
        ax.bar(range(len(methods)), means.to_numpy(), color=[f"C{i}" for i in range(len(methods))])
        for i, m in enumerate(methods):
            ax.plot([i] * int((df["method"] == m).sum()), df.loc[df["method"] == m, metric], "k.", alpha=0.5)
        ax.set_xticks(range(len(methods)), methods, rotation=30, fontsize=7)
        ax.set_title(title, fontsize=9)
    ax = axes[len(PANELS)]
    for i, m in enumerate(methods):
        d = df[df["method"] == m]
        curves = [np.asarray(r) for r in d.get("curve_reward", []) if isinstance(r, list) and r]
        nfes = [np.asarray(r) for r in d.get("curve_nfe", []) if isinstance(r, list) and r]
        if curves and nfes:
            n = min(len(c) for c in curves)
            ax.plot(np.mean([x[:n] for x in nfes], 0), np.mean([c[:n] for c in curves], 0), color=f"C{i}", label=m)
    ax.set(xlabel="cumulative training NFE (fwd + bwd, per sample row)",
           ylabel="rollout reward (each arm's own reward)")
    ax.set_title("stored training curves (mean over seeds)", fontsize=9)
    ax.legend(fontsize=7)
    ax = axes[-1]
    times = timings(cfg, methods)
    if times:
        names = list(times)
        ax.bar(np.arange(len(names)) - 0.2, [times[m]["cpu_s"] for m in names], 0.4, label="CPU s")
        ax.bar(np.arange(len(names)) + 0.2, [times[m]["wall_s"] for m in names], 0.4, label="wall s")
        ax.set_xticks(range(len(names)), names, rotation=30, fontsize=7)
        ax.legend(fontsize=7)
    ax.set_title("train time per seed (median; measured, not a record)", fontsize=9)
    lines = ["# Training time per arm (measured; not records, not in the golden file)", "",
             "| arm | seeds | median CPU s | median wall s |", "|---|---|---|---|"]
    lines += [f"| {m} | {t['n']} | {t['cpu_s']:.2f} | {t['wall_s']:.2f} |" for m, t in times.items()]
    atomic_write(Path(out_dir) / "timing.md", "\n".join(lines) + "\n")
    return [save(fig, out_dir / "reward_dimensions.png")]
