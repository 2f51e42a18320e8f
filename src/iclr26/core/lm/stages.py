"""What the stage functions of the language-model papers share: the problems (acquire), the tiny
stand-in for the pretrained reasoning model (prepare), and the model a later stage works with.

acquire            tiny (`source: chains`): seeded chain-arithmetic problems with their teacher
                   traces, `n_<split>` rows per split; full (`source: hub`): the hub or URL files of
                   the config's `splits` (checksummed), and model.source at its pinned commit into
                   the shared hub cache (core.acquire.snapshot_model: acquire runs on a CPU node
                   with internet). Both write the same `<split>.jsonl` rows.
train_base_models  tiny: the task's tokenizer and, per seed, a Qwen2 trained from scratch on the
                   teacher traces (one unit of work per seed, so a killed prepare resumes).
load_model         a fine-tuned save (save_finetuned: weights, or LoRA adapters put back on
                   model.source), else model.source (full scale: its snapshot, offline), else the
                   seed's base model; with the config's text format. With a pretrained model every
                   later generation batch of the job is a checkpoint (core.lm.generate.resume_in).
"""
from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ..distributed import world_size
from ..errors import ConfigError
from ..io import read_jsonl
from ..runtime import pick_device
from . import traces
from .formats import TagFormat, make_format
from .tokenizer import build_tokenizer, load_tokenizer

# .model (torch) is imported inside the functions that build a model: acquire needs no torch

# examples_for(format, rows, seed) -> [(token ids, index where the loss starts), ...]
ExamplesFor = Callable[[object, list, int], list]


def acquire(job, splits: tuple[str, ...]) -> dict:
    """Write `<split>.jsonl` for job.dataset into job.out_dir; returns the provenance. The tiny
    splits are generated in the order given (each split's seed follows from its position)."""
    spec = job.cfg["data"][job.dataset]
    if spec["source"] == "hub":
        from ..acquire import snapshot_model
        from .benchmarks import fetch_splits

        info = fetch_splits(spec["splits"], job.out_dir)
        model = job.cfg.get("model") or {}
        if model.get("source") and not Path(model["source"]).exists():  # a hub id: the weights, pinned
            info["model"] = snapshot_model(model)
        return info
    if spec["source"] != "chains":
        raise ConfigError(f"data.{job.dataset}.source must be chains or hub, got {spec['source']!r}")
    return traces.write_splits(spec, job.out_dir, {split: spec[f"n_{split}"] for split in splits})


def train_base_models(job, examples_for: ExamplesFor) -> dict:
    """Write `tokenizer/` and `base_s<seed>/` (save_pretrained) into job.out_dir for every seed."""
    from .model import build_model, quiet_transformers, train_lm

    quiet_transformers()
    spec, base = job.cfg["data"][job.dataset], job.cfg["base"]
    tokenizer = build_tokenizer(traces.vocabulary(int(spec["modulus"])), job.out_dir / "tokenizer")
    rows = read_jsonl(job.raw_dir() / "train.jsonl")
    seeds = {f"base_s{seed}": seed for seed in job.cfg["seeds"]}

    def train_one(key: str) -> dict:
        seed = seeds[key]
        model = build_model(job.cfg["model"], tokenizer, seed=seed)
        examples = examples_for(TagFormat(tokenizer), rows, seed)
        losses = train_lm(model, [e[0] for e in examples], [e[1] for e in examples], tokenizer.pad_token_id,
                          base["steps"], base["batch_size"], base["lr"], seed, log=job.log)
        model.save_pretrained(job.out_dir / key)
        return {"final_loss": float(np.mean(losses[-20:]))}

    done = job.units(seeds, train_one)
    return {f"s{seeds[key]}_final_loss": result["final_loss"] for key, result in done.items()}


def load_model(job, seed: int, base_dir: Path | None = None, finetuned: Path | None = None):
    """(model in eval mode on the configured device, format). `finetuned`: a folder written by
    save_finetuned; else model.source when the config names one (full scale); else the seed's base
    model in `base_dir`, a folder written by train_base_models (tiny)."""
    from . import generate
    from .model import build_model, quiet_transformers

    quiet_transformers()
    device = pick_device(job.cfg.get("device"))
    if device == "cuda" and world_size() > 1:   # each process of a sharded train job on its own GPU
        device = f"cuda:{os.environ.get('LOCAL_RANK', '0')}"
    spec = job.cfg["model"]
    # a pretrained model (full scale): every generation batch is a checkpoint of this job (under its
    # config digest: a changed config starts afresh, as job.units does)
    resumable = spec.get("source") and spec.get("resume_generation", True)
    digest = str(getattr(job, "config_digest", "") or "any")[:16]
    generate.resume_in(job.out_dir / "generation" / digest if resumable else None)
    if finetuned is not None and (Path(finetuned) / "adapter_config.json").exists():  # LoRA: base + adapters
        from .train import load_adapters

        tokenizer = load_tokenizer(Path(finetuned) / "tokenizer")
        model = load_adapters(build_model(spec, tokenizer, device=device), Path(finetuned))
    elif finetuned is not None:
        tokenizer = load_tokenizer(Path(finetuned) / "tokenizer")
        model = build_model({**spec, "source": str(finetuned)}, tokenizer, device=device)
    elif spec.get("source"):
        from ..acquire import model_path

        tokenizer = load_tokenizer(model_path(spec))   # offline: the snapshot acquire downloaded
        model = build_model(spec, tokenizer, device=device)
    elif base_dir is None:
        raise ValueError("model.source is null: load_model needs the base_dir of the seed's base model")
    else:
        tokenizer = load_tokenizer(Path(base_dir) / "tokenizer")
        model = build_model({"source": str(Path(base_dir) / f"base_s{seed}")}, tokenizer, device=device)
    return model.eval(), make_format(job.cfg.get("format"), tokenizer)


def save_finetuned(model, tokenizer, directory: Path) -> None:
    """The model (or its LoRA adapters) with its tokenizer, as load_model(finetuned=directory) reads
    them back. Every process of a data-parallel job calls it; the main process writes."""
    from ..distributed import is_main_process
    from .train import save_trained

    save_trained(model, Path(directory), is_main_process())
    if is_main_process():
        # its own folder: beside a model's config.json, AutoTokenizer would rebuild it as that model's class
        tokenizer.save_pretrained(Path(directory) / "tokenizer")
