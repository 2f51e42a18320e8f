"""Fault injection through the real workflow: a smoke run whose job is killed (SIGKILL, no chance to
clean up) during acquire, inside a checkpointed train, or halfway through tabulate, restarted
with the same command, ends with outputs equal to those of an uninterrupted run."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import copy_checkout, venv_env
from iclr26.core.paper import all_papers

pytestmark = pytest.mark.slow
PAPER = "conditioned_init"  # the smoke run that checkpoints inside its training runs
TARGET = ["all", "--config", "scale=smoke", f"papers=[{PAPER}]",
          f"overrides=[{PAPER}:train.checkpoint_every=2]"]


def _snakemake(repo, fault=None):
    env = {**venv_env(), **({"ICLR26_FAULT": fault} if fault else {})}
    return subprocess.run([sys.executable, "-m", "snakemake", "--cores", "2", *TARGET], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=900)


def _outputs(repo) -> dict:
    """What a user reads: the records and the tables (claims without their provenance)."""
    out = repo / "results" / PAPER
    claims = json.loads((out / "claims.json").read_text())
    return {"records.csv": (out / "records.csv").read_text(), "table.csv": (out / "table.csv").read_text(),
            "claims": claims["claims"],
            "figures": sorted(p.name for p in out.glob("*.png"))}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    repo = copy_checkout(tmp_path_factory.mktemp("clean"))
    proc = _snakemake(repo)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return _outputs(repo)


@pytest.mark.parametrize("fault", ["acquire:done:1:kill", "train:checkpoint:3:kill", "tabulate:done:1:kill"])
def test_a_run_killed_at_a_fault_restarts_to_the_uninterrupted_outputs(fault, uninterrupted, tmp_path):
    repo = copy_checkout(tmp_path)
    killed = _snakemake(repo, fault)
    assert killed.returncode != 0, f"the fault {fault} never fired"
    assert "Error in rule" in killed.stderr + killed.stdout
    if fault.startswith("tabulate"):  # killed with the table written: no stale mix is left behind
        assert not (repo / "results" / PAPER / "table.md").exists()
    restarted = _snakemake(repo)
    assert restarted.returncode == 0, restarted.stderr[-3000:]
    assert _outputs(repo) == uninterrupted
    assert not list(repo.rglob("*.tmp")) and not list(repo.rglob(".*.tmp"))
    assert all((repo / "results" / PAPER / name).exists() for name in all_papers()[PAPER].figures)
    if fault.startswith("train"):
        logs = "".join(p.read_text() for p in (repo / "logs" / "smoke" / PAPER / "train").glob("*.log"))
        assert "resumed at step" in logs
