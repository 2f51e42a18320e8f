"""Checkpoint and resume for long training jobs.

A training loop asks `Checkpointer.load()` for the last saved state, and calls `maybe_save(step,
state_fn)` every step; every `every` steps (and on SIGTERM, which Slurm sends before preemption)
the state is written atomically. A restarted job resumes from the last checkpoint, so the work
before it is not lost and, with the RNG states saved, the resumed run gives the same numbers.

SIGTERM (Slurm before preemption, `lifecycle.watch_parent` when the job's Snakemake is gone): a job
that made a Checkpointer only notes the request, and its loop must honour it: when `maybe_save`
returns True the state is saved, and the loop raises `Stopped`, so that the job exits with status 1
and writes no completion file, and rerunning it resumes. A job that makes none (units of work only)
keeps SIGTERM's default action: it dies at once, and its saved units stay.
"""
from __future__ import annotations

import errno
import pickle
import re
import shutil
import signal
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import faults
from .errors import DataError
from .io import atomic_path

# SIGTERM asks the process to stop: the request holds for every Checkpointer of the process, made
# before or after it arrived (a job of several units makes one per unit: a SIGTERM that arrives while
# one unit saves its outputs and the next loads its model must stop the next one)
_STOP = {"requested": False}

# torch's weights_only unpickler refusing an object it may not build (a class, a function, a
# blocked module): the file holds pickled objects. Its other errors (an unknown opcode, a string
# too long) mean bytes that are no pickle at all: unreadable.
_REFUSED_OBJECT = re.compile(r"was not an allowed global|whose module \S+ is blocked|"
                             r"Can only (create new object|build)")


class Stopped(SystemExit):
    """A training loop saved its checkpoint on a stop request: the job ends here with status 1 and
    no completion file, and rerunning it resumes. A SystemExit: its message is the one line printed,
    and no `except Exception` in a stage swallows it."""


def _first_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return lines[0].strip() if lines else type(err).__name__  # EOFError() says nothing


def _request_stop(signum, frame) -> None:
    _STOP["requested"] = True


class Checkpointer:
    """`config_digest` ties a checkpoint to the config and code that made it: a checkpoint made
    under another digest is not resumed from (the job starts fresh and says so)."""

    def __init__(self, directory: str | Path, every: int = 0, writer: bool = True, config_digest: str = ""):
        self.path = Path(directory) / "checkpoint.pt"
        self.every = int(every)
        self.writer = writer  # with several processes only the main one writes
        self.config_digest = config_digest

    # -- state
    def load(self) -> dict | None:
        import torch

        if not self.path.exists():
            return None
        try:  # tensors and plain data only: loading never runs code from the file
            saved = torch.load(self.path, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError as err:
            if _REFUSED_OBJECT.search(str(err)):
                print(f"[checkpoint] refusing {self.path}: it holds pickled objects, not only tensors and plain "
                      "data; starting fresh", flush=True)
            else:
                print(f"[checkpoint] ignoring unreadable {self.path}: {self._why_unreadable(err)}; starting fresh",
                      flush=True)
            return None
        except Exception as err:  # a corrupt checkpoint must not kill the run: start over, say so
            print(f"[checkpoint] ignoring unreadable {self.path}: {_first_line(err)}", flush=True)
            return None
        if not isinstance(saved, dict) or saved.get("config_digest") != self.config_digest:
            print(f"[checkpoint] {self.path} was made with another config or code: starting fresh", flush=True)
            return None
        return saved["state"]

    def _why_unreadable(self, err: pickle.UnpicklingError) -> str:
        # torch wraps the unpickler's own line ("Unsupported operand 95") in advice about
        # weights_only that does not apply to a file that is no pickle: keep only that line
        inner = re.search(r"WeightsUnpickler error:\s*([^\n]+)", str(err))
        detail = inner.group(1).strip() if inner else _first_line(err)
        what = "its pickle is malformed" if zipfile.is_zipfile(self.path) else "not a file torch.save wrote"
        return f"{what} ({detail})"

    def save(self, state: dict[str, Any]) -> None:
        import torch

        if not self.writer:
            return
        try:  # atomic: a failed write leaves the last good checkpoint as it was
            with atomic_path(self.path) as tmp:
                torch.save({"config_digest": self.config_digest, "state": state}, tmp)
        except (OSError, RuntimeError) as err:
            # torch's zip writer reports a short write (a full disk) as a RuntimeError
            # ("[enforce fail at inline_container.cc:664] . unexpected pos ..."), naming neither file nor cause
            if isinstance(err, RuntimeError) and not re.search(r"inline_container|PytorchStreamWriter", str(err)):
                raise
            raise DataError(self._write_failure(err)) from None
        faults.reached("checkpoint")

    def _write_failure(self, err: OSError | RuntimeError) -> str:
        # torch's RuntimeError does not say why the write fell short; a full disk is its usual cause
        full = isinstance(err, RuntimeError) or err.errno in (errno.ENOSPC, errno.EDQUOT)
        cause = err.strerror if isinstance(err, OSError) and err.strerror else \
            f"torch could not write it ({_first_line(err)})"
        try:
            free = shutil.disk_usage(self.path.parent).free
            cause += f"; {free / 2**20:.1f} MiB free there" if free >= 2**20 else f"; {free // 1024} KiB free there"
        except OSError:
            pass
        kept = "the last good checkpoint is intact" if self.path.exists() else "there was no earlier checkpoint"
        remedy = "free some disk space" if full else "fix that"
        return f"cannot write the checkpoint {self.path}: {cause}; {kept}: {remedy} and rerun the same command"

    def maybe_save(self, step: int, state_fn: Callable[[], dict], stop: bool | None = None) -> bool:
        """Save when `step` is on the schedule or a stop was requested; True if the loop must stop
        (then raise Stopped). `stop` overrides this process's own flag (several processes agree on
        one decision)."""
        stop = self.stop_requested if stop is None else stop
        due = self.every > 0 and step > 0 and step % self.every == 0
        if due or stop:
            self.save(state_fn())
        return stop

    def clear(self) -> None:
        if self.writer:
            self.path.unlink(missing_ok=True)

    # -- preemption: Slurm sends SIGTERM before it kills or requeues a job
    def handle_sigterm(self) -> Checkpointer:
        """From now on SIGTERM requests a stop instead of killing the process (one handler per
        process; it stays, as a job's process ends with the job)."""
        if signal.getsignal(signal.SIGTERM) is not _request_stop:
            signal.signal(signal.SIGTERM, _request_stop)
        return self

    @property
    def stop_requested(self) -> bool:
        return _STOP["requested"]


def release_sigterm() -> None:
    """Give SIGTERM back its default action and forget a stop request: a process that runs several
    jobs one after another (`python -m iclr26 run`, the tests) starts each job as a fresh process would."""
    if signal.getsignal(signal.SIGTERM) is _request_stop:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _STOP["requested"] = False


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
