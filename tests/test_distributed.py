"""Data-parallel training under `accelerate launch` on the CPU (gloo): the same metrics schema
as one process, the same numbers up to float summation order, and a checkpoint that resumes
after the job is stopped by SIGTERM (what Slurm sends before preempting or killing it)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import REPO, venv_env
from iclr26.core.paper import all_papers

PAPERS = [slug for slug, paper in all_papers().items() if paper.data_parallel]
pytestmark = pytest.mark.skipif(not PAPERS, reason="no paper declares data-parallel training")
# long enough to stop midway: 600 steps, a checkpoint every 25
LONG = ["--override=train.regimes.no_warmup.steps=600", "--override=train.checkpoint_every=25"]


def _iclr26(workdir, *args, processes=1, popen=False):
    launch = [sys.executable, "-m"] if processes == 1 else [
        sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(processes),
        "--num_machines", "1", "--main_process_port", "29611", "--mixed_precision", "no", "--dynamo_backend", "no",
        "-m"]
    env = {**venv_env(), "PYTHONPATH": str(REPO / "src")}
    cmd = [*launch, "iclr26", *args]
    if popen:
        return subprocess.Popen(cmd, cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)
    proc = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.stdout + proc.stderr


def _prepare(workdir, slug):
    for dataset in all_papers()[slug].datasets:
        for stage in ("acquire", "prepare"):
            _iclr26(workdir, stage, "--paper", slug, "--scale", "smoke", "--dataset", dataset)


def _train_args(slug, method):
    return ["train", "--paper", slug, "--scale", "smoke", "--method", method, "--seeds", "s0"]


def _metrics(workdir, slug, method):
    return json.loads((workdir / "runs" / "smoke" / slug / method / "s0" / "metrics.json").read_text())


def _numbers(payload):
    """Every number of a metrics payload except timings, keyed by its path."""
    out = {}

    def walk(node, path):
        if isinstance(node, dict):
            for key, value in node.items():
                if key not in ("provenance", "config") and "wall" not in key:
                    walk(value, f"{path}/{key}")
        elif isinstance(node, (int, float)):
            out[path] = float(node)

    walk(payload, "")
    return out


@pytest.mark.parametrize("slug", PAPERS)
def test_two_processes_match_one(workdir, slug):
    method = all_papers()[slug].methods[0]
    _prepare(workdir, slug)
    _iclr26(workdir, *_train_args(slug, method))
    one = _metrics(workdir, slug, method)
    log = _iclr26(workdir, *_train_args(slug, method), processes=2)
    two = _metrics(workdir, slug, method)
    assert "rank 1" in log, "the second process did not run"
    assert two["provenance"]["processes"] == 2 and one["provenance"]["processes"] == 1
    a, b = _numbers(one), _numbers(two)
    assert a.keys() == b.keys()  # the same metric schema
    for key in a:  # the same numbers: shards of each batch, gradients averaged over processes
        assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-6), key


@pytest.mark.parametrize("slug", PAPERS)
def test_two_processes_stopped_by_sigterm_resume_from_the_checkpoint(workdir, slug):
    method = all_papers()[slug].methods[0]
    _prepare(workdir, slug)
    run_dir = workdir / "runs" / "smoke" / slug / method / "s0"
    proc = _iclr26(workdir, *_train_args(slug, method), *LONG, processes=2, popen=True)
    deadline = time.time() + 120
    while not (run_dir / "checkpoint.pt").exists() and time.time() < deadline:
        time.sleep(0.05)
    assert (run_dir / "checkpoint.pt").exists(), "no checkpoint was written"
    os.killpg(proc.pid, signal.SIGTERM)  # Slurm signals every process of the job
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode != 0 and not (run_dir / "metrics.json").exists(), out[-2000:]
    assert "checkpoint saved" in out

    resumed = _iclr26(workdir, *_train_args(slug, method), *LONG, processes=2)
    assert "resumed at step" in resumed
    stopped_then_resumed = _numbers(_metrics(workdir, slug, method))

    (run_dir / "metrics.json").unlink()
    _iclr26(workdir, *_train_args(slug, method), *LONG, processes=2)
    uninterrupted = _numbers(_metrics(workdir, slug, method))
    assert stopped_then_resumed.keys() == uninterrupted.keys()
    for key, value in uninterrupted.items():
        assert stopped_then_resumed[key] == pytest.approx(value, rel=1e-6, abs=1e-9), key
