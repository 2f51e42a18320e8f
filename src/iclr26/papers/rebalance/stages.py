"""Stages of card 03, "Efficient Reasoning with Balanced Thinking" (ReBalance, arXiv 2603.12372).

acquire   tiny: chain-arithmetic problems whose teacher traces carry the paper's premises (errors
          fixed by a reflection step, redundant re-checks mostly on easy problems, unfixed errors on
          hard ones), split into train / calibration ("seen") / test; full: the benchmark and
          calibration files of the config; both as {problem, answer} rows (core.lm.stages.acquire).
prepare   the reasoning model and its calibration, which both steering arms share. tiny: the
          tokenizer and a Qwen2 trained from scratch on the teacher traces: one for every seed when
          base.seed is set (the paper steers one released model; the seeds then vary calibration and
          sampling), else one per seed (full: model.source). Then, per seed, Phase A/B
          (calibration.py): the model writes traces on the
          calibration set; steps get confidences and layer-l states; the prototypes give the
          steering vector, its LDA magnitudes and the quartiles.
          prepare also picks the static baseline's one fixed alpha on the calibration set
          (calibration.static_strength: the shortest-thinking one on a grid, alpha = 0 included, that
          keeps accuracy) and checks the vector itself (reflect rate at a fixed alpha = low_val_1).
train     ReBalance is training-free; a steering arm turns the seed's calibration into its rule
          (static_steering: that fixed alpha at every boundary; rebalance: the control function
          fitted to the quartiles, control.py). original / keyword_suppression: nothing.
evaluate  every arm samples the test traces (eval.temperature) and is scored (scoring.py): accuracy
          (all and on hard problems, with the per-problem outcomes for the cluster bootstrap),
          thinking tokens, lengths of correct and incorrect traces, errors fixed, format kept; and
          samples the calibration probe problems, whose reflect_rate is the steering precondition.

The modules that use torch (calibration, arms, core.lm.stages) are imported inside the stage
functions: tabulate imports this module for `figures` and needs no torch.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from iclr26.core.io import read_json, read_jsonl, write_json

from . import control
from .control import STEERED

DATASET = "math"


def acquire(job) -> dict:
    from iclr26.core.lm.stages import acquire as acquire_problems

    return acquire_problems(job, ("train", "calibration", "test"))


def prepare(job) -> dict:
    from iclr26.core.lm.stages import load_model, train_base_models

    from .calibration import calibrate, static_strength

    info = {}
    if not job.cfg["model"].get("source"):
        bases = sorted({base_seed(job.cfg, seed) for seed in job.cfg["seeds"]})
        info = train_base_models(dataclasses.replace(job, cfg={**job.cfg, "seeds": bases}), teacher_examples)
    rows = read_jsonl(job.raw_dir() / "calibration.jsonl")
    seeds = {f"calibration_s{seed}": seed for seed in job.cfg["seeds"]}

    def calibrate_one(key: str) -> dict:
        model, fmt = load_model(job, base_seed(job.cfg, seeds[key]), base_dir=job.out_dir)
        calibration = calibrate(model, fmt, rows, job.cfg, seeds[key])
        calibration["static"] = static_strength(model, fmt, rows, job.cfg, seeds[key], calibration, DATASET)
        write_json(job.out_dir / f"{key}.json", calibration)
        return {k: v for k, v in calibration.items() if k != "vector"}

    return {**info, **job.units(seeds, calibrate_one)}


def base_seed(cfg: dict, seed: int) -> int:
    """The seed of the base model a run steers (tiny): base.seed when set, one model for every seed
    (the paper steers one released model; a seed then varies the calibration pass, the static
    strength's probe and the test sampling), else the run's own seed (one model per seed)."""
    shared = (cfg.get("base") or {}).get("seed")
    return seed if shared is None else int(shared)


def teacher_examples(fmt, rows: list[dict], seed: int) -> list:
    """The base model learns the teacher traces as written (errors, fixes and re-checks included)."""
    return fmt.training_examples([r["problem"] for r in rows], [r["trace"] for r in rows],
                                 [r["trace_answer"] for r in rows])


def train(job) -> dict:
    if job.method not in STEERED:
        return {"note": f"{job.method}: training-free, no steering"}
    seeds = {f"s{seed}": seed for seed in job.seeds}

    def steering_rule(key: str) -> dict:
        calibration = read_json(job.prepared_dir(DATASET) / f"calibration_{key}.json")
        rule = control.steering_rule(job.method, calibration, job.cfg["method"])
        write_json(job.out_dir / f"steering_{key}.json", {**calibration, **rule})
        return rule

    return job.units(seeds, steering_rule)


def evaluate(job) -> dict:
    from iclr26.core.lm.stages import load_model

    from .arms import sample
    from .calibration import probe
    from .scoring import score

    rows = read_jsonl(job.raw_dir(DATASET) / "test.jsonl")
    calibration_rows = read_jsonl(job.raw_dir(DATASET) / "calibration.jsonl")
    records = []
    for seed in job.seeds:
        model, fmt = load_model(job, base_seed(job.cfg, seed), base_dir=job.prepared_dir(DATASET))
        steering = read_json(job.out_dir / f"steering_s{seed}.json") if job.method in STEERED else None
        fired: list[float] = []
        gen = sample(model, fmt, rows, job.cfg, seed, job.method, steering, fired=fired)
        checked = probe(model, fmt, calibration_rows, job.cfg, seed, job.method, steering, DATASET)
        records.append({"seed": seed, **score(job.cfg, DATASET, fmt, rows, gen.tokens),
                        "reflect_rate": checked["reflect_rate"], "probe_format_ok": checked["format_ok"],
                        "alpha": steering.get("alpha", float("nan")) if steering else float("nan"),
                        **firing(fired, len(rows), job.method in STEERED),
                        **vector_check(read_json(job.prepared_dir(DATASET) / f"calibration_s{seed}.json"))})
    return {"records": records}


def firing(fired: list[float], n_traces: int, steered: bool) -> dict:
    """How a steering arm fired on the test traces (audit 03, B2): the share of step boundaries with
    alpha < 0 (away from reflection) and alpha > 0 (toward it), the mean alpha, boundaries per trace."""
    import numpy as np

    if not steered or not fired:
        nan = float("nan")
        return {"alpha_neg_share": nan, "alpha_pos_share": nan, "alpha_mean": nan,
                "boundaries": len(fired) / n_traces if steered else nan}
    a = np.asarray(fired)
    return {"alpha_neg_share": float((a < 0).mean()), "alpha_pos_share": float((a > 0).mean()),
            "alpha_mean": float(a.mean()), "boundaries": len(a) / n_traces}


def vector_check(calibration: dict) -> dict:
    """The steering vector's own check (audit 03, B2), measured in prepare on the calibration probe
    problems: the change of reflect rate and of format kept under a fixed alpha = low_val_1 against
    the unsteered model; the same for every arm of a seed (the claims read it from the rebalance rows)."""
    static = calibration["static"]
    check, base = static["vector_check"], static["original"]
    return {"vector_reflect_change": check["reflect_rate"] - base["reflect_rate"],
            "vector_format_change": check["format_ok"] - base["format_ok"],
            "static_alpha_chosen": static["alpha"]}


def figures(cfg: dict, records, out_dir) -> list[Path]:
    from . import PAPER
    from .plots import accuracy_vs_thinking_tokens

    return [accuracy_vs_thinking_tokens(records, PAPER.methods, out_dir)]
