"""Checkpoint and resume for long training jobs.

A training loop asks `Checkpointer.load()` for the last saved state, and calls `maybe_save(step,
state_fn)` every step; every `every` steps (and on SIGTERM, which Slurm sends before preemption)
the state is written atomically. A restarted job resumes from the last checkpoint, so the work
before it is not lost and, with the RNG states saved, the resumed run gives the same numbers.
"""
from __future__ import annotations

import pickle
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import faults
from .io import atomic_path


class Checkpointer:
    """`config_digest` ties a checkpoint to the config and code that made it: a checkpoint made
    under another digest is not resumed from (the job starts fresh and says so)."""

    def __init__(self, directory: str | Path, every: int = 0, writer: bool = True, config_digest: str = ""):
        self.path = Path(directory) / "checkpoint.pt"
        self.every = int(every)
        self.writer = writer  # with several processes only the main one writes
        self.config_digest = config_digest
        self._stop_requested = False
        self._previous_handler = None

    # -- state
    def load(self) -> dict | None:
        import torch

        if not self.path.exists():
            return None
        try:  # tensors and plain data only: loading never runs code from the file
            saved = torch.load(self.path, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError:
            print(f"[checkpoint] refusing {self.path}: it holds pickled objects, not only tensors and plain "
                  "data; starting fresh", flush=True)
            return None
        except Exception as err:  # a corrupt checkpoint must not kill the run: start over, say so
            print(f"[checkpoint] ignoring unreadable {self.path}: {str(err).splitlines()[0]}", flush=True)
            return None
        if not isinstance(saved, dict) or saved.get("config_digest") != self.config_digest:
            print(f"[checkpoint] {self.path} was made with another config or code: starting fresh", flush=True)
            return None
        return saved["state"]

    def save(self, state: dict[str, Any]) -> None:
        import torch

        if not self.writer:
            return
        with atomic_path(self.path) as tmp:
            torch.save({"config_digest": self.config_digest, "state": state}, tmp)
        faults.reached("checkpoint")

    def maybe_save(self, step: int, state_fn: Callable[[], dict], stop: bool | None = None) -> bool:
        """Save when `step` is on the schedule or a stop was requested; True if the loop must stop.
        `stop` overrides this process's own flag (several processes agree on one decision)."""
        stop = self._stop_requested if stop is None else stop
        due = self.every > 0 and step > 0 and step % self.every == 0
        if due or stop:
            self.save(state_fn())
        return stop

    def clear(self) -> None:
        if self.writer:
            self.path.unlink(missing_ok=True)

    # -- preemption: Slurm sends SIGTERM before it kills or requeues a job
    def handle_sigterm(self) -> Checkpointer:
        def request_stop(signum, frame):
            self._stop_requested = True

        self._previous_handler = signal.signal(signal.SIGTERM, request_stop)
        return self

    @property
    def stop_requested(self) -> bool:
        return self._stop_requested


def rng_state() -> dict:
    """The global RNG states as tensors and plain data (loadable with weights_only=True)."""
    import random

    import numpy as np
    import torch

    version, internal, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return {"python": [version, list(internal), gauss],
            "numpy": [name, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(cached)],
            "torch": torch.get_rng_state()}


def set_rng_state(state: dict) -> None:
    import random

    import numpy as np
    import torch

    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
