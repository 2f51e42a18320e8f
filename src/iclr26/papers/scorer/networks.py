"""The two players' networks, batched over seeds, with a hand-written backward pass.

perception (the follower)  z = f_phi(s)       classic: Linear(obs, 64) + tanh           (Table 12)
                                              minatar: L1Norm -> 2 x (Linear + ReLU) -> L1Norm
control    (the leader)    Q_theta(z, .)      Linear(latent, hidden) + act -> Linear(hidden, A)

Every tensor carries a leading seed axis S: S independent networks run as one batched matmul.

Why a hand-written backward: at the tiny scale a batch is [8 seeds, 64, 4..32] and autograd's
per-node bookkeeping took about a third of an update's time. Each `backward` below
runs the ATen ops that autograd's derivative formulas run (baddbmm, tanh_backward,
threshold_backward, the L1Norm division), so the gradients are the same numbers;
tests/papers/test_scorer.py checks them against torch.autograd.

On the CPU tanh runs in numpy on the tensor's own memory (`Tensor.numpy()` is a view, no copy):
numpy's float32 tanh is SIMD, 2x faster than the 2 sigmoid(2x) - 1 that was used before and ~7x
faster than torch's own CPU tanh at these sizes (measured on the 2-core tiny machine). The matrix
products stay in torch: numpy's were no faster there (both are compute-bound at these sizes).
"""
from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

L1_EPS = 1e-8


class SeedLinear(nn.Module):
    """S independent Linear layers: x [S, B, in] -> [S, B, out] with one batched matmul.

    The weight is stored as [S, in, out], or as [S, out, in] (`transposed`, nn.Linear's layout) when
    the layer narrows (out < in): MKL's batched matmul is 3-5x slower on a narrow output such as
    Q's [64 -> 2] in the [S, in, out] layout (measured ~80 vs ~15-25 us at 8 seeds x 128 rows). The
    layout changes the memory order, not the function; MKL may round the last bit differently, so a
    long RL run can drift from the one the other layout gives (the smoke records are unchanged).
    """

    def __init__(self, n_in: int, n_out: int, gain: float, generators: list[torch.Generator]):
        super().__init__()
        self.transposed = n_out < n_in
        weights = []
        for gen in generators:  # orthogonal init per seed, from that seed's own generator
            w = torch.empty(n_out, n_in)
            nn.init.orthogonal_(w, gain=gain, generator=gen)
            weights.append(w if self.transposed else w.T)
        self.weight = nn.Parameter(torch.stack(weights))                 # [S, in, out] or [S, out, in]
        self.bias = nn.Parameter(torch.zeros(len(generators), 1, n_out))  # zero bias, as in the code
        # the same Parameter objects as plain attributes (nn.Module's __getattr__ costs ~1 us a call);
        # .to(), .double() and the optimiser's flat storage change p.data, not the objects
        self.__dict__["w"], self.__dict__["b"] = self.weight, self.bias

    def matrix(self) -> torch.Tensor:
        """The weight as [S, in, out] (a view)."""
        return self.w.transpose(1, 2) if self.transposed else self.w

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(self.b, x, self.matrix())

    def input_grad(self, grad: torch.Tensor) -> torch.Tensor:
        """dL/dx = dL/dy W^T."""
        return grad.bmm(self.w if self.transposed else self.w.transpose(1, 2))

    def weight_grad(self, x: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
        """dL/dW in the stored layout: x^T dL/dy, or its transpose."""
        return grad.transpose(1, 2).bmm(x) if self.transposed else x.transpose(1, 2).bmm(grad)


def seed_generators(seeds, salt: int = 0) -> list[torch.Generator]:
    return [torch.Generator().manual_seed(int(s) * 7919 + salt) for s in seeds]


def tanh_(x: torch.Tensor) -> torch.Tensor:
    """tanh in place. On the CPU numpy's (SIMD) tanh: torch's single-thread CPU tanh kernel is
    ~7x slower at these sizes."""
    if x.device.type == "cpu":
        array = x.detach().numpy() if x.requires_grad else x.numpy()
        np.tanh(array, out=array)
        return x
    return torch.tanh_(x)


def l1_norm(x: torch.Tensor) -> torch.Tensor:
    """The official code's L1Norm: divide by the mean absolute value of the features."""
    return x / x.abs().mean(-1, keepdim=True).clamp_min(L1_EPS)


def activation(op: str, x: torch.Tensor) -> torch.Tensor:
    """tanh and relu overwrite x, which is always a linear layer's fresh output here."""
    if op == "tanh":
        return tanh_(x)
    if op == "relu":
        return torch.relu_(x)
    if op == "l1norm":
        return l1_norm(x)
    raise ValueError(f"unknown op {op!r}")


class SeedMLP(nn.Module):
    """Seed-batched linear layers and activations applied in order (`ops`: "linear", "tanh",
    "relu", "l1norm"); the k-th "linear" is linears[k]."""

    def __init__(self, ops: list[str], linears: list[SeedLinear]):
        super().__init__()
        if any(op in ("tanh", "relu") and (i == 0 or ops[i - 1] != "linear") for i, op in enumerate(ops)):
            raise ValueError(f"an activation must follow a linear layer (it overwrites its output): {ops}")
        self.linears = nn.ModuleList(linears)  # parameters(): weight, bias of each layer in order
        layers = iter(linears)
        self.plan = [(op, next(layers) if op == "linear" else None) for op in ops]  # (deepcopy keeps it right)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for op, layer in self.plan:
            if op == "linear":
                x = torch.baddbmm(layer.b, x, layer.matrix())  # = layer(x), without nn.Module's call overhead
            else:
                x = activation(op, x)
        return x

    def forward_saving(self, x: torch.Tensor) -> tuple[torch.Tensor, list]:
        """The output, and per op what its backward needs."""
        saved = []
        for op, layer in self.plan:
            if op == "linear":
                saved.append(x)                      # the input: dL/dW = x^T dL/dy
                x = torch.baddbmm(layer.b, x, layer.matrix())
            elif op == "l1norm":
                mean_abs = x.abs().mean(-1, keepdim=True)
                denom = mean_abs.clamp_min(L1_EPS)
                saved.append((x, mean_abs, denom))
                x = x / denom
            else:
                x = activation(op, x)
                saved.append(x)                      # tanh, relu: the derivative is in terms of the output
        return x, saved

    def backward(self, saved: list, grad: torch.Tensor, input_grad: bool, param_grads: bool):
        """dL/dx (None unless `input_grad`) and the parameters' gradients (in `parameters()` order;
        empty unless `param_grads`) from dL/d(output)."""
        layers = self.plan
        first_needed = 0 if input_grad else min(i for i, (op, _) in enumerate(layers) if op == "linear")
        grads = []
        for i in range(len(layers) - 1, first_needed - 1, -1):
            (op, layer), kept = layers[i], saved[i]
            need_input = i > first_needed or input_grad
            if op == "linear":
                if param_grads:  # baddbmm's backward, then the bias grad summed over its broadcast axis
                    grads[:0] = [layer.weight_grad(kept, grad), grad.sum([1], keepdim=True)]
                grad = layer.input_grad(grad) if need_input else None
            elif op == "tanh":
                grad = torch.ops.aten.tanh_backward(grad, kept)
            elif op == "relu":
                grad = torch.ops.aten.threshold_backward(grad, kept, 0)
            elif op == "l1norm":  # x / c with c = clamp_min(mean |x|, eps): two paths to x
                x, mean_abs, denom = kept
                grad_denom = (-grad * ((x / denom) / denom)).sum([x.dim() - 1], keepdim=True)
                grad_mean = torch.where(mean_abs >= L1_EPS, grad_denom, grad_denom.new_zeros(()))
                grad_abs = grad_mean.expand(x.shape) / x.shape[-1]
                grad = grad / denom + grad_abs * x.sgn()
            if grad is None:
                break
        return (grad if input_grad else None), grads


def perception_net(obs_dim: int, latent: int, arch: str, generators, l1norm: bool = False) -> SeedMLP:
    """The follower f_phi. classic: Linear(obs, latent) + tanh (+ L1Norm if `l1norm`, as DQN_SCORER.py
    does for classic control); minatar: L1Norm -> 2 x (Linear + ReLU) -> L1Norm (Table 12)."""
    gain = math.sqrt(2)
    if arch == "classic":
        return SeedMLP(["linear", "tanh"] + (["l1norm"] if l1norm else []),
                       [SeedLinear(obs_dim, latent, gain, generators)])
    if arch == "minatar":
        return SeedMLP(["l1norm", "linear", "relu", "linear", "relu", "l1norm"],
                       [SeedLinear(obs_dim, latent, gain, generators), SeedLinear(latent, latent, gain, generators)])
    raise ValueError(f"unknown arch {arch!r}")


def control_net(latent: int, hidden: int, n_actions: int, arch: str, generators) -> SeedMLP:
    """The leader Q_theta: Linear(latent, hidden) + act -> Linear(hidden, n_actions), last gain 0.01."""
    act = "tanh" if arch == "classic" else "relu"
    return SeedMLP(["linear", act, "linear"], [SeedLinear(latent, hidden, math.sqrt(2), generators),
                                              SeedLinear(hidden, n_actions, 0.01, generators)])
