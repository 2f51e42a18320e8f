"""Data-parallel training under `accelerate launch` on the CPU (gloo), for every paper that declares
`data_parallel=True`: the same metrics schema as one process and the same numbers up to float
summation order; and a job stopped by SIGTERM (what Slurm sends before preempting or killing it)
saves a checkpoint, and the resumed job ends with the results of an uninterrupted one."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading

import pytest

from conftest import REPO, venv_env
from iclr26.core.job import run_stage
from iclr26.core.paper import all_papers

PAPERS = [slug for slug, paper in all_papers().items() if paper.data_parallel]
pytestmark = pytest.mark.skipif(not PAPERS, reason="no paper declares data-parallel training")

# The one per-paper setting of this file: overrides that make the paper's smoke train job of its
# first method and seed 0 checkpoint early and run on after it, so that the SIGTERM the job sends
# itself at its first checkpoint (core.faults, ICLR26_FAULT=train:checkpoint:1:term) stops it midway.
# None: the paper shards its training only at full scale (its smoke/tiny model trains in one
# process without checkpoints), so there is no smoke job to stop midway; its full path is tested offline
# in its own test file.
STOPPABLE = {
    "conditioned_init": ["train.regimes.warmup.steps=40", "train.checkpoint_every=10"],
    "pc_agent_e": None,
}


def test_every_data_parallel_paper_says_how_to_stop_it_midway():
    assert not (missing := set(PAPERS) - set(STOPPABLE)), f"add {sorted(missing)} to STOPPABLE in {__file__}"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _command(*args, processes: int) -> list[str]:
    if processes == 1:
        return [sys.executable, "-m", "iclr26", *args]
    return [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(processes),
            "--num_machines", "1", "--main_process_port", str(_free_port()), "--mixed_precision", "no",
            "--dynamo_backend", "no", "-m", "iclr26", *args]


def _env(**extra) -> dict:
    return {**venv_env(), "PYTHONPATH": str(REPO / "src"), **extra}


def _iclr26(workdir, *args, processes=1) -> str:
    proc = subprocess.run(_command(*args, processes=processes), cwd=workdir, env=_env(), capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.stdout + proc.stderr


class Job:
    """A job in the background whose output is read as it comes (a full pipe would block it)."""

    def __init__(self, workdir, *args, processes: int, env: dict):
        self.proc = subprocess.Popen(_command(*args, processes=processes), cwd=workdir, env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=lambda: self.lines.extend(self.proc.stdout), daemon=True)
        self._reader.start()

    def wait(self, timeout: float) -> str:
        self.proc.wait(timeout=timeout)
        self._reader.join(timeout=10)
        return "".join(self.lines)


def _prepare(slug):
    for dataset in all_papers()[slug].datasets:
        for stage in ("acquire", "prepare"):
            run_stage(stage, slug, "smoke", dataset=dataset)


def _job_args(stage, slug, overrides=()):
    method = all_papers()[slug].methods[0]
    return [stage, "--paper", slug, "--scale", "smoke", "--method", method, "--seeds", "s0",
            *(f"--override={o}" for o in overrides)]


def _run_dir(workdir, slug):
    return workdir / "runs" / "smoke" / slug / all_papers()[slug].methods[0] / "s0"


def _numbers(payload):
    """Every number of a metrics or eval payload except timings, keyed by its path."""
    out = {}

    def walk(node, path):
        if isinstance(node, dict):
            for key, value in node.items():
                if key not in ("provenance", "config", "run_files") and "wall" not in key:
                    walk(value, f"{path}/{key}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{path}/{i}")
        elif isinstance(node, (int, float)):
            out[path] = float(node)

    walk(payload, "")
    return out


def _results(workdir, slug, overrides=()):
    """The numbers of the train job's metrics.json and of its evaluation (run here, in one process)."""
    run_stage("evaluate", slug, "smoke", overrides, method=all_papers()[slug].methods[0], seed_block="s0")
    run_dir = _run_dir(workdir, slug)
    return {name: _numbers(json.loads((run_dir / name).read_text())) for name in ("metrics.json", "eval.json")}


@pytest.mark.parametrize("slug", PAPERS)
def test_two_processes_match_one(workdir, slug):
    _prepare(slug)
    _iclr26(workdir, *_job_args("train", slug))
    one = json.loads((_run_dir(workdir, slug) / "metrics.json").read_text())
    (workdir / "runs").rename(workdir / "runs_one_process")
    log = _iclr26(workdir, *_job_args("train", slug), processes=2)
    two = json.loads((_run_dir(workdir, slug) / "metrics.json").read_text())
    assert "rank 1" in log, "the second process did not run"
    assert two["provenance"]["processes"] == 2 and one["provenance"]["processes"] == 1
    a, b = _numbers(one), _numbers(two)
    assert a and a.keys() == b.keys()  # the same metric schema
    for key in a:  # the same numbers: shards of each batch, gradients averaged over processes
        assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-6), key


@pytest.mark.parametrize("slug", PAPERS)
def test_two_processes_stopped_by_sigterm_resume_from_the_checkpoint(workdir, slug):
    if STOPPABLE[slug] is None:
        pytest.skip(f"{slug} shards its training only at full scale (STOPPABLE)")
    _prepare(slug)
    long_run, run_dir = STOPPABLE[slug], _run_dir(workdir, slug)
    # the main process sends itself SIGTERM right after its first checkpoint: no race with the clock
    job = Job(workdir, *_job_args("train", slug, long_run), processes=2,
              env=_env(ICLR26_FAULT="train:checkpoint:1:term"))
    out = job.wait(timeout=300)
    assert job.proc.returncode != 0 and not (run_dir / "metrics.json").exists(), out[-2000:]
    assert "checkpoint saved" in out, out[-2000:]

    resumed_log = _iclr26(workdir, *_job_args("train", slug, long_run), processes=2)
    assert "resumed at step" in resumed_log
    stopped_then_resumed = _results(workdir, slug, long_run)

    (workdir / "runs").rename(workdir / "runs_stopped")  # the uninterrupted job starts from nothing
    _iclr26(workdir, *_job_args("train", slug, long_run), processes=2)
    uninterrupted = _results(workdir, slug, long_run)
    assert uninterrupted["metrics.json"] and uninterrupted["eval.json"]
    assert stopped_then_resumed == uninterrupted
