"""Choose the SFT learner's learning rate and step count of card 04 (icl_vs_sft) on held-out tasks,
before any evaluation seed runs (audit 04, finding 6), and check the pretraining on the same
held-out seed (audit 04, finding 1).

Held-out seed 100 (never an evaluation seed): a tiny model is pretrained with the config's
`pretrain` settings and seed 100, the evaluation tasks of seed 100 are drawn with the config's
`data.tasks`, and SFT is run from it for every lr in LRS and every step count in STEPS (nested: one
run of max(STEPS) steps per lr, read at each count; constant lr, so the same as separate runs), at
k in KS. The rule, fixed before running: the (lr, steps) with the highest SFT accuracy averaged
over k in KS and over pro and anti tasks; ties go to fewer steps, then the smaller lr. The prior gap
of each setting is printed beside its accuracy (a weak SFT is the k = 0 model and keeps its prior).
The chosen values go into config/hydra/paper/icl_vs_sft.yaml (train.sft_lr, train.sft_steps) by
hand, with this script's output quoted there.

    .venv/bin/python scripts/tune_icl_vs_sft.py [--scale tiny] [--seed 100] [--override KEY=VALUE] [--pretrain-only]
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch

LRS = (1e-4, 3e-4, 1e-3, 3e-3)
STEPS = (10, 20, 40, 80)
KS = (1, 2, 4, 8)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", default="tiny")
    parser.add_argument("--seed", type=int, default=100)
    parser.add_argument("--override", action="append", default=[], help="config override KEY=VALUE (repeatable)")
    parser.add_argument("--pretrain-only", action="store_true",
                        help="stop after the pretraining's mechanism check (ICL by k), before the SFT grid")
    args = parser.parse_args()
    torch.set_num_threads(1)

    from iclr26.core.config import compose_job_config
    from iclr26.papers.icl_vs_sft import data
    from iclr26.papers.icl_vs_sft import model as tiny
    from iclr26.papers.icl_vs_sft.learners import Learners

    cfg = compose_job_config("icl_vs_sft", args.scale, tuple(args.override))
    spec, fmt = cfg["data"]["tasks"], cfg["format"]
    if args.seed in cfg["seeds"]:
        raise SystemExit(f"seed {args.seed} is an evaluation seed; tune on a held-out one")
    started = time.process_time()
    (net,), tokenizer, losses = tiny.pretrain(cfg["model"], cfg["pretrain"], fmt, int(spec["grid"]), [args.seed])
    print(f"pretrained seed {args.seed}: {cfg['pretrain']['steps']} steps, lr {cfg['pretrain']['lr']}, "
          f"batch {cfg['pretrain']['batch_size']}, {cfg['pretrain']['examples_per_sequence']} examples/sequence; "
          f"final loss {np.mean(losses[0][-50:]):.3f}; {time.process_time() - started:.0f} CPU-s")
    tasks = data.generate_tasks(spec, [args.seed])
    side = np.array([t["side"] for t in tasks])
    learners = Learners(net, tokenizer, fmt, {**cfg["train"], "sft_steps": max(STEPS)}, "cpu")

    def accuracy(answers) -> np.ndarray:
        return np.array([(p.argmax(1) == np.array([q[2] for q in t["queries"]])).mean()
                         for t, (p, _, _) in zip(tasks, answers)])

    def summary(acc: np.ndarray) -> str:
        pro, anti = acc[side == "pro"].mean(), acc[side == "anti"].mean()
        return f"acc {acc.mean():.3f} (pro {pro:.3f} anti {anti:.3f} gap {pro - anti:+.3f})"

    for k in (0, *KS):   # the mechanism: ICL of the pretrained model on the held-out tasks
        print(f"ICL k = {k}: {summary(accuracy([learners.icl(t, k) for t in tasks]))}")
    if args.pretrain_only:
        print(f"{time.process_time() - started:.0f} CPU-s in all")
        return

    scores = {}
    for lr in LRS:
        learners.train = {**learners.train, "sft_lr": lr}
        per_k = {s: [] for s in STEPS}
        for k in KS:
            learners.reset()
            weights = learners.fine_tune_stacked([t["shots"][:k] for t in tasks], snapshots=STEPS)
            for steps in STEPS:
                answers = []
                for i, task in enumerate(tasks):
                    with torch.no_grad():
                        for name, p in learners.model.named_parameters():
                            p.copy_(weights[steps][name][i])
                    answers.append(learners.ask(learners.queries(task, [])))
                learners.reset()
                acc = accuracy(answers)
                per_k[steps].append(acc)
                print(f"SFT lr {lr:g} steps {steps} k = {k}: {summary(acc)}")
        for steps in STEPS:
            scores[(lr, steps)] = float(np.mean(per_k[steps]))
    print("\nmean SFT accuracy over k in", KS)
    print("lr \\ steps " + " ".join(f"{s:>6}" for s in STEPS))
    for lr in LRS:
        print(f"{lr:<10g} " + " ".join(f"{scores[(lr, s)]:6.3f}" for s in STEPS))
    best = max(scores, key=lambda key: (round(scores[key], 6), -key[1], -key[0]))
    print(f"chosen: sft_lr {best[0]:g}, sft_steps {best[1]} (mean accuracy {scores[best]:.3f}); "
          f"{time.process_time() - started:.0f} CPU-s in all")


if __name__ == "__main__":
    main()
