"""Fix CCA's knobs and the compute-matched group size on tune seeds, before the evaluation seeds run.

    python -m iclr26.papers.medvr.tune [--scale tiny] [--out src/iclr26/papers/medvr/tune_tiny.json]

Calibration data (data seed `tune.data_seed`, not the pipeline's) and tune seeds (`tune.seeds`, 100+,
never evaluation seeds): each CCA setting in `tune.cca_grid` (lambda x consensus rule [min correct, agreement]) is
trained with the tiny recipe and scored on the calibration data's *test* split; the best mean
accuracy is the setting the config fixes. EVR's rollouts per question on the same seeds give the
compute-matched outcome-GRPO group (ceil). The output is printed and written as JSON (by default
next to this file, tune_tiny.json, kept with the code); the config quotes it (paper/medvr.yaml).
About 40 CPU-s at tiny scale."""
from __future__ import annotations

import argparse
import itertools
import math
import tempfile
from pathlib import Path

import numpy as np

from . import agent, data


def _arrays(raw: Path, cfg: dict, split: str, vocab=None):
    spec = cfg["data"]["vqa_rad"]
    rows = data.load_vqa(raw, split, spec["image_size"])
    glob, crops = agent.views(rows["images"], spec["grid"], cfg["agent"]["pool"])
    vocab = vocab or sorted(set(rows["answers"]))
    return glob, crops, np.array([vocab.index(x) for x in rows["answers"]]), rows["cells"], vocab


def tune(cfg: dict) -> dict:
    t = cfg["tune"]
    spec = dict(cfg["data"]["vqa_rad"])
    with tempfile.TemporaryDirectory() as tmp:
        data.write_synthetic(Path(tmp), spec, t["data_seed"])
        g, c, y, cells, vocab = _arrays(Path(tmp), cfg, "train")
        tg, tc, ty, tcells, _ = _arrays(Path(tmp), cfg, "test", vocab)
    base, _ = agent.warm_start(g, c, cells, y, len(vocab), cfg, t["data_seed"])
    seeds = list(t["seeds"])

    def run(arm, train):
        out = agent.train_arm(arm, g, c, y, base, len(vocab), {**cfg, "train": train}, seeds)
        res = agent.evaluate(out["answer"], out["zoom"], tg, tc, ty, tcells)
        return out, res

    grid = []
    for lam, (k, agree) in itertools.product(t["cca_grid"]["lambda"], t["cca_grid"]["rules"]):
        _, res = run("cca", {**cfg["train"], "cca_lambda": lam, "cca_min_correct": k, "cca_agree": agree})
        grid.append({"lambda": lam, "min_correct": k, "agree": agree, "accuracy": float(res["accuracy"].mean()),
                     "grounding_hit": float(res["grounding_hit"].mean())})
        print(grid[-1], flush=True)
    _, out_res = run("outcome_grpo", cfg["train"])
    evr, evr_res = run("evr", cfg["train"])
    best = max(grid, key=lambda row: row["accuracy"])
    return {"seeds": seeds, "data_seed": t["data_seed"], "cca_grid": grid, "best": best,
            "outcome_accuracy": float(out_res["accuracy"].mean()), "evr_accuracy": float(evr_res["accuracy"].mean()),
            "evr_rollouts_per_question": float(np.mean(evr["rollouts_per_question"])),
            "group_matched": int(math.ceil(float(np.mean(evr["rollouts_per_question"]))))}


def main(argv=None) -> None:
    from iclr26.core.config import compose_job_config
    from iclr26.core.io import write_json

    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", default="tiny")
    ap.add_argument("--out", default=str(Path(__file__).with_name("tune_tiny.json")))
    args = ap.parse_args(argv)
    cfg = compose_job_config("medvr", args.scale)
    result = tune(cfg)
    print(result)
    write_json(Path(args.out), result)


if __name__ == "__main__":
    main()
