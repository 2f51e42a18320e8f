"""No file the pipeline reads may run code (issue 26; audit 2026-12-02, H8 and H9).

A payload planted where the pipeline used to unpickle it: a genuine scorer checkpoint with a
pickle in its env state (the old code pickle.loads'ed `state["env"]["pickled_env"]`).
The payload is an object whose `__reduce__` opens a marker file for writing: unpickling it creates
the file, so the marker says whether code from the file ran.
"""
from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import pytest
import torch


class Payload:
    """Unpickled, this calls open(marker, "w"): the file appears (nothing else is done)."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, "w")


# ----------------------------------------------------------------------------- scorer checkpoint
SCORER = ("data.headline.impl=sync",   # gymnasium's SyncVectorEnv: what full scale (MinAtar) checkpoints
          "train.total_steps=300", "train.checkpoint_every=50")   # 150 vector steps per env: seconds


def _scorer_records(overrides):
    from iclr26.core.job import load_records, run_paper

    return sorted(load_records(run_paper("scorer", "smoke", overrides, methods=["dqn"])),
                  key=lambda r: (r["env"], r["seed"]))


def test_a_pickle_planted_in_a_scorer_checkpoint_never_runs(tmp_path, monkeypatch, capsys):
    from iclr26.core import faults

    monkeypatch.chdir(tmp_path)
    with faults.armed("train", "checkpoint", after=1), pytest.raises(faults.InjectedFault):
        _scorer_records(SCORER)
    path = tmp_path / "runs/smoke/scorer/dqn/s0-1/checkpoint.pt"
    saved = torch.load(path, weights_only=True)
    assert saved["state"]["slot"] == "headline" and "pickled_env" not in saved["state"]["env"]
    # where the old code read the MinAtar env, a uint8 tensor of pickle bytes, as the audit planted it
    marker = tmp_path / "code-ran"
    saved["state"]["env"]["pickled_env"] = torch.frombuffer(bytearray(pickle.dumps(Payload(marker))),
                                                            dtype=torch.uint8)
    torch.save(saved, path)
    capsys.readouterr()

    resumed = _scorer_records(SCORER)
    assert not marker.exists()
    refusals = [line for line in capsys.readouterr().err.splitlines() if "refusing the checkpoint's env state" in line]
    assert len(refusals) == 1 and "pickled_env" in refusals[0], refusals
    # refused, the environment starts over: the run ends as one never interrupted (train again from
    # scratch on the same prepared data)
    shutil.rmtree(tmp_path / "runs/smoke/scorer/dqn")
    assert resumed == _scorer_records(SCORER)
