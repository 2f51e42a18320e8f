"""The pretrained model both learners start from.

Tiny and smoke: a small Qwen2 causal transformer built from config (core.lm.model.build_model) and
"pretrained" on a distribution of 2-D classification tasks with the numerical prior (card 04,
section 6): sequences of K `x1 x2 label` examples, cross-entropy on every label token, so that it
learns to classify in context and carries the prior. Its word-level tokenizer (grid numbers and the
labels) and weights are written with save_pretrained, and read back like a hub model.
Full: the hub LM named by model.source, loaded with from_pretrained (core.acquire).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from . import data


def build_tokenizer(fmt: dict, grid: int):
    """A word-level tokenizer over the serialisation's words: the grid numbers and the labels.
    (No library tokenizer has this vocabulary; `tokenizers` WordLevel is the library's way to
    declare one.) The separator and spaces are whitespace, so an example is 3 tokens."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["<pad>", "<unk>"] + [str(i) for i in range(grid)] + [lab.strip() for lab in fmt["labels"]]
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", unk_token="<unk>")


def label_token_ids(tokenizer, fmt: dict) -> list[int]:
    """The one token each label adds after a query (checked: the query's tokens are unchanged)."""
    prefix = data.example_text(fmt, 3, 7, None)
    base = tokenizer(prefix, add_special_tokens=False)["input_ids"]
    ids = []
    for label in fmt["labels"]:
        full = tokenizer(prefix + label, add_special_tokens=False)["input_ids"]
        if full[: len(base)] != base or len(full) != len(base) + 1:
            raise ValueError(f"label {label!r} is not one token after {prefix!r} with this tokenizer "
                             f"({base} -> {full}); change format.labels or format.template")
        ids.append(full[-1])
    if len(set(ids)) != len(ids):
        raise ValueError(f"labels {fmt['labels']} map to the same token {ids}")
    return ids


def encode(tokenizer, texts: list[str]) -> list[list[int]]:
    return tokenizer(texts, add_special_tokens=False)["input_ids"]


def pretrain(spec_model: dict, spec_pre: dict, fmt: dict, grid: int, seeds: list[int], log=None):
    """Build one tiny model per seed from config and pretrain each on its own stream of fresh
    prior-carrying tasks; returns (models, tokenizer, loss curves). AdamW with a OneCycle schedule
    and gradient clipping at norm 1 (card 04, section 6).

    The seeds' models train together (core.stacked): every weight stacked once per seed, the
    model's own forward pass vmapped over them, each seed's gradient clipped by its own norm, and
    one AdamW over the stacked weights (elementwise, so each slice follows its own AdamW exactly).
    Same result as one run per seed, a fraction of the CPU time: the model is so small that a step
    is mostly per-call overhead."""
    from torch.func import functional_call

    from iclr26.core.lm.model import build_model
    from iclr26.core.stacked import stack, train_stacked, unstack_into

    tokenizer = build_tokenizer(fmt, grid)
    models = [build_model(spec_model, tokenizer, seed=int(seed)) for seed in seeds]
    label_ids = torch.tensor(label_token_ids(tokenizer, fmt))
    number_ids = torch.tensor([tokenizer.convert_tokens_to_ids(str(i)) for i in range(grid)])
    steps, batch = int(spec_pre["steps"]), int(spec_pre["batch_size"])
    rngs = [np.random.default_rng(int(seed)) for seed in seeds]
    torch.manual_seed(int(seeds[0]))
    base, params = stack(models)
    opt = torch.optim.AdamW(list(params.values()), lr=float(spec_pre["lr"]),
                            weight_decay=float(spec_pre["weight_decay"]))
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=float(spec_pre["lr"]), total_steps=steps,
                                                pct_start=float(spec_pre["pct_start"]))

    def batch_ids(rng) -> torch.Tensor:
        x, y = data.pretraining_batch(rng, batch, {**spec_pre, "grid": grid})
        # the serialisation's token ids directly: an example is [x1, x2, label] (build_tokenizer)
        return torch.stack([number_ids[torch.from_numpy(x[..., 0])], number_ids[torch.from_numpy(x[..., 1])],
                            label_ids[torch.from_numpy(y)]], dim=-1).reshape(batch, -1)

    def seq_loss(params, ids):
        logits = functional_call(base, params, (ids,), {"use_cache": False}).logits
        at = torch.arange(1, ids.shape[1], 3)            # the x2 positions: the next token is the label
        return torch.nn.functional.cross_entropy(logits[:, at].reshape(-1, logits.shape[-1]),
                                                 ids[:, at + 1].reshape(-1))

    def report(step: int, curves: list[list[float]]) -> None:
        if log:
            log(f"pretrain step {step + 1}/{steps} loss {np.mean([c[-50:] for c in curves]):.3f}", every_s=10)

    base.train()
    losses = train_stacked(params, seq_loss, lambda step: (torch.stack([batch_ids(rng) for rng in rngs]),),
                           opt, sched, steps, max_norm=1.0, log=report)
    unstack_into(models, params)
    for m in models:
        m.eval()
    return models, tokenizer, losses


def check_tiny_serialisation(tokenizer, fmt: dict, grid: int) -> None:
    """The ids pretrain() builds directly are what the tokenizer makes of the text (one path),
    the largest (multi-digit) grid numbers included."""
    a, b = grid - 1, grid - 2
    text = fmt["sep"].join([data.example_text(fmt, a, 0, 0), data.example_text(fmt, b, a, 1)])
    want = [tokenizer.convert_tokens_to_ids(t) for t in (str(a), "0", fmt["labels"][0].strip(),
                                                         str(b), str(a), fmt["labels"][1].strip())]
    got = encode(tokenizer, [text])[0]
    if got != want:
        raise ValueError(f"tiny tokenizer: {text!r} -> {got}, expected {want}")


def load_tokenizer(source: str | Path, revision: str | None):
    """The directory's (or hub repo's) tokenizer.json as written. AutoTokenizer would pick the model
    type's tokenizer class (Qwen2's), which re-splits digits: the tiny vocabulary's "10" became "1" "0"."""
    from transformers import PreTrainedTokenizerFast

    from iclr26.core.acquire import from_pretrained

    return from_pretrained(PreTrainedTokenizerFast, str(source), revision)


def load(source: str | Path, revision: str | None, dtype: str, device: str, attn_implementation: str = "eager"):
    """(model, tokenizer) from a hub id or a save_pretrained directory (tiny: prepare's)."""
    from transformers import AutoModelForCausalLM

    from iclr26.core.acquire import from_pretrained
    from iclr26.core.lm.model import quiet_transformers

    quiet_transformers()
    model = from_pretrained(AutoModelForCausalLM, str(source), revision, dtype=getattr(torch, dtype),
                            attn_implementation=attn_implementation)
    return model.to(device).eval(), load_tokenizer(source, revision)
