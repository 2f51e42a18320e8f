"""The workflow on a real (one-node, local) Slurm cluster through the `slurm/` profile.

scripts/slurm-local.sh starts the cluster (slurm-wlm and munge from Debian, installed by
scripts/setup.sh); these tests start it if it is not running and stop only what they started.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from conftest import REPO, venv_env

pytestmark = pytest.mark.slurm
SCRIPT = REPO / "scripts" / "slurm-local.sh"
FAST = ["--seconds-between-status-checks", "2", "--slurm-init-seconds-before-status-checks", "1"]
SUBMITTED = re.compile(r"Job (\d+) has been submitted with SLURM jobid (\d+) \(log: (\S+)\)")


def _daemons_running() -> bool:
    return subprocess.run(["sinfo", "-h"], capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def cluster():
    if os.geteuid() != 0:
        # a skip must be asked for: CI (root) can never pass with no Slurm test run
        if os.environ.get("ICLR26_SKIP_SLURM") == "1":
            pytest.skip("ICLR26_SKIP_SLURM=1, and the local Slurm cluster needs root")
        pytest.fail("the local Slurm cluster needs root (it writes /etc/slurm and starts daemons); "
                    "run as root, or set ICLR26_SKIP_SLURM=1 to skip these tests")
    if not shutil.which("slurmctld"):
        pytest.fail("slurm-wlm is not installed: run scripts/setup.sh (or scripts/slurm-local.sh install)")
    started_here = not (shutil.which("sinfo") and _daemons_running())
    subprocess.run(["bash", str(SCRIPT), "start"], check=True, timeout=120)
    yield
    if started_here:
        subprocess.run(["bash", str(SCRIPT), "stop"], check=True, timeout=60)


def _run(cwd, *args, popen=False):
    cmd = [sys.executable, "-m", "snakemake", *args]
    if popen:
        return subprocess.Popen(cmd, cwd=cwd, env=venv_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
    proc = subprocess.run(cmd, cwd=cwd, env=venv_env(), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return proc.stdout + proc.stderr


def _copy(checkout, dest):
    shutil.copytree(checkout, dest, ignore=shutil.ignore_patterns(".snakemake", "data", "runs", "results", "logs"))
    return dest


def test_profile_runs_every_job_through_sbatch_and_matches_a_local_run(cluster, checkout, tmp_path, capsys):
    target = ["all", "--config", "scale=smoke", "papers=[diffusion_convergence]"]
    started = time.time()
    out = _run(checkout, "--profile", "slurm", *FAST, *target)
    slurm_s = time.time() - started
    submitted = SUBMITTED.findall(out)
    local_rules = {"claims", "report", "all"}
    stats = out.split("Job stats:")[1].split("\n\n")[0]  # Snakemake's table: rule, count
    counts = {rule: int(n) for rule, n in re.findall(r"^(\w+)\s+(\d+)$", stats, re.M) if rule != "total"}
    remote = sum(n for rule, n in counts.items() if rule not in local_rules and not rule.startswith("tabulate_"))
    assert len(submitted) == remote > 0, f"a non-local job did not go through sbatch: {counts}"

    local = _copy(checkout, tmp_path / "local")
    started = time.time()
    _run(local, "--cores", "2", *target)
    local_s = time.time() - started
    with capsys.disabled():
        print(f"\n[slurm] {len(submitted)} sbatch jobs, ids {', '.join(j for _, j, _ in submitted)}; "
              f"slurm run {slurm_s:.0f}s vs local run {local_s:.0f}s")
    for name in ("table.md", "table.csv", "table.tex"):
        ours = (checkout / "results" / "diffusion_convergence" / name).read_text()
        assert ours == (local / "results" / "diffusion_convergence" / name).read_text(), name


def test_cancelled_job_is_retried_and_resumes_from_its_checkpoint(cluster, checkout, capsys):
    """scancel a running training job midway: Snakemake resubmits it (the profile's retries), the
    new job resumes from the checkpoint, the jobs that had finished are not rerun."""
    long_run = ("overrides=[conditioned_init:train.regimes.warmup.steps=1500,"
                "conditioned_init:train.checkpoint_every=25]")
    args = ["--profile", "slurm", *FAST, "all", "--config", "scale=smoke", "papers=[conditioned_init]",
            "methods={conditioned_init: [random]}", long_run]
    proc = _run(checkout, *args, popen=True)
    log, cancelled = [], None
    run_dir = checkout / "runs" / "smoke" / "conditioned_init" / "random" / "s0-1"
    try:
        for line in proc.stdout:  # read to the end: a full pipe would block Snakemake
            log.append(line)
            found = SUBMITTED.search(line)
            if found and "rule_train" in found.group(3) and cancelled is None:
                # the checkpoint is renamed into place whole; the run is 60 checkpoints long, so it
                # is still running when scancel arrives (the log check below proves it resumed)
                deadline = time.time() + 300
                while not (run_dir / "checkpoint.pt").exists() and time.time() < deadline:
                    time.sleep(0.2)
                assert (run_dir / "checkpoint.pt").exists(), "the training job wrote no checkpoint"
                finished_data = {p: p.stat().st_mtime_ns for p in checkout.glob("data/smoke/**/manifest.json")}
                cancelled = found.group(2)
                subprocess.run(["scancel", cancelled], check=True)
        proc.wait(timeout=900)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    text = "".join(log)
    assert proc.returncode == 0, text[-4000:]
    assert cancelled, "no training job was submitted"
    train_jobs = [j for _, j, p in SUBMITTED.findall(text) if "rule_train" in p]
    assert len(train_jobs) == 2 and train_jobs[0] == cancelled, train_jobs  # cancelled, then resubmitted once
    train_log = (checkout / "logs" / "smoke" / "conditioned_init" / "train" / "random_s0-1.log").read_text()
    assert "resumed at step" in train_log, train_log[-2000:]
    for path, mtime in finished_data.items():
        assert path.stat().st_mtime_ns == mtime, f"{path} was rerun"
    assert (checkout / "results" / "conditioned_init" / "claims.json").exists()
    assert not list(checkout.rglob("*.tmp"))
    with capsys.disabled():
        print(f"\n[slurm] cancelled job {cancelled}; train jobs {train_jobs}")
