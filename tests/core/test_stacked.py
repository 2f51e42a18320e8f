"""core.stacked: models trained side by side (torch.func) are the models trained one by one."""
from __future__ import annotations

import pytest
import torch

from iclr26.core.stacked import clip_grad_norm_per_model_, stack, train_stacked, unstack_into


def small_model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.LayerNorm(8), torch.nn.Linear(8, 1))


def test_per_model_clipping_is_clip_grad_norm_of_each_model_alone():
    models = [small_model(seed) for seed in range(3)]
    x = torch.randn(5, 3)
    for k, model in enumerate(models):   # norms below, around and well above max_norm
        (model(x).sum() * (0.01, 1.0, 50.0)[k]).backward()
    _, params = stack(models)
    for name, p in params.items():
        p.grad = torch.stack([dict(m.named_parameters())[name].grad for m in models])
    norms = clip_grad_norm_per_model_(params.values(), max_norm=0.5)
    for k, model in enumerate(models):
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        assert torch.allclose(norms[k], norm, rtol=1e-6)
        for name, p in model.named_parameters():
            assert torch.allclose(params[name].grad[k], p.grad, rtol=1e-6, atol=1e-9)
    assert norms.min() < 0.5 < norms.max()   # some models clipped, some not


def run(models: list[torch.nn.Module], xs: torch.Tensor, ys: torch.Tensor, steps: int) -> list[list[float]]:
    """train_stacked over these models; xs, ys: [n_models, steps, batch, ...]."""
    from torch.func import functional_call

    base, params = stack(models)
    optimizer = torch.optim.AdamW(list(params.values()), lr=0.05, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0 - s / steps)

    def loss_of(p, x, y):
        return torch.nn.functional.mse_loss(functional_call(base, p, (x,)), y)

    losses = train_stacked(params, loss_of, lambda step: (xs[:, step], ys[:, step]), optimizer, schedule, steps,
                           max_norm=0.5)
    unstack_into(models, params)
    return losses


def test_a_stacked_run_is_separate_runs():
    steps, gen = 8, torch.Generator().manual_seed(0)
    xs, ys = torch.randn(2, steps, 4, 3, generator=gen), 5 * torch.randn(2, steps, 4, 1, generator=gen)
    pair = [small_model(seed) for seed in (0, 1)]
    losses = run(pair, xs, ys, steps)
    for k in (0, 1):   # the plain loop: torch's clip_grad_norm_, AdamW, schedule
        alone = small_model(k)
        optimizer = torch.optim.AdamW(alone.parameters(), lr=0.05, weight_decay=0.01)
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0 - s / steps)
        reference, norms = [], []
        for step in range(steps):
            loss = torch.nn.functional.mse_loss(alone(xs[k, step]), ys[k, step])
            loss.backward()
            norms.append(float(torch.nn.utils.clip_grad_norm_(alone.parameters(), 0.5)))
            optimizer.step()
            schedule.step()
            optimizer.zero_grad(set_to_none=True)
            reference.append(loss.item())
        assert max(norms) > 0.5   # the clip acts
        assert torch.allclose(torch.tensor(losses[k]), torch.tensor(reference), rtol=1e-5)
        for ours, theirs in zip(pair[k].parameters(), alone.parameters()):
            assert torch.allclose(ours, theirs, rtol=1e-5, atol=1e-6)
    alone = [small_model(0)]   # a model's run does not depend on who shares it
    assert run(alone, xs[:1], ys[:1], steps)[0] == losses[0]
    assert all(torch.equal(a, b) for a, b in zip(alone[0].parameters(), pair[0].parameters()))
    assert losses[0] != losses[1]


def test_stack_refuses_models_whose_buffers_differ():
    models = [small_model(0), small_model(1)]
    for k, model in enumerate(models):
        model.register_buffer("scale", torch.tensor(float(k)))
    with pytest.raises(ValueError, match="buffers differ"):
        stack(models)
