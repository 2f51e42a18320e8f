"""A run's life beyond one process: recovering from a Snakemake killed with -9, and jobs that do not
outlive their Snakemake.

- `release_stale_locks(workdir)`: Snakemake locks the working directory while it runs; `kill -9`
  leaves the lock behind and the next run stops with a LockException until `--unlock`. When no
  live Snakemake process works in this directory, the lock is stale: remove it and say so, so that
  "restart with the same command" works.
- `watch_parent()`: a local job whose Snakemake is gone (killed with -9) would keep running and
  writing. Each job watches the Snakemake that started it (its pid is in ICLR26_SNAKEMAKE_PID) and
  stops itself with SIGTERM (train jobs checkpoint on it) once that process is gone. Jobs on a
  Slurm node are Slurm's to stop (scancel), not ours.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path

PARENT_ENV = "ICLR26_SNAKEMAKE_PID"


def _ancestors() -> set[int]:
    """This process and its parents (e.g. `timeout snakemake ...` is not another Snakemake)."""
    pids, pid = set(), os.getpid()
    while pid > 1 and pid not in pids:
        pids.add(pid)
        try:
            pid = int((Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            break
    return pids


def _is_snakemake(cmdline: list[bytes]) -> bool:
    """`snakemake ...`, `python .../snakemake ...` or `python -m snakemake ...`."""
    program = [Path(part.decode(errors="replace")).name for part in cmdline[:3]]
    if program and program[0] == "snakemake":
        return True
    return len(program) > 1 and program[0].startswith("python") and (
        program[1] == "snakemake" or program[1:3] == ["-m", "snakemake"])


def _live_snakemakes(workdir: Path) -> list[int]:
    """Pids of other Snakemake processes whose working directory is `workdir` (Linux /proc)."""
    found, mine = [], _ancestors()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in mine:
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            if _is_snakemake(cmdline) and Path(os.readlink(entry / "cwd")) == workdir:
                found.append(int(entry.name))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found


def release_stale_locks(workdir: str | os.PathLike) -> bool:
    """Remove Snakemake's lock files when no live Snakemake works in `workdir`; True if removed.

    Only a Snakemake started by the user does this: inside a Slurm job (the executor's job step
    runs Snakemake again, on a node that cannot see the login node's processes) the lock belongs
    to the Snakemake that submitted the job. /proc shows this machine only, so two Snakemakes on
    two machines sharing one directory are not told apart: run `--unlock` yourself there."""
    if os.environ.get("SLURM_JOB_ID"):
        return False
    workdir = Path(workdir).resolve()
    locks = [p for p in (workdir / ".snakemake" / "locks").glob("*.lock")]
    if not locks or not Path("/proc/self").exists() or _live_snakemakes(workdir):
        return False
    for lock in locks:
        lock.unlink(missing_ok=True)
    print(f"iclr26: removed a stale lock of a Snakemake that was killed ({len(locks)} file(s) in "
          f"{workdir / '.snakemake' / 'locks'}); continuing", file=sys.stderr)
    return True


def watch_parent(interval_s: float = 1.0) -> None:
    """Stop this job (SIGTERM to itself) when the Snakemake that started it is gone."""
    pid = os.environ.get(PARENT_ENV)
    if not pid or not pid.isdigit() or os.environ.get("SLURM_JOB_ID"):
        return
    parent = int(pid)

    def watch():
        stop = threading.Event()
        while not stop.wait(interval_s):
            try:
                os.kill(parent, 0)
            except ProcessLookupError:
                print(f"iclr26: Snakemake (pid {parent}) is gone: stopping this job", file=sys.stderr, flush=True)
                os.kill(os.getpid(), signal.SIGTERM)
                return
            except PermissionError:  # alive, owned by someone else
                continue

    threading.Thread(target=watch, name="iclr26-watch-parent", daemon=True).start()


def export_job_environment(src_dir: str) -> None:
    """The environment Snakemake hands its jobs (local, Slurm or conda): the package from this
    checkout, installed or not; `python` = the interpreter running Snakemake (e.g. .venv/bin),
    unless --sdm conda activates a rule's own environment, which then comes first on PATH; and
    this process's pid, so that local jobs stop when it is gone."""
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (src_dir, os.environ.get("PYTHONPATH")) if p)
    os.environ["PATH"] = os.pathsep.join((str(Path(sys.executable).parent), os.environ["PATH"]))
    os.environ[PARENT_ENV] = str(os.getpid())
