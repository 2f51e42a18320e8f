"""The pre-registered knob sweep of the tiny RL budget (audit 06 M1), on NON-evaluation seeds.

    python -m iclr26.papers.prismaudio.sweep <prepared dir> [out.json]

For seeds 100, 101 (never evaluation seeds): pre-train a base model with the config's pretraining
settings, then run multi-reward Fast-GRPO at each learning rate of LRS (the config's other GRPO
knobs) and, at the best of them, Flow-GRPO; score the ODE samples of the test prompts (noise seeds
disjoint from the evaluation's) on the multi-dimensional reward. Rule fixed before it ran: take the
learning rate with the largest mean Fast-GRPO gain, as a fraction of the base's headroom (clean
clips' reward - base reward); the match tolerance is a quarter of Flow-GRPO's gain at that rate.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from iclr26.core.config import compose_job_config

from . import flow, rewards, stages

SEEDS = (100, 101)
LRS = (1e-4, 1e-3, 3e-3)


def main(prepared_dir: str, out: str | None = None) -> dict:
    torch.set_num_threads(1)
    cfg = compose_job_config("prismaudio", "tiny")
    prep = stages.load_prepared(Path(prepared_dir))
    weights = stages.reward_weights(cfg, "fast_grpo")
    top_db = float(cfg["data"]["vggsound"]["mel"]["top_db"])
    clean = rewards.weighted(stages.score_split(prep, cfg, prep["x_test"].numpy(), "test"), weights).mean()

    def test_reward(net, seed):
        gen = torch.Generator().manual_seed(90_000 + seed)
        x = flow.sample_ode(net, prep["c_test"], int(cfg["grpo"]["n_steps"]), gen, prep["x_test"].shape[1]).numpy()
        return float(rewards.weighted(stages.score_split(prep, cfg, x, "test"), weights).mean())

    def reward_fn(x0, rows):
        return rewards.weighted(stages.score_split(prep, cfg, x0, "train", rows), weights)

    res = {"seeds": SEEDS, "lrs": LRS, "top_db": top_db, "runs": []}
    for seed in SEEDS:
        torch.manual_seed(seed)
        net = stages.new_net(cfg, prep)
        t = cfg["pretrain"]
        flow.pretrain(net, prep["x_train"], prep["c_train"], int(t["steps"]), int(t["batch"]), float(t["lr"]),
                      torch.Generator().manual_seed(seed))
        base = test_reward(net, seed)
        for mode, lrs in (("fast", LRS), ("flow", None)):
            if lrs is None:
                fast = [r for r in res["runs"] if r["mode"] == "fast"]
                by_lr = {lr: np.mean([r["gain_frac"] for r in fast if r["lr"] == lr]) for lr in LRS}
                lrs = (max(by_lr, key=by_lr.get),)
            for lr in lrs:
                started = time.process_time()
                policy, counts, curve = flow.train_grpo(net, {"cond": prep["c_train"]}, reward_fn, mode,
                                                        {**cfg["grpo"], "lr": lr}, 1000 + seed)
                r = test_reward(policy, seed)
                res["runs"].append({"seed": seed, "mode": mode, "lr": lr, "base": base, "reward": r,
                                    "gain": r - base, "gain_frac": (r - base) / (clean - base),
                                    "cpu_s": time.process_time() - started, "curve_first_last": [curve[0], curve[-1]]})
                print(json.dumps(res["runs"][-1]), flush=True)
    if out:
        Path(out).write_text(json.dumps(res, indent=1))
    return res


if __name__ == "__main__":
    main(*sys.argv[1:])
