"""Failure injection for the kill/resume tests: the one test hook of the pipeline.

Production code marks the places where a job may be interrupted safely ("a unit of work was
saved", "a checkpoint was saved") with `reached(point)`. Nothing happens unless a fault is armed,
either in this process (`armed(...)`, for in-process tests) or through the environment of a job
started by Snakemake:

    ICLR26_FAULT="<stage>:<point>:<n>"          raise InjectedFault the n-th time <point> is reached
    ICLR26_FAULT="<stage>:<point>:<n>:kill"     SIGKILL this process instead (a real kill -9)
    ICLR26_FAULT="<stage>:<point>:<n>:term"     send this process SIGTERM and carry on (what Slurm
                                                sends before it preempts: a clean, checkpointed stop)

No paper config or module global carries a test flag.
"""
from __future__ import annotations

import contextlib
import os
import signal
from dataclasses import dataclass

ENV = "ICLR26_FAULT"
# unit: a unit of work saved; checkpoint: a checkpoint saved; done: a stage's work is finished and
# its completion file not yet written (the worst moment to die); any: the first unit or checkpoint
POINTS = ("unit", "checkpoint", "done", "any")


class InjectedFault(BaseException):
    """Raised at an armed point; a BaseException so that no `except Exception` swallows it."""


@dataclass
class _Fault:
    stage: str
    point: str
    after: int
    action: str = "raise"  # raise | kill | term
    seen: int = 0


_armed: _Fault | None = None
_stage: str | None = None


def parse(text: str) -> _Fault:
    parts = text.split(":")
    if len(parts) not in (3, 4) or parts[1] not in POINTS or not parts[2].isdigit() or \
            parts[3:] not in ([], ["kill"], ["term"]):
        raise ValueError(f"{ENV}={text!r}: expected <stage>:<{'|'.join(POINTS)}>:<n>[:kill|:term]")
    return _Fault(parts[0], parts[1], int(parts[2]), action=parts[3] if len(parts) == 4 else "raise")


def enter_stage(stage: str) -> None:
    """Called by the job runner: arms the environment's fault if it names this stage."""
    global _armed, _stage
    _stage = stage
    if os.environ.get(ENV) and (_armed is None or _armed.stage != stage):
        fault = parse(os.environ[ENV])
        _armed = fault if fault.stage == stage else _armed


@contextlib.contextmanager
def armed(stage: str, point: str, after: int = 1):
    """Arm a fault for the code run inside the block (in-process tests)."""
    global _armed
    _armed = parse(f"{stage}:{point}:{after}")
    try:
        yield _armed
    finally:
        _armed = None


def reached(point: str) -> None:
    """A safe interruption point was reached; fail here if a fault is armed for it."""
    fault = _armed
    matches = fault is not None and (fault.point == point or (fault.point == "any" and point != "done"))
    if not matches or fault.stage != _stage:
        return
    fault.seen += 1
    if fault.seen == fault.after:
        if fault.action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if fault.action == "term":
            os.kill(os.getpid(), signal.SIGTERM)
            return
        raise InjectedFault(f"injected fault: {fault.stage} {point} #{fault.after}")
