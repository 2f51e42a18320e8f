"""Memory-feasible fine-tuning of a pretrained LM at full scale, through accelerate.

The recipe of a `train:` block (the preflight's memory estimate reads exactly these keys):
    precision: bf16-mixed | bf16 | fp32   bf16-mixed: fp32 master weights and AdamW moments, bf16
                                          compute (autocast; under sharding FSDP's param dtype)
    optimizer: adamw
    lora: {r, alpha, target_modules, dropout} | null   peft LoRA adapters (only they train) | full-parameter
    sharding: none | zero2 | fsdp        none: DDP (each process a full copy); zero2: gradients and
                                          optimizer state sharded, weights kept whole between
                                          forward and backward (FSDP2 reshard_after_forward=False,
                                          ZeRO stage 2); fsdp: weights sharded too (ZeRO-3)
    activation_checkpointing: bool        recompute each decoder layer in backward
    micro_batch_size: rows per process per forward pass; batch_size: rows per optimizer step
    max_length: tokens kept per sequence (the prompt is kept, the trace cut)
    lr, warmup, steps, weight_decay, schedule: cosine (default) | linear   the decay after warm-up
One global batch is drawn per step from one seeded stream (the same on every process); each process
takes rows rank::world and splits them into micro-batches; the loss is the token-mean over the whole
global batch, so the update does not depend on the number of processes (the test compares 1 and 2).

Sharding uses torch's FSDP2 (`fully_shard`, what accelerate's fsdp_version 2 wraps) on the process
group that `accelerate launch` starts: accelerate's own FSDP plugin falls back to plain DDP on a CPU,
and the same code must run in the CPU tests (gloo) and on GPUs (NCCL).

Tiny scale does not come here: it keeps core.lm.model.train_lm (from scratch, one process).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from ..errors import ConfigError

RECIPE_KEYS = ("precision", "optimizer", "lora", "sharding", "activation_checkpointing", "micro_batch_size",
               "max_length")


def uses_recipe(spec: dict) -> bool:
    """True when a train block states the full-scale recipe (any of its keys)."""
    return any(key in spec for key in RECIPE_KEYS)


def check_recipe(spec: dict) -> None:
    precision, sharding = spec.get("precision", "fp32"), spec.get("sharding", "none")
    if precision not in ("bf16-mixed", "bf16", "fp32"):
        raise ConfigError(f"train.precision must be bf16-mixed, bf16 or fp32, got {precision!r}")
    if sharding not in ("none", "zero2", "fsdp"):
        raise ConfigError(f"train.sharding must be none, zero2 or fsdp, got {sharding!r}")
    if spec.get("optimizer", "adamw") != "adamw":
        raise ConfigError(f"train.optimizer: only adamw is implemented, got {spec['optimizer']!r}")


def truncate(sequence: list[int], loss_from: int, max_length: int | None) -> tuple[list[int], int]:
    """The first max_length tokens (the prompt stays, the end of the trace goes)."""
    if not max_length or len(sequence) <= max_length:
        return sequence, loss_from
    return sequence[:max_length], min(loss_from, max_length)


def train_recipe(model, sequences: list[list[int]], loss_from: list[int], pad_id: int, spec: dict, seed: int,
                 log=None):
    """Train `model` by the recipe of `spec` (a train block); returns (the trained model to save: a
    peft model when LoRA, else the unwrapped model, as save_trained expects; the losses)."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    from .model import pad_batch

    check_recipe(spec)
    precision, sharding, lora = spec.get("precision", "fp32"), spec.get("sharding", "none"), spec.get("lora")
    steps, batch, lr = int(spec["steps"]), int(spec["batch_size"]), float(spec["lr"])
    micro = int(spec.get("micro_batch_size") or batch)
    # one Accelerator per training: a process that trains twice (a test, a notebook) would otherwise
    # keep the first one's mixed precision; the process group (PartialState) is kept
    AcceleratorState._reset_state()
    accelerator = Accelerator(cpu=not torch.cuda.is_available(),   # gloo processes on a CPU (the tests)
                              mixed_precision="bf16" if precision == "bf16-mixed" and sharding == "none" else "no")
    world, rank = accelerator.num_processes, accelerator.process_index
    if batch % world:
        raise ConfigError(f"train.batch_size {batch} does not split over {world} processes")
    pairs = [truncate(s, f, spec.get("max_length")) for s, f in zip(sequences, loss_from)]

    # fp32 master weights for the trained parameters (bf16-mixed, fp32), all bf16 for pure bf16
    model = model.to(torch.bfloat16 if precision == "bf16" else torch.float32)
    torch.manual_seed(seed)   # the same adapter init on every process (FSDP does not broadcast it)
    if lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=int(lora["r"]), lora_alpha=int(lora["alpha"]),
                                                 lora_dropout=float(lora.get("dropout", 0.0)),
                                                 target_modules=list(lora["target_modules"]), task_type="CAUSAL_LM"))
        if precision == "bf16-mixed":   # frozen base in bf16 (half the memory), adapters fp32
            for param in model.parameters():
                if not param.requires_grad:
                    param.data = param.data.to(torch.bfloat16)
    if spec.get("activation_checkpointing"):
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if lora:
            model.enable_input_require_grads()
    model.to(accelerator.device)
    if sharding == "none":
        optimizer = _adamw(model, lr, spec)
        model, optimizer = accelerator.prepare(model, optimizer)
    else:
        _shard(model, sharding, precision, world)
        optimizer = _adamw(model, lr, spec)
    warmup, kind = int(spec.get("warmup", 0)), spec.get("schedule", "cosine")
    if kind not in ("cosine", "linear"):
        raise ConfigError(f"train.schedule must be cosine or linear, got {kind!r}")

    def decay(s: int) -> float:
        done = min(s, steps) / max(1, steps)
        return 0.5 * (1 + np.cos(np.pi * done)) if kind == "cosine" else 1.0 - done

    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / max(1, warmup)) * decay(s))
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    model.train()
    losses = []
    for step in range(steps):
        pick = rng.integers(0, len(pairs), size=batch)          # the same global batch on every process
        counted = sum(max(0, len(pairs[i][0]) - max(1, pairs[i][1])) for i in pick)  # tokens with a loss
        mine = pick[rank::world]
        total = torch.zeros((), device=accelerator.device)
        for lo in range(0, len(mine), micro):
            part = [pairs[i] for i in mine[lo: lo + micro]]
            ids, mask = (t.to(accelerator.device) for t in pad_batch([p[0] for p in part], pad_id))
            labels = ids.clone()
            labels[mask == 0] = -100
            for row, (_, start) in enumerate(part):
                labels[row, :start] = -100
            logits = model(input_ids=ids, attention_mask=mask).logits.float()
            loss_sum = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                                         labels[:, 1:].reshape(-1), ignore_index=-100, reduction="sum")
            # DDP and FSDP average gradients over processes: scale so the update is the global token mean
            accelerator.backward(loss_sum * world / max(1, counted))
            total += loss_sum.detach()
        if sharding == "none":
            accelerator.clip_grad_norm_(model.parameters(), 1.0)
        else:
            torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(float(accelerator.reduce(total, "sum")) / max(1, counted))
        if log is not None:
            log(f"step {step + 1}/{steps} loss {losses[-1]:.4f}", every_s=10)
    model.eval()
    trained = accelerator.unwrap_model(model) if sharding == "none" else model
    trained._iclr26_sharded = sharding != "none"
    return trained, losses


def _adamw(model, lr: float, spec: dict):
    return torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr,
                             weight_decay=float(spec.get("weight_decay", 0.0)))


def _decoder_layers(model):
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return base.model.layers


_MESH = None


def _shard(model, sharding: str, precision: str, world: int) -> None:
    """FSDP2 over every decoder layer and the root; fp32 sharded master weights with bf16 compute
    when bf16-mixed."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    global _MESH
    if _MESH is None or _MESH.size() != world:   # one mesh per process (a job trains one model per seed)
        _MESH = init_device_mesh("cuda" if torch.cuda.is_available() else "cpu", (world,))
    mesh = _MESH
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) \
        if precision == "bf16-mixed" else MixedPrecisionPolicy()
    reshard = sharding == "fsdp"
    for layer in _decoder_layers(model):
        fully_shard(layer, mesh=mesh, reshard_after_forward=reshard, mp_policy=policy)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard, mp_policy=policy)


def full_state_dict(model) -> dict:
    """The whole (unsharded) state dict on the main process (every process must call it)."""
    if not getattr(model, "_iclr26_sharded", False):
        return model.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def save_trained(model, directory: Path, is_main: bool = True) -> None:
    """A LoRA model saves its adapters only (adapter_config.json + adapter_model.safetensors, which
    name the base model); a full-parameter model its weights. Every process calls it (sharded
    weights are gathered first); the main process writes."""
    sharded = getattr(model, "_iclr26_sharded", False)
    state = full_state_dict(model) if sharded else None
    if not is_main:
        return
    if state is None:
        model.save_pretrained(str(directory))          # PeftModel: its adapters only
    else:
        model.save_pretrained(str(directory), state_dict=state)   # PeftModel keeps the adapter keys


def load_adapters(base, directory: Path):
    """The base model with the LoRA adapters saved in `directory`, merged (plain modules again)."""
    from peft import PeftModel

    return PeftModel.from_pretrained(base, str(directory)).merge_and_unload()
