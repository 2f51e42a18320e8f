"""Batched generation with a KV cache, per-token statistics, prefilling and teacher-forced scoring.

Every sampled token comes with three numbers of the model's own next-token distribution p (at
temperature 1, before any ban or temperature, as vLLM reports log-probs):
    logprob   log p(sampled token)
    entropy   H = -sum_v p(v) log p(v)       (the token entropy)
    maxprob   max_v p(v)                     (a confidence of the distribution)
A prompt may end inside the thinking span: that is prefilling (the model continues from there).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .model import pad_batch


def token_stats(logits: torch.Tensor, chosen: torch.Tensor):
    """(logprob of chosen, entropy, max prob) over the last dim."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    p = logp.exp()
    entropy = -(p * logp).sum(-1)
    return logp.gather(-1, chosen[..., None])[..., 0], entropy, p.max(-1).values


@dataclass
class Generation:
    tokens: list[list[int]] = field(default_factory=list)     # new tokens per row (up to and incl. eos)
    logprob: list[list[float]] = field(default_factory=list)
    entropy: list[list[float]] = field(default_factory=list)
    maxprob: list[list[float]] = field(default_factory=list)


@torch.no_grad()
def generate(model, prompts: list[list[int]], pad_id: int, eos_id: int, max_new_tokens: int,
             temperature: float = 0.0, seed: int = 0, banned: list[int] | None = None,
             before_token=None, batch_size: int = 512, top_p: float = 1.0) -> Generation:
    """Continue each prompt until eos or max_new_tokens. temperature 0 is greedy; otherwise nucleus
    sampling at `top_p` (the smallest token set whose mass reaches it).
    `banned` token ids get logit -inf when sampling (keyword suppression).
    `before_token(rows, last_tokens, gen)` is called before every decoding pass with the row
    indices of the chunk, their last token and the Generation so far (used to set steering)."""
    out = Generation()
    gen = torch.Generator(device=model.device).manual_seed(int(seed))
    for start in range(0, len(prompts), batch_size):
        rows = list(range(start, min(len(prompts), start + batch_size)))
        _generate_chunk(model, [prompts[i] for i in rows], rows, pad_id, eos_id, max_new_tokens,
                        (temperature, top_p), gen, banned, before_token, out)
    return out


def _generate_chunk(model, prompts, rows, pad_id, eos_id, max_new, sampling, gen, banned, before_token, out):
    ids, mask = (t.to(model.device) for t in pad_batch(prompts, pad_id, side="left"))
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    for _ in rows:
        for seq in (out.tokens, out.logprob, out.entropy, out.maxprob):
            seq.append([])
    done = torch.zeros(len(rows), dtype=torch.bool, device=ids.device)
    cache = None
    step_input, step_pos = ids, positions
    for _ in range(max_new):
        if before_token is not None and cache is not None:
            before_token(rows, step_input[:, -1], out)
        result = model(input_ids=step_input, attention_mask=mask, position_ids=step_pos,
                       cache=cache, use_cache=True, logits_to_keep=1)
        cache = result.cache
        logits = result.logits[:, -1, :].float()
        chosen = _pick(logits, *sampling, gen, banned)
        stats = token_stats(logits, chosen)
        host = [t.tolist() for t in (chosen, *stats, done)]   # one device-to-host copy per step
        for b, row in enumerate(rows):
            if not host[4][b]:
                for seq, values in zip((out.tokens, out.logprob, out.entropy, out.maxprob), host[:4]):
                    seq[row].append(values[b])
        done |= chosen == eos_id
        if bool(done.all()):
            break
        chosen = torch.where(done, torch.full_like(chosen, pad_id), chosen)
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)  # finished rows feed pad; ignored
        step_pos = step_pos[:, -1:] + 1
        step_input = chosen[:, None]


def _pick(logits, temperature, top_p, gen, banned):
    if banned:
        logits = logits.clone()
        logits[:, banned] = float("-inf")
    if temperature <= 0:
        return logits.argmax(-1)
    probs = torch.softmax(logits / temperature, dim=-1)
    if top_p < 1.0:  # keep the smallest set of tokens whose mass reaches top_p (the first always kept)
        sorted_p, order = probs.sort(dim=-1, descending=True)
        drop = (sorted_p.cumsum(-1) - sorted_p) >= top_p
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_p.masked_fill(drop, 0.0))
    return torch.multinomial(probs, 1, generator=gen)[:, 0]


@torch.no_grad()
def score(model, sequences: list[list[int]], pad_id: int, batch_size: int = 256) -> dict[str, list[list[float]]]:
    """Teacher-forced statistics of every token: index t holds the stats of predicting token t from
    tokens < t (index 0 is nan). Keys logprob, entropy, maxprob."""
    stats = {"logprob": [], "entropy": [], "maxprob": []}
    for start in range(0, len(sequences), batch_size):
        chunk = sequences[start: start + batch_size]
        ids, mask = (t.to(model.device) for t in pad_batch(chunk, pad_id, side="right"))
        logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1]
        logprob, entropy, maxprob = token_stats(logits, ids[:, 1:])
        for b, seq in enumerate(chunk):
            n = len(seq)
            for key, values in (("logprob", logprob), ("entropy", entropy), ("maxprob", maxprob)):
                stats[key].append([float("nan")] + values[b, : n - 1].tolist())
    return stats
