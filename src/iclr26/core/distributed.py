"""Data-parallel training with `accelerate`: one process, or several under `accelerate launch`.

At full scale a train job uses every GPU Slurm gives it (one process per GPU, NCCL); on a CPU the
same code runs several processes with gloo. Each process takes its shard of every global batch,
DDP averages the gradients, so the update equals the single-process update on the whole batch.
Only the main process writes files; the core's run_stage knows the rank from the environment
that `accelerate launch` (or torchrun) sets.
"""
from __future__ import annotations

import os


def rank() -> int:
    return int(os.environ.get("RANK", "0"))


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def is_main_process() -> bool:
    return rank() == 0


class DataParallel:
    """The few accelerate calls a training loop needs, in one place."""

    def __init__(self, device: str = "cpu"):
        from accelerate import Accelerator
        from accelerate.state import AcceleratorState

        # a fresh state: another training in this process (a test, a notebook) may have set mixed
        # precision, which accelerate would otherwise keep; the process group (PartialState) stays
        AcceleratorState._reset_state()
        self.accelerator = Accelerator(cpu=device == "cpu")
        self.rank = self.accelerator.process_index
        self.world = self.accelerator.num_processes
        self.is_main = self.accelerator.is_main_process
        self.device = self.accelerator.device

    def prepare(self, model, optimizer):
        return self.accelerator.prepare(model, optimizer)

    def shard(self, *tensors):
        """This process's rows of a global batch (the batch must divide by the world size)."""
        if self.world == 1:
            return tensors
        rows = tensors[0].shape[0]
        if rows % self.world:
            raise ValueError(f"batch of {rows} does not split over {self.world} processes")
        return tuple(t[self.rank :: self.world].to(self.device) for t in tensors)

    def backward(self, loss) -> None:
        self.accelerator.backward(loss)

    def mean(self, value: float) -> float:
        """The mean of a scalar over processes (e.g. the loss of the whole global batch)."""
        if self.world == 1:
            return float(value)
        import torch

        return float(self.accelerator.reduce(torch.tensor(float(value), device=self.device), "mean"))

    def unwrap(self, model):
        return self.accelerator.unwrap_model(model)

    def wait(self) -> None:
        self.accelerator.wait_for_everyone()

    def stop_agreed(self, local_stop: bool) -> bool:
        """True on every process if any process was asked to stop (SIGTERM reaches them unevenly)."""
        if self.world == 1:
            return local_stop
        import torch

        flag = torch.tensor(int(local_stop), device=self.device)
        return bool(self.accelerator.reduce(flag, "sum") > 0)
