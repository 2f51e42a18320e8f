"""Stage B of card 07 (section 2.3): fine-tune the model on its own correct training traces,
compressed at kappa = sft_kappa by the method's rule (full_cot: uncompressed, the data-matched
control), then let the fine-tuned model answer from the bare prompt. GRPO is not run (config note).

Tiny: the base model is fine-tuned whole, the job's seeds side by side in one process (stacked.py;
per seed the same as core.lm.model.train_lm). Full: the
official recipe (its sft.py: LoRA r16/alpha16 via peft, max length 2048, lr 2e-5, sharded over the
job's GPUs) through core.lm.train.train_recipe, which the config's train block states.
"""
from __future__ import annotations

import math

import numpy as np

from iclr26.core.lm import generate as generation
from iclr26.core.lm.model import train_lm
from iclr26.core.lm.tokenizer import SKIP
from iclr26.core.lm.traces import step_kind
from iclr26.core.lm.train import train_recipe, uses_recipe

from . import method
from .own_traces import sampling
from .pruning import NEEDED, compress, necessary_kept, value_groups


def sft_rule(method_name: str, cfg: dict) -> tuple[str, float]:
    """(rule, kappa) of a method's SFT data; full_cot fine-tunes on uncompressed traces (kappa 0)."""
    return ("low_entropy", 0.0) if method_name == "full_cot" else (method_name, float(cfg["train"]["sft_kappa"]))


def sft_examples(fmt, own: list[dict], cfg: dict, method_name: str, seed: int) -> tuple[list, dict]:
    """The SFT examples of one seed (the own correct traces compressed by the method's rule, then cut
    to train.max_length where drop_cut says so) and what the metrics report about them."""
    rule, kappa = sft_rule(method_name, cfg)
    kept = [t for t in own if t["correct"]] or own  # smoke-scale models get none right
    rng = np.random.default_rng(seed)
    compressed = [compress(t, kappa, rule, rng) for t in kept]
    examples = fmt.training_examples([t["problem"] for t in kept], [fmt.join_steps(steps) for steps, _ in compressed],
                                     [t["own_answer"] for t in kept])
    sft = dict(cfg["train"])
    if sft.get("steps") is None:   # one epoch over the kept traces (full: sft.py's one epoch, audit finding 7)
        sft["steps"] = max(1, math.ceil(len(examples) / int(sft["batch_size"])))
    cap = sft.get("max_length")    # examples longer than the cap lose their end (</think>, the answer)
    cut = float(np.mean([len(e[0]) > cap for e in examples])) if cap and examples else 0.0
    if cap and sft.get("drop_cut", False):
        examples = [e for e in examples if len(e[0]) <= cap] or examples
    return examples, {"sft_examples": len(examples), "sft_steps": int(sft["steps"]), "cut_share": cut,
                      "own_accuracy": float(np.mean([t["correct"] for t in own])),
                      "necessary_kept": necessary_kept(value_groups(kept), [m for _, m in compressed])}


def sft_metrics(info: dict, losses: list[float]) -> dict:
    return {**info, "final_loss": float(np.mean(losses[-10:]))}


def finetune(model, fmt, own: list[dict], cfg: dict, method_name: str, seed: int, log=None) -> tuple[dict, object]:
    """Fine-tune `model` on the compressed own traces; returns (the training metrics, the trained
    model to save: `model` itself at tiny scale, a LoRA-wrapped model under the full recipe).
    (Tiny scale fine-tunes a job's seeds together: stages.finetune_stacked, the same per seed.)"""
    examples, info = sft_examples(fmt, own, cfg, method_name, seed)
    sft = {**cfg["train"], "steps": info["sft_steps"]}
    if uses_recipe(sft):
        model, losses = train_recipe(model, [e[0] for e in examples], [e[1] for e in examples],
                                     fmt.tokenizer.pad_token_id, {"warmup": 10, **sft}, seed, log=log)
    else:
        losses = train_lm(model, [e[0] for e in examples], [e[1] for e in examples], fmt.tokenizer.pad_token_id,
                          sft["steps"], sft["batch_size"], sft["lr"], seed, warmup=sft.get("warmup", 10), log=log)
    return sft_metrics(info, losses), model


def answer_record(model, fmt, rows: list[dict], cfg: dict, method_name: str, seed: int, dataset: str) -> dict:
    """The fine-tuned model answers every test problem from the bare prompt: accuracy, thinking
    tokens, skip ratio, and on the tiny task the computation steps it still writes."""
    tokenizer = fmt.tokenizer
    out = generation.generate(model, fmt.prompt_ids_many([r["problem"] for r in rows]), tokenizer.pad_token_id,
                              tokenizer.eos_token_id, cfg["method"]["max_new_tokens"], seed=seed,
                              **sampling(cfg["method"]))
    parsed = [fmt.parse(t) for t in out.tokens]
    ratios = [method.skip_ratio(fmt.split_steps(p["thinking"]), SKIP) for p in parsed]
    diagnosis = {}
    if cfg["data"][dataset]["source"] == "chains":  # how many computation steps the model still writes
        diagnosis["comp_steps"] = float(np.mean([sum(step_kind(s) in NEEDED for s in fmt.split_steps(p["thinking"]))
                                                 for p in parsed]))
    return {**diagnosis, "seed": seed, "dataset": dataset, "stage": "sft", "kappa": sft_rule(method_name, cfg)[1],
            "accuracy": float(np.mean([fmt.is_correct(p["answer"], r["answer"]) for p, r in zip(parsed, rows)])),
            "thinking_tokens": float(np.mean([p["thinking_tokens"] for p in parsed])),
            "skip_ratio": float(np.mean(ratios)), "n": len(rows)}
