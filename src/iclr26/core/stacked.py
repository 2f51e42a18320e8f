"""Several models of one architecture trained side by side in one process (torch.func).

Every weight is stacked once per model (a leading model axis), the architecture's own forward
pass is vmapped over the stacks, the per-model losses are summed (each slice gets its own
gradient), each model's gradient is clipped by its own norm, and one optimiser steps the stacked
tensors. With an elementwise optimiser (Adam, AdamW, SGD) each slice follows its own optimiser
exactly, so the result is one run per model at a fraction of the CPU time when the models are so
small that a step is mostly per-call overhead.

    base, params = stack(models)
    optimizer = torch.optim.AdamW(params.values(), lr=...)
    losses = train_stacked(params, loss_of, batch, optimizer, schedule, steps, max_norm=1.0)
    unstack_into(models, params)

`loss_of(params, *tensors)` is one model's loss, usually through
`torch.func.functional_call(base, params, ...)`; `batch(step)` returns the step's tensors with the
model axis first (model k's rows at index k).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable

import torch


def stack(models: list[torch.nn.Module]) -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    """(base, params): models[0] as the module whose forward pass is called, and every parameter
    stacked over the models ([n_models, *shape], a fresh leaf that requires grad). Tied weights
    appear once (named_parameters' rule; functional_call ties them again). Buffers are not stacked:
    the forward pass uses the base's, so they must be equal in every model (checked)."""
    if not models:
        raise ValueError("stack: no models")
    base = models[0]
    for k, model in enumerate(models[1:], 1):
        if type(model) is not type(base):
            raise ValueError(f"stack: model {k} is a {type(model).__name__}, model 0 a {type(base).__name__}")
        mine, theirs = dict(base.named_buffers()), dict(model.named_buffers())
        if mine.keys() != theirs.keys() or any(not torch.equal(mine[n], theirs[n]) for n in mine):
            raise ValueError(f"stack: model {k}'s buffers differ from model 0's (only parameters are stacked)")
    per_model = [dict(model.named_parameters()) for model in models]
    params = {name: torch.stack([p[name].detach() for p in per_model]).requires_grad_()
              for name, _ in base.named_parameters()}
    return base, params


@torch.no_grad()
def clip_grad_norm_per_model_(params: Iterable[torch.Tensor], max_norm: float) -> torch.Tensor:
    """torch.nn.utils.clip_grad_norm_(max_norm) applied to each model's slice of the stacked
    gradients separately: the norm of model k is taken over every tensor's k-th slice, and its
    gradients are scaled by min(1, max_norm / (norm + 1e-6)). Returns the [n_models] norms."""
    params = [p for p in params if p.grad is not None]
    n_models = params[0].shape[0]
    norm = torch.sqrt(sum((p.grad.reshape(n_models, -1) ** 2).sum(1) for p in params))
    coef = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
    for p in params:
        p.grad.mul_(coef.view(-1, *[1] * (p.dim() - 1)))
    return norm


@torch.no_grad()
def unstack_into(models: list[torch.nn.Module], params: dict[str, torch.Tensor]) -> None:
    """Copy model k's slice of every stacked parameter back into models[k] (in place)."""
    for k, model in enumerate(models):
        for name, p in model.named_parameters():
            p.copy_(params[name][k])


def train_stacked(params: dict[str, torch.Tensor], loss_of: Callable[..., torch.Tensor],
                  batch: Callable[[int], tuple[torch.Tensor, ...]], optimizer: torch.optim.Optimizer,
                  schedule, steps: int, max_norm: float,
                  log: Callable[[int, list[list[float]]], None] | None = None) -> list[list[float]]:
    """`steps` steps of: tensors = batch(step); the vmapped loss_of(params, *tensors) per model;
    backward of their sum; clip_grad_norm_per_model_; optimizer.step(); schedule.step() (when not
    None); zero the gradients; then log(step, curves) when given. The caller puts the base module
    in train/eval mode and builds optimizer and schedule over params.values(). Returns the loss
    curve of every model."""
    from torch.func import vmap

    per_model_loss = vmap(loss_of)
    curves: list[list[float]] = [[] for _ in range(next(iter(params.values())).shape[0])]
    for step in range(steps):
        losses = per_model_loss(params, *batch(step))
        losses.sum().backward()
        clip_grad_norm_per_model_(params.values(), max_norm)
        optimizer.step()
        if schedule is not None:
            schedule.step()
        optimizer.zero_grad(set_to_none=True)
        for curve, value in zip(curves, losses.detach().tolist()):
            curve.append(value)
        if log is not None:
            log(step, curves)
    return curves
