"""Batched generation with a KV cache, per-token statistics, prefilling and teacher-forced scoring.

Every sampled token comes with three numbers of the model's own next-token distribution p (at
temperature 1, before any ban or temperature, as vLLM reports log-probs):
    logprob   log p(sampled token)
    entropy   H = -sum_v p(v) log p(v)       (the token entropy)
    maxprob   max_v p(v)                     (a confidence of the distribution)
A prompt may end inside the thinking span: that is prefilling (the model continues from there).

Resumable at full scale: inside `resume_in(folder)` (core.lm.stages.load_model turns it on when the
model is pretrained), every generation batch is a checkpoint: its rows and the sampler's state after
it are saved atomically as <folder>/<call key>/chunk_<first row>.pt, and a job killed at its runtime
limit starts, on retry, at the first batch not saved, with the same random stream, so the result
equals an uninterrupted run's. The call key hashes the prompts, the sampling settings, the seed and
the model's path and a checksum of its weights.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

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
             before_token=None, batch_size: int = 512, top_p: float = 1.0, resume_key=None) -> Generation:
    """Continue each prompt until eos or max_new_tokens. temperature 0 is greedy; otherwise nucleus
    sampling at `top_p` (the smallest token set whose mass reaches it).
    `banned` token ids get logit -inf when sampling (keyword suppression).
    `before_token(rows, last_tokens, gen)` is called before every decoding pass with the row
    indices of the chunk, their last token and the Generation so far (used to set steering).
    `resume_key`: what else decides the output (e.g. the steering that before_token applies); part
    of the key of the saved batches (see the module docstring)."""
    out = Generation()
    gen = torch.Generator(device=model.device).manual_seed(int(seed))
    store = _ChunkStore.open(model, prompts, (max_new_tokens, temperature, top_p, seed, banned, batch_size,
                                               before_token is not None, resume_key))
    for start in range(0, len(prompts), batch_size):
        rows = list(range(start, min(len(prompts), start + batch_size)))
        if store is not None and store.load(start, len(rows), out, gen):
            continue
        _generate_chunk(model, [prompts[i] for i in rows], rows, pad_id, eos_id, max_new_tokens,
                        (temperature, top_p), gen, banned, before_token, out)
        if store is not None:
            store.save(start, rows, out, gen)
    return out


_RESUME_DIR: Path | None = None
FIELDS = ("tokens", "logprob", "entropy", "maxprob")


def resume_in(directory) -> None:
    """Save every later generation batch under `directory` and reuse saved ones (None: off)."""
    global _RESUME_DIR
    _RESUME_DIR = Path(directory).resolve() if directory is not None else None   # not the next cwd's
    if directory is not None:   # off again when this job ends (core.job), so no later job reuses it
        from ..job import at_job_end

        at_job_end(lambda: resume_in(None))


def _plain(value):
    """JSON for a key: arrays and tensors as lists, anything else as its text."""
    return value.tolist() if hasattr(value, "tolist") else str(value)


class _ChunkStore:
    """The saved batches of one generate() call (see the module docstring)."""

    def __init__(self, folder: Path):
        self.folder = folder

    @classmethod
    def open(cls, model, prompts, settings) -> _ChunkStore | None:
        if _RESUME_DIR is None:
            return None
        name = str(getattr(getattr(model, "config", None), "_name_or_path", "") or type(model).__name__)
        with torch.no_grad():   # one number of the weights: another fine-tune of the same base differs
            weights = float(torch.stack([p.detach().float().sum() for p in model.parameters()]).double().sum())
        # a wrapper that changes the logits (a decoding grammar, steering) is part of the key: its class
        # and its own `resume_key`, so the same weights decoded another way never reuse these batches
        wrapper = [type(model).__qualname__, getattr(model, "resume_key", None)]
        key = hashlib.sha256(json.dumps([name, wrapper, f"{weights:.6e}", prompts,
                                         [s if not isinstance(s, set) else sorted(s) for s in settings]],
                                        default=_plain).encode()).hexdigest()
        return cls(_RESUME_DIR / key[:24])

    def _path(self, start: int) -> Path:
        return self.folder / f"chunk_{start:07d}.pt"

    def load(self, start: int, n_rows: int, out: Generation, gen: torch.Generator) -> bool:
        """Append the saved batch at `start` to `out` and put `gen` in its saved state; False when
        there is none, or when the file is not one that save() wrote (then the batch is generated
        again and the file replaced). Tensors and plain data only: loading never runs code from the
        file (audit 2026-12-02, H9: weights_only=False here ran a planted pickle)."""
        path = self._path(start)
        if not path.exists():
            return False
        try:
            saved = torch.load(path, map_location="cpu", weights_only=True)
            why = _not_a_batch(saved, n_rows)
        except Exception as err:   # a planted pickle (UnpicklingError), a truncated or foreign file
            why = _first_line(err)
        if why is None:
            before = gen.get_state()
            try:
                gen.set_state(saved["rng"])   # checks the state's size against this generator's
            except (RuntimeError, TypeError, ValueError) as err:
                gen.set_state(before)
                why = f"its sampler state does not fit this generator ({_first_line(err)})"
        if why is not None:
            print(f"[generate] refusing {path}: {why}; generating this batch again", flush=True)
            return False
        for name in FIELDS:
            getattr(out, name).extend(saved[name])
        return True

    def save(self, start: int, rows: list[int], out: Generation, gen: torch.Generator) -> None:
        from ..distributed import is_main_process

        if not is_main_process():
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self._path(start)
        part = path.with_name(path.name + ".part")
        torch.save({**{name: [getattr(out, name)[r] for r in rows] for name in FIELDS}, "rng": gen.get_state()}, part)
        os.replace(part, path)


def _first_line(err: Exception) -> str:
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0]}" if lines else type(err).__name__


def _not_a_batch(saved, n_rows: int) -> str | None:
    """Why `saved` (what torch.load read) is not a batch that _ChunkStore.save wrote, or None."""
    if not isinstance(saved, dict) or set(saved) != {*FIELDS, "rng"}:
        return "not a saved generation batch (its keys differ)"
    for name in FIELDS:
        rows, kind = saved[name], int if name == "tokens" else float
        if not (isinstance(rows, list) and len(rows) == n_rows and all(
                isinstance(row, list) and all(type(v) is kind for v in row) for row in rows)):
            return f"its {name!r} is not {n_rows} lists of {kind.__name__}s"
    rng = saved["rng"]
    if not (isinstance(rng, torch.Tensor) and rng.dtype == torch.uint8 and rng.device.type == "cpu"):
        return "its sampler state is not a uint8 tensor"
    return None


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
