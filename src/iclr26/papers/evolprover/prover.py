"""The whole-proof prover: a decoder LM that reads a statement and writes its tactic proof, and
pass@k with the unbiased estimator of Chen et al. 2021 (eq. 1): pass@k = E[1 - C(n-c, k) / C(n, k)].

Tiny: a Qwen2 decoder built from config over a word-level tokenizer of Lean tokens (core.lm.model.build_model's
model, built here as decoder.Qwen2Tiny: the same weights bit for bit, without transformers' model code),
trained from scratch with next-token loss on the proof tokens (core.lm.model.train_lm).
Full: the hub prover (model.source at a pinned commit) fine-tuned with LoRA (core.lm.train).
Both sample n proofs per problem at temperature ${eval.temperature}: the full prover with core.lm.generate,
the tiny one with decoder.sample (the same samples without transformers' per-call cost).
"""
from __future__ import annotations

import math

from . import minilean as ml


def words(text: str) -> str:
    """Lean text as space-separated tokens (the tiny tokenizer's words)."""
    return " ".join(ml.lex(text))


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct (Chen et al. 2021, numerically stable form)."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples, got {n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def examples(tokenizer, pairs: list[tuple[str, str]]) -> tuple[list[list[int]], list[int]]:
    """(token ids of prompt + proof + eos, where the loss starts) for (prompt, proof) texts: the
    loss is on the proof only (supervised fine-tuning on whole proofs)."""
    seqs, starts = [], []
    for prompt, proof in pairs:
        p = tokenizer.encode(prompt, add_special_tokens=False)
        c = tokenizer.encode(proof, add_special_tokens=False) + [tokenizer.eos_token_id]
        seqs.append(p + c)
        starts.append(len(p))
    return seqs, starts


def sample_proofs(model, tokenizer, prompts: list[str], n: int, max_new: int, temperature: float, seed: int,
                  batch_size: int) -> list[list[str]]:
    """n sampled proofs (text) per prompt: core.lm.generate, or for the tiny prover read without
    transformers (decoder.TinyQwen2) decoder.sample, which samples the same tokens."""
    ids = [tokenizer.encode(p, add_special_tokens=False) for p in prompts]
    flat = [row for row in ids for _ in range(n)]
    from .decoder import TinyQwen2, sample

    if isinstance(model, TinyQwen2):
        tokens = sample(model, flat, tokenizer.pad_token_id, tokenizer.eos_token_id, max_new, temperature, seed,
                        batch_size)
    else:
        from iclr26.core.lm.generate import generate

        tokens = generate(model, flat, tokenizer.pad_token_id, tokenizer.eos_token_id, max_new,
                          temperature=temperature, seed=seed, batch_size=batch_size).tokens
    texts = []
    for toks in tokens:
        toks = [t for t in toks if t != tokenizer.eos_token_id]
        texts.append(tokenizer.decode(toks, skip_special_tokens=True))
    return [texts[i * n:(i + 1) * n] for i in range(len(prompts))]


class Checker:
    """The MiniLean kernel with a cache over (problem, proof text): many samples repeat."""

    def __init__(self):
        self.cache: dict = {}

    def __call__(self, key: str, st: ml.Statement, proof: str) -> bool:
        norm = words(proof)
        hit = self.cache.get((key, norm))
        if hit is None:
            hit = self.cache[(key, norm)] = ml.check(st, norm)
        return hit
