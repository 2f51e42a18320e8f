"""The decoder LM: a real `transformers` architecture (Qwen2), built from config at tiny scale and
loaded with from_pretrained at full scale; plus a plain next-token training loop.

Config block (`model:` in a paper config):
    source: null | <hub id> | <save_pretrained directory>
    revision: <40-hex commit>             # hub ids only: snapshot_download'ed by acquire, read offline
    cache_dir: <shared hub cache>         # hub ids only
    endpoint: <hub mirror URL>            # optional (default: the hub client's, HF_ENDPOINT)
    arch: {hidden_size: ..., ...}         # hub ids: checked against config.json at acquire
    config: {hidden_size: 64, ...}        # Qwen2Config fields when source is null
"""
from __future__ import annotations

import numpy as np
import torch


def quiet_transformers() -> None:
    """No shard or weight-loading progress bars in job logs (torch threads and denormals are set
    for every job by core.runtime)."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


def build_model(spec: dict, tokenizer, seed: int = 0, device: str | None = None):
    """A Qwen2ForCausalLM: `from_config` (seeded init) when spec.source is null, else from_pretrained
    (moved to `device` when given: see core.runtime.pick_device)."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    if spec.get("source"):
        from ..acquire import from_pretrained, model_path

        dtype = getattr(torch, spec.get("dtype", "float32"))
        model = from_pretrained(AutoModelForCausalLM, model_path(spec), dtype=dtype)
        return model.to(device) if device else model
    fields = dict(spec.get("config", {}))
    fields.setdefault("num_key_value_heads", fields.get("num_attention_heads", 4))
    config = Qwen2Config(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                         eos_token_id=tokenizer.eos_token_id, bos_token_id=None,
                         attn_implementation=spec.get("attn_implementation", "eager"), **fields)
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config)


def pad_batch(rows: list[list[int]], pad_id: int, side: str = "right"):
    """(ids, attention mask) tensors of equal-length rows."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        sl = slice(0, len(row)) if side == "right" else slice(width - len(row), width)
        ids[i, sl] = torch.tensor(row, dtype=torch.long)
        mask[i, sl] = 1
    return ids, mask


def train_lm(model, sequences: list[list[int]], loss_from: list[int], pad_id: int, steps: int,
             batch_size: int, lr: float, seed: int, weight_decay: float = 0.0, warmup: int = 20,
             log=None) -> list[float]:
    """Next-token cross-entropy on tokens at positions >= loss_from[i] of each sequence (the trace
    and answer, not the prompt), AdamW with linear warm-up then cosine decay; returns the losses."""
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / max(1, warmup))
                                                 * 0.5 * (1 + np.cos(np.pi * min(s, steps) / max(1, steps))))
    model.train()
    losses = []
    for step in range(steps):
        pick = rng.integers(0, len(sequences), size=batch_size)
        ids, mask = (t.to(model.device) for t in pad_batch([sequences[i] for i in pick], pad_id))
        labels = ids.clone()
        labels[mask == 0] = -100
        for row, i in enumerate(pick):
            labels[row, : loss_from[i]] = -100
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.detach().item())
        if log is not None:
            log(f"step {step + 1}/{steps} loss {losses[-1]:.3f}", every_s=10)
    model.eval()
    return losses
