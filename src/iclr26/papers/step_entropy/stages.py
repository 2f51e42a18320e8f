"""Stages of card 07, "Compressing LLM Chain-of-Thought via Step Entropy" (arXiv 2508.03346).

acquire   tiny: seeded chain-arithmetic problems with redundant steps, written as DeepScaleR-schema
          rows {problem, answer, trace}; full: the hub files of the config (core.lm.stages.acquire).
prepare   the reasoning model and its own traces, which every method shares. tiny: the tokenizer and,
          per seed, the model the paper takes pretrained (a Qwen2 trained from scratch on the teacher
          traces, a base.skip_augment share with [SKIP] steps so the token is in distribution; the
          seeds' models trained side by side in one process, stacked.py); full: model.source.
          Then, per seed, the model writes its own traces (own_traces.py) on the test problems
          (Stage A) and on the SFT problems (Stage B), each step scored by its entropy; full: once
          for every seed, one unit of work per generation batch (shared_own_traces), spread over
          the shard jobs of `shards.prepare` (core.job).
train     Stage B (finetune.py): the own correct training traces are compressed at kappa = sft_kappa
          by this method's rule and the model is fine-tuned on them (full_cot: uncompressed); tiny:
          the job's seeds fine-tuned side by side in one process (stacked.py).
evaluate  Stage A (pruning.py, Fig. 1): for every kappa the rule replaces floor(kappa n) steps of each
          own test trace by [SKIP] and the model answers after the compressed thinking. Stage B: the
          fine-tuned model answers from the bare prompt (finetune.py).
          Full: in units of work (evaluate_in_units: one per Stage A pass and per Stage B answer
          batch), spread over the shard jobs of `shards.evaluate`.
One job = one method x all seeds (seed_batch); the same seed gives the same model and own traces to
every method, so methods are paired by seed.

The modules that use torch are imported inside the stage functions: tabulate imports this module
for `figures` and needs no torch.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from iclr26.core.io import dumps_json, read_jsonl, write_jsonl

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
    from iclr26.core.lm.stages import load_model

    from .own_traces import own_traces

    cfg = job.cfg
    info = {}
    if not cfg["model"].get("source"):
        info = train_base_models(job)
    splits = {"test": None, **({"train": cfg["train"]["n_problems"]} if job.dataset == MAIN else {})}
    if cfg["model"].get("source"):
        # a pretrained model (full) is the same for every seed: its traces are written once (seeds
        # vary the SFT and the answer sampling only; audit finding 4) and every seed reads the same file
        return {**info, **shared_own_traces(job, splits)}
    # tiny: each seed is its own base model, so each writes its own traces (one unit per seed)
    seeds = {f"own_s{seed}": seed for seed in cfg["seeds"]}

    def write_own_traces(key: str) -> dict:
        seed = seeds[key]
        model, fmt = load_model(job, seed, base_dir=job.out_dir)
        accuracy = {}
        for split, n in splits.items():
            own = own_traces(model, fmt, problems(job.raw_dir() / f"{split}.jsonl", n, cfg), cfg["method"], seed)
            write_jsonl(job.out_dir / f"own_{split}_s{seed}.jsonl", own)
            accuracy[f"s{seed}_own_{split}_accuracy"] = float(np.mean([t["correct"] for t in own]))
        return accuracy

    for accuracy in job.units(seeds, write_own_traces).values():
        info.update(accuracy)
    return info


def train_base_models(job) -> dict:
    """Tiny: write `tokenizer/` and `base_s<seed>/` (save_pretrained) into job.out_dir, as
    core.lm.stages.train_base_models does, but every seed's model in one stacked run (stacked.py):
    seed s is built from seed s and trained on its own [SKIP]-augmented teacher traces (drawn from s)
    with its own batches; one unit of work for all seeds."""
    from iclr26.core.lm import traces
    from iclr26.core.lm.formats import TagFormat
    from iclr26.core.lm.model import build_model, quiet_transformers
    from iclr26.core.lm.tokenizer import build_tokenizer

    from .own_traces import skip_augmented_examples
    from .stacked import train_stacked

    quiet_transformers()
    cfg, base = job.cfg, job.cfg["base"]
    tokenizer = build_tokenizer(traces.vocabulary(int(cfg["data"][job.dataset]["modulus"])), job.out_dir / "tokenizer")
    seeds = [int(seed) for seed in cfg["seeds"]]

    def train_all(key: str) -> dict:
        rows = read_jsonl(job.raw_dir() / "train.jsonl")
        fmt = TagFormat(tokenizer)
        models = [build_model(cfg["model"], tokenizer, seed=seed) for seed in seeds]
        examples = [skip_augmented_examples(fmt, rows, base["skip_augment"], seed, base.get("augment", "random"))
                    for seed in seeds]
        losses = train_stacked(models, examples, tokenizer.pad_token_id, int(base["steps"]), int(base["batch_size"]),
                               float(base["lr"]), seeds, log=job.log)
        for seed, model in zip(seeds, models):
            model.save_pretrained(job.out_dir / f"base_s{seed}")
        return {f"s{seed}_final_loss": float(np.mean(curve[-20:])) for seed, curve in zip(seeds, losses)}

    key = "base_" + "_".join(f"s{seed}" for seed in seeds)
    return job.units([key], train_all)[key]


def shared_own_traces(job, splits: dict) -> dict:
    """The pretrained model's own traces (full scale), one unit of work (job.units) per generation
    batch of `method.batch_size` problems: a killed job restarts at the first batch not saved, and
    the config's `shards.prepare` spreads the batches over shard jobs (core.job). Each batch samples
    from its own seed, drawn from (the first seed, split, first row), so a batch's traces are the
    same whichever job writes it. The traces are the unit's saved result; once every batch is done
    they are joined in order into own_<split>_s<seed>.jsonl for every seed. The model is loaded by
    the first batch this job computes: a job that only gathers never loads it."""
    from iclr26.core.lm import generate as generation
    from iclr26.core.lm.stages import load_model

    from .own_traces import own_traces

    cfg, seed = job.cfg, int(job.cfg["seeds"][0])
    rows = {split: problems(job.raw_dir() / f"{split}.jsonl", n, cfg) for split, n in splits.items()}
    size = int(cfg["method"].get("batch_size", 512))   # own_traces.sampling's default
    batches = {f"own_{split}_{start:07d}": (split, start)
               for split in rows for start in range(0, len(rows[split]), size)}
    loaded = []

    def one_batch(key: str) -> dict:
        split, start = batches[key]
        if not loaded:
            loaded.extend(load_model(job, seed, base_dir=job.out_dir))
            generation.resume_in(None)   # a unit is one generation batch: nothing to resume inside it
        batch_seed = int(np.random.SeedSequence([seed, list(rows).index(split), start]).generate_state(1)[0])
        own = own_traces(*loaded, rows[split][start: start + size], cfg["method"], batch_seed)
        job.log(f"{key}: {len(own)} traces written")
        # as saved (JSON, sorted keys): the traces joined below are the same bytes whether this job
        # computed a batch or read it back from a shard's save
        return json.loads(dumps_json({"traces": own}))

    done = job.units(batches, one_batch)
    info = {}
    for split in rows:
        own = [trace for key, (where, _) in batches.items() if where == split for trace in done[key]["traces"]]
        for written in cfg["seeds"]:
            write_jsonl(job.out_dir / f"own_{split}_s{written}.jsonl", own)
        info[f"shared_own_{split}_accuracy"] = float(np.mean([t["correct"] for t in own]))
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
    from iclr26.core.lm.train import uses_recipe

    from .finetune import finetune

    seeds = {f"s{seed}": seed for seed in job.seeds}
    if not uses_recipe(job.cfg["train"]) and not job.cfg["model"].get("source"):   # tiny: stacked
        return finetune_stacked(job, seeds)

    def finetune_one(key: str) -> dict:
        seed = seeds[key]
        model, fmt = load_model(job, seed, base_dir=job.prepared_dir(MAIN))
        own = read_jsonl(job.prepared_dir(MAIN) / f"own_train_s{seed}.jsonl")
        metrics, model = finetune(model, fmt, own, job.cfg, job.method, seed, log=job.log)
        save_finetuned(model, fmt.tokenizer, job.out_dir / f"sft_{key}")
        return metrics

    return job.units(seeds, finetune_one)


def finetune_stacked(job, seeds: dict) -> dict:
    """Tiny: the SFT of every seed of the job in one stacked run (stacked.py), one unit of work for
    all of them; each seed's model, data and batches are its own. Per seed the training of finetune()
    (core.lm.model.train_lm; equal to float rounding over a short run), the same metrics."""
    from iclr26.core.lm.stages import load_model, save_finetuned

    from .finetune import sft_examples, sft_metrics
    from .stacked import train_stacked

    sft = job.cfg["train"]

    def train_all(key: str) -> dict:
        loaded = [load_model(job, seed, base_dir=job.prepared_dir(MAIN)) for seed in seeds.values()]
        owns = [read_jsonl(job.prepared_dir(MAIN) / f"own_train_s{seed}.jsonl") for seed in seeds.values()]
        prepared = [sft_examples(fmt, own, job.cfg, job.method, seed)
                    for (_, fmt), own, seed in zip(loaded, owns, seeds.values())]
        steps = {int(p[1]["sft_steps"]) for p in prepared}
        if len(steps) != 1:
            raise ValueError(f"stacked SFT needs one step count for every seed (train.steps), got {sorted(steps)}")
        models = [model for model, _ in loaded]
        for model in models:   # a saved model loads with sdpa, which vmap runs one slice at a time
            model.set_attn_implementation(job.cfg["model"].get("attn_implementation") or "eager")
        losses = train_stacked(models, [p[0] for p in prepared], loaded[0][1].tokenizer.pad_token_id, steps.pop(),
                               int(sft["batch_size"]), float(sft["lr"]), list(seeds.values()),
                               warmup=int(sft.get("warmup", 10)), log=job.log)
        out = {}
        for name, (model, fmt), (_, info), curve in zip(seeds, loaded, prepared, losses):
            save_finetuned(model, fmt.tokenizer, job.out_dir / f"sft_{name}")
            out[name] = sft_metrics(info, curve)
        return out

    key = "sft_" + "_".join(seeds)
    return job.units([key], train_all)[key]


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
    if cfg["model"].get("source"):
        return {"records": evaluate_in_units(job, kappas, rule)}
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


def evaluate_in_units(job, kappas: list[float], rule: str) -> list[dict]:
    """Full scale (hours of generation): the records of `evaluate`, from one job.units call, so that a
    killed job resumes at the first unit not saved and `shards.evaluate` spreads the units over shard
    jobs (core.job). One unit per Stage A pass (dataset x seed x kappa: prune_records of one kappa;
    acc_drop and oracle_drop are taken from the kappa-0 unit when the records are assembled) and
    one per generation batch (`method.batch_size` problems) of Stage B's answers, each sampled from
    its own seed drawn from (seed, first row); Stage B's record is the batches' means weighted by
    their rows. A job loads a model when its first unit needs it, one at a time."""
    from iclr26.core.lm import generate as generation
    from iclr26.core.lm.stages import load_model

    from .finetune import answer_record
    from .pruning import prune_records

    cfg = job.cfg
    size = int(cfg["method"].get("batch_size", 512))   # own_traces.sampling's default
    sft = job.method in cfg["train"]["sft_methods"]
    rows = read_jsonl(job.raw_dir(MAIN) / "test.jsonl") if sft else []
    units = {f"prune_{dataset}_s{seed}_k{kappa:g}": ("prune", dataset, seed, kappa)
             for dataset in job.paper.datasets if not _skipped(job, dataset)
             for seed in job.seeds for kappa in kappas}
    units.update({f"sft_s{seed}_{start:07d}": ("sft", MAIN, seed, start)
                  for seed in (job.seeds if sft else []) for start in range(0, len(rows), size)})
    loaded: dict = {}

    def model_for(what: str, dataset: str, seed: int):
        if (what, dataset, seed) not in loaded:
            loaded.clear()   # one model on the GPU at a time
            if what == "prune":
                loaded[what, dataset, seed] = load_model(job, seed, base_dir=job.prepared_dir(dataset))
            else:
                loaded[what, dataset, seed] = load_model(job, seed, finetuned=job.out_dir / f"sft_s{seed}")
                generation.resume_in(None)   # a unit is one generation batch: nothing to resume inside it
        return loaded[what, dataset, seed]

    def work(key: str) -> dict:
        what, dataset, seed, where = units[key]
        model, fmt = model_for(what, dataset, seed)
        if what == "prune":
            traces = read_jsonl(job.prepared_dir(dataset) / f"own_test_s{seed}.jsonl")
            record = prune_records(model, fmt, traces, rule, [where], cfg["method"], seed, dataset)[0]
        else:
            batch_seed = int(np.random.SeedSequence([seed, where]).generate_state(1)[0])
            record = {**answer_record(model, fmt, rows[where: where + size], cfg, job.method, batch_seed, MAIN),
                      "seed": seed}
        job.log(f"{key}: done")
        return json.loads(dumps_json(record))   # as saved: the same whether computed here or read back

    done = job.units(units, work)
    records = []
    for dataset, seed in dict.fromkeys((d, s) for what, d, s, _ in units.values() if what == "prune"):
        part = [dict(done[k]) for k, (what, d, s, _) in units.items() if what == "prune" and (d, s) == (dataset, seed)]
        base = next((r for r in part if r["kappa"] == 0), None)
        for r in part:
            r["acc_drop"] = r["accuracy"] - base["accuracy"] if base is not None else None
            r["oracle_drop"] = base["oracle_drop"] if base is not None else None
        records += part
    for seed in job.seeds if sft else []:
        part = [done[k] for k, (what, _, s, _) in units.items() if what == "sft" and s == seed]
        n = sum(r["n"] for r in part)
        means = {m: sum(r[m] * r["n"] for r in part) / n for m in ("accuracy", "thinking_tokens", "skip_ratio",
                                                                    "comp_steps") if m in part[0]}
        records.append({**part[0], **means, "n": n})
    return records


def figures(cfg: dict, records, out_dir) -> list[Path]:
    from . import PAPER
    from .plots import accuracy_vs_mask_ratio

    return [accuracy_vs_mask_ratio(records, PAPER.methods, PAPER.datasets, out_dir)]
