"""Stages of card 07, "Compressing LLM Chain-of-Thought via Step Entropy" (arXiv 2508.03346).

acquire   tiny: seeded chain-arithmetic problems with redundant steps, written as DeepScaleR-schema
          rows {problem, answer, trace}; full: the hub files of the config (core.lm.stages.acquire).
prepare   the reasoning model and its own traces, which every method shares. tiny: the tokenizer and,
          per seed, the model the paper takes pretrained (a Qwen2 trained from scratch on the teacher
          traces, 20% with random [SKIP] steps so the token is in distribution); full: model.source.
          Then, per seed, the model writes its own traces (own_traces.py) on the test problems
          (Stage A) and on the SFT problems (Stage B), each step scored by its entropy.
train     Stage B (finetune.py): the own correct training traces are compressed at kappa = sft_kappa
          by this method's rule and the model is fine-tuned on them (full_cot: uncompressed).
evaluate  Stage A (pruning.py, Fig. 1): for every kappa the rule replaces floor(kappa n) steps of each
          own test trace by [SKIP] and the model answers after the compressed thinking. Stage B: the
          fine-tuned model answers from the bare prompt (finetune.py).
One job = one method x all seeds (seed_batch); the same seed gives the same model and own traces to
every method, so methods are paired by seed.

The modules that use torch are imported inside the stage functions: tabulate imports this module
for `figures` and needs no torch.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from iclr26.core.io import read_jsonl, write_jsonl

MAIN = "reasoning"          # the dataset of the headline (Stage A + B); others are Stage A ablations


def _skipped(job, dataset: str | None = None) -> bool:
    return bool(job.cfg["data"][dataset or job.dataset].get("skip_at_this_scale"))


def acquire(job) -> dict:
    if _skipped(job):
        return {"note": f"{job.dataset} is not run at this scale"}
    from iclr26.core.lm.stages import acquire as acquire_problems

    return acquire_problems(job, ("train", "test"))


def prepare(job) -> dict:
    if _skipped(job):
        return {"note": f"{job.dataset} is not run at this scale"}
    from iclr26.core.lm.stages import load_model, train_base_models

    from .own_traces import own_traces, skip_augmented_examples

    cfg = job.cfg
    info = {}
    if not cfg["model"].get("source"):
        info = train_base_models(job, lambda fmt, rows, seed: skip_augmented_examples(
            fmt, rows, cfg["base"]["skip_augment"], seed, cfg["base"].get("augment", "random")))
    splits = {"test": None, **({"train": cfg["train"]["n_problems"]} if job.dataset == MAIN else {})}
    # tiny: each seed is its own base model, so each writes its own traces; a pretrained model
    # (full) is the same for every seed: its traces are written once (seeds vary the SFT and the
    # answer sampling only; audit finding 4) and every seed reads the same file
    shared = bool(cfg["model"].get("source"))
    seeds = {"own_shared": cfg["seeds"][0]} if shared else {f"own_s{seed}": seed for seed in cfg["seeds"]}

    def write_own_traces(key: str) -> dict:
        seed = seeds[key]
        model, fmt = load_model(job, seed, base_dir=job.out_dir)
        accuracy = {}
        for split, n in splits.items():
            own = own_traces(model, fmt, problems(job.raw_dir() / f"{split}.jsonl", n, cfg), cfg["method"], seed)
            for written in (cfg["seeds"] if shared else [seed]):
                write_jsonl(job.out_dir / f"own_{split}_s{written}.jsonl", own)
            accuracy[f"{'shared' if shared else f's{seed}'}_own_{split}_accuracy"] = \
                float(np.mean([t["correct"] for t in own]))
        return accuracy

    for accuracy in job.units(seeds, write_own_traces).values():
        info.update(accuracy)
    return info


def problems(path: Path, n: int | None, cfg: dict) -> list[dict]:
    """The rows of a split; with `n`, a seeded sample of n of them (data_seed; not the first n, which
    follow the file's order: audit finding 13)."""
    rows = read_jsonl(path)
    if n is None or n >= len(rows):
        return rows
    rng = np.random.default_rng(int(cfg["data"][MAIN].get("data_seed", 0)))
    return [rows[i] for i in sorted(rng.choice(len(rows), size=int(n), replace=False))]


def train(job) -> dict:
    if job.method not in job.cfg["train"]["sft_methods"]:
        return {"note": f"{job.method}: no SFT arm (Stage A only)"}
    from iclr26.core.lm.stages import load_model, save_finetuned

    from .finetune import finetune

    seeds = {f"s{seed}": seed for seed in job.seeds}

    def finetune_one(key: str) -> dict:
        seed = seeds[key]
        model, fmt = load_model(job, seed, base_dir=job.prepared_dir(MAIN))
        own = read_jsonl(job.prepared_dir(MAIN) / f"own_train_s{seed}.jsonl")
        metrics, model = finetune(model, fmt, own, job.cfg, job.method, seed, log=job.log)
        save_finetuned(model, fmt.tokenizer, job.out_dir / f"sft_{key}")
        return metrics

    return job.units(seeds, finetune_one)


def evaluate(job) -> dict:
    from iclr26.core.lm.stages import load_model

    from .finetune import answer_record
    from .pruning import prune_records

    cfg = job.cfg
    kappas = cfg["method"]["kappas"]
    # kappa 1 masks every step whatever the rule: with method.shared_ends (full) it is computed once,
    # in the full_cot job; kappa 0 stays in every rule job, the paired reference of acc_drop
    shared_ends = bool(cfg["method"].get("shared_ends"))
    if job.method == "full_cot":
        kappas = [0.0] + ([1.0] if shared_ends and 1.0 in kappas else [])
    elif shared_ends:
        kappas = [k for k in kappas if k < 1.0]
    rule = "low_entropy" if job.method == "full_cot" else job.method  # at kappa 0 every rule is the full CoT
    records = []
    for dataset in job.paper.datasets:
        if _skipped(job, dataset):
            continue
        for seed in job.seeds:
            model, fmt = load_model(job, seed, base_dir=job.prepared_dir(dataset))
            traces = read_jsonl(job.prepared_dir(dataset) / f"own_test_s{seed}.jsonl")
            records += prune_records(model, fmt, traces, rule, kappas, cfg["method"], seed, dataset)
    if job.method in cfg["train"]["sft_methods"]:
        rows = read_jsonl(job.raw_dir(MAIN) / "test.jsonl")
        for seed in job.seeds:
            model, fmt = load_model(job, seed, finetuned=job.out_dir / f"sft_s{seed}")
            records.append(answer_record(model, fmt, rows, cfg, job.method, seed, MAIN))
    return {"records": records}


def figures(cfg: dict, records, out_dir) -> list[Path]:
    from . import PAPER
    from .plots import accuracy_vs_mask_ratio

    return [accuracy_vs_mask_ratio(records, PAPER.methods, PAPER.datasets, out_dir)]
