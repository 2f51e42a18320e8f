"""Choose LDAR's tiny training budget (card 17; audit 17, findings 1 and 10) on calibration data,
before any evaluation seed runs.

Calibration seed 100 (never an evaluation seed): the LaRA-schema documents are generated with
data seed 100 (the pipeline's data seed is 0), split with seed 100, and one policy per candidate
budget (train.epochs, train.updates) is trained with seed 100 on the calibration training queries
of the trained task types. Each candidate is scored by its accuracy on the calibration test queries
of those types (the Beta-mean bands, as the pipeline evaluates), with its CPU seconds beside it.
The reader, retriever, policy and every other knob are the config's.

The rule, fixed before running: the candidate with the highest calibration accuracy among those
that cost at most MAX_CPU_S CPU-seconds per seed (the paper's tiny budget: about 100 CPU-seconds
for every job, 4 seeds of training the largest part); ties go to the cheaper one. The chosen
values go into config/hydra/paper/ldar.yaml (train.epochs, train.updates) by hand, with this
script's output quoted there.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/calibrate_ldar.py [--seed 100]
"""
from __future__ import annotations

import argparse
import copy
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

CANDIDATES = ((10, 2), (10, 4), (20, 2), (20, 4), (30, 2), (30, 4))  # (epochs, updates per collection)
MAX_CPU_S = 15.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=100)
    args = parser.parse_args()
    torch.set_num_threads(1)

    from iclr26.core.config import compose_job_config
    from iclr26.papers.ldar import data, methods, policy, stages
    from iclr26.papers.ldar.env import TinyEnv, prepare_tiny

    cfg = compose_job_config("ldar", "tiny")
    spec = cfg["data"]["lara"]
    length = spec["headline_length"]
    with tempfile.TemporaryDirectory() as tmp:
        raw, prep = Path(tmp) / "raw", Path(tmp) / "prep"
        data.write_synthetic(raw, spec, args.seed)
        prepare_tiny(raw, prep, length, cfg)
        env = TinyEnv(prep, cfg)
    train_idx, test_idx = stages.split(cfg, env, args.seed)
    levels = stages.trained_levels(cfg)
    train_q = [q for q in train_idx if env.rows[q]["level"] in levels]
    test_q = [q for q in test_idx if env.rows[q]["level"] in levels]
    sims = [env.sims[q] for q in train_q]

    def reward(batch, actions):
        picks = [train_q[b] for b in batch]
        return env.rewards(picks, [methods.ldar_band(env.sims[q], *a) for q, a in zip(picks, actions)])

    ratios = {r: float(env.rewards(test_q, [methods.fixed_ratio(env.sims[q], r) for q in test_q]).mean())
              for r in (0.05, 0.1, 0.2, 0.4)}
    print(f"calibration seed {args.seed}: {len(train_q)} training, {len(test_q)} test queries ({', '.join(levels)})")
    print("fixed ratios on the calibration test queries: " + ", ".join(f"{r}: {a:.3f}" for r, a in ratios.items()))
    results = []
    for epochs, updates in CANDIDATES:
        c = copy.deepcopy(cfg)
        c["train"].update(epochs=epochs, updates=updates)
        t0 = time.process_time()
        out = policy.train(c, sims, reward, args.seed)
        cpu = time.process_time() - t0
        acts = policy.mean_actions(out["policy"], [env.sims[q] for q in test_q])
        acc = float(env.rewards(test_q, [methods.ldar_band(env.sims[q], *a) for q, a in zip(test_q, acts)]).mean())
        lv = np.array([env.rows[q]["level"] for q in test_q])
        bands = ", ".join(f"{x} q_low {acts[lv == x, 0].mean():.2f}" for x in levels)
        curve = out["reward_curve"]
        tail = max(1, len(curve) // 10)
        print(f"epochs {epochs:2d} updates {updates}: calibration test acc {acc:.3f}, last training reward "
              f"{np.mean(curve[-tail:]):.3f}, {cpu:.1f} CPU-s ({bands})", flush=True)
        results.append((epochs, updates, acc, cpu))
    fits = [r for r in results if r[3] <= MAX_CPU_S]
    if not fits:
        print(f"no candidate fits {MAX_CPU_S} CPU-s per seed")
        return
    best = max(fits, key=lambda r: (round(r[2], 6), -r[3]))
    print(f"chosen (highest calibration accuracy within {MAX_CPU_S} CPU-s per seed): epochs {best[0]}, "
          f"updates {best[1]} (acc {best[2]:.3f}, {best[3]:.1f} CPU-s)")


if __name__ == "__main__":
    main()
