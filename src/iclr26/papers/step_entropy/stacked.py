"""Tiny scale: several small models trained side by side in one process (core.stacked, as
icl_vs_sft's pretraining does: every weight stacked once per model, the model's own forward pass
vmapped over them, each model's gradient clipped by its own norm, one AdamW over the stacked
weights, elementwise, so each slice follows its own AdamW). Per model this is
core.lm.model.train_lm: the same batches (drawn from the model's own seed), loss (next-token
cross-entropy from loss_from on), clipping, optimiser and schedule; the seeds' base models
(prepare) and a method's seeds' SFT models (train) share one process. Rows are right-padded and
fed without an attention mask: under the causal mask a real token never attends to a later pad,
so its logits are those of the masked call.
"""
from __future__ import annotations

import numpy as np
import torch


def train_stacked(models: list, examples: list[list[tuple[list[int], int]]], pad_id: int, steps: int,
                  batch_size: int, lr: float, seeds: list[int], weight_decay: float = 0.0, warmup: int = 20,
                  log=None) -> list[list[float]]:
    """Train models[i] on examples[i] = [(token ids, index where the loss starts), ...] with the
    batches of seeds[i]; the models are updated in place and left in eval mode. Returns the loss
    curve of every model."""
    from torch.func import functional_call

    from iclr26.core import stacked

    if not (len(models) == len(examples) == len(seeds)):
        raise ValueError(f"train_stacked: {len(models)} models, {len(examples)} example sets, {len(seeds)} seeds")
    n = len(models)
    rngs = [np.random.default_rng(int(seed)) for seed in seeds]
    torch.manual_seed(int(seeds[0]))   # nothing random in a step (no dropout); as train_lm does
    base, params = stacked.stack(models)
    optimizer = torch.optim.AdamW(list(params.values()), lr=lr, weight_decay=weight_decay)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / max(1, warmup))
                                                 * 0.5 * (1 + np.cos(np.pi * min(s, steps) / max(1, steps))))
    lengths = [np.array([len(ids) for ids, _ in ex]) for ex in examples]
    starts = [np.array([start for _, start in ex]) for ex in examples]

    def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
        picks = [rng.integers(0, len(ex), size=batch_size) for rng, ex in zip(rngs, examples)]
        width = max(int(length[pick].max()) for length, pick in zip(lengths, picks))
        ids = np.full((n, batch_size, width), pad_id, dtype=np.int64)
        for k, (ex, pick) in enumerate(zip(examples, picks)):
            for row, i in enumerate(pick):
                ids[k, row, : len(ex[i][0])] = ex[i][0]
        at = np.arange(width)
        keep = np.stack([(at >= start[pick][:, None]) & (at < length[pick][:, None])
                         for start, length, pick in zip(starts, lengths, picks)])
        ids = torch.from_numpy(ids)
        return ids, torch.where(torch.from_numpy(keep), ids, torch.full_like(ids, -100))

    def loss_of(params, ids, labels):
        logits = functional_call(base, params, (ids,), {"use_cache": False}).logits[:, :-1]
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(),
                                                 labels[:, 1:].reshape(-1), ignore_index=-100)

    def report(step: int, curves: list[list[float]]) -> None:
        if log is not None:
            log(f"step {step + 1}/{steps} loss {np.mean([c[-1] for c in curves]):.3f}", every_s=10)

    base.train()
    losses = stacked.train_stacked(params, loss_of, batch, optimizer, schedule, steps, max_norm=1.0, log=report)
    stacked.unstack_into(models, params)
    for model in models:
        model.eval()
    return losses
