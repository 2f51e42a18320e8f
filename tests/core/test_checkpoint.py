"""core.checkpoint: what a bad checkpoint file is called, a full disk while saving, and the stop
request that SIGTERM makes (shared by every checkpointer of the process)."""
from __future__ import annotations

import errno
import os
import signal

import numpy as np
import pytest
import torch

from iclr26.core import checkpoint
from iclr26.core.checkpoint import Checkpointer
from iclr26.core.errors import DataError


class _Payload:  # any class: unpickling it would run code chosen by whoever wrote the file
    pass


def _load_message(directory, capsys) -> str:
    assert Checkpointer(directory, config_digest="one").load() is None
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize("seed", range(8))
def test_random_bytes_are_an_unreadable_checkpoint_not_pickled_objects(tmp_path, capsys, seed):
    # audit 2026-12-02 H5: `head -c 5000 /dev/urandom > checkpoint.pt` was called "pickled objects"
    (tmp_path / "checkpoint.pt").write_bytes(np.random.default_rng(seed).bytes(5000))
    message = _load_message(tmp_path, capsys)
    assert "ignoring unreadable" in message and "not a file torch.save wrote" in message, message
    assert "pickled objects" not in message


def test_a_pickled_object_is_refused_and_garbage_is_unreadable(tmp_path, capsys):
    path = tmp_path / "checkpoint.pt"
    torch.save({"config_digest": "one", "state": {"step": 3, "env": _Payload()}}, path)
    refused = _load_message(tmp_path, capsys)
    assert "refusing" in refused and "pickled objects" in refused, refused

    path.write_bytes(b"\x01not a checkpoint at all")
    unreadable = _load_message(tmp_path, capsys)
    assert "ignoring unreadable" in unreadable and "pickled objects" not in unreadable, unreadable


def _good_checkpoint(tmp_path) -> Checkpointer:
    ckpt = Checkpointer(tmp_path, config_digest="d")
    ckpt.save({"step": torch.tensor(1)})
    return ckpt


@pytest.mark.parametrize("failure", [
    # what torch's zip writer raises when the disk fills (audit 2026-12-02 K17, a 300 KiB tmpfs)
    RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos 832 vs 726"),
    OSError(errno.ENOSPC, "No space left on device"),
])
def test_a_full_disk_while_saving_is_one_data_error_and_keeps_the_last_checkpoint(tmp_path, monkeypatch, failure):
    ckpt = _good_checkpoint(tmp_path)
    before = ckpt.path.read_bytes()

    def full_disk(obj, target, *args, **kwargs):
        with open(target, "wb") as handle:  # torch has written part of the file when the disk fills
            handle.write(b"PK\x03\x04 half a checkpoint")
        raise failure

    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(DataError) as error:
        ckpt.save({"step": torch.tensor(2)})
    message = str(error.value)
    assert "\n" not in message and str(ckpt.path) in message, message
    cause = "No space left on device" if isinstance(failure, OSError) else "inline_container.cc:664"
    assert cause in message and "free some disk space" in message, message
    assert "last good checkpoint is intact" in message, message
    monkeypatch.undo()
    assert ckpt.path.read_bytes() == before and ckpt.load()["step"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt"]  # no partial temporary file


def test_a_save_failing_for_another_reason_is_not_reported_as_a_write_failure(tmp_path, monkeypatch):
    ckpt = _good_checkpoint(tmp_path)

    def fails(obj, target, *args, **kwargs):
        raise RuntimeError("some bug in the state")

    monkeypatch.setattr(torch, "save", fails)
    with pytest.raises(RuntimeError, match="some bug in the state"):
        ckpt.save({"step": torch.tensor(2)})


def test_a_stop_request_holds_for_every_checkpointer_of_the_process(tmp_path):
    before = signal.getsignal(signal.SIGTERM)
    try:
        first = Checkpointer(tmp_path / "a").handle_sigterm()
        assert not first.stop_requested
        os.kill(os.getpid(), signal.SIGTERM)  # noted, not fatal: the handler is installed
        assert first.stop_requested
        # made after the signal (the next unit of the same job, a new Checkpointer): it must stop too
        second = Checkpointer(tmp_path / "b", every=100).handle_sigterm()
        assert second.stop_requested
        assert second.maybe_save(7, lambda: {"step": 7})  # off its schedule: saved because of the stop
        assert second.load() == {"step": 7}
    finally:  # this test process goes on: SIGTERM kills it again, and no later job is stopped
        signal.signal(signal.SIGTERM, before)
        checkpoint._STOP["requested"] = False
