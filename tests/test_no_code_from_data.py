"""No file the pipeline reads may run code (issue 26; audit 2026-12-02, H8 and H9).

Two payloads planted where the pipeline used to unpickle them: a genuine scorer checkpoint with a
pickle in its env state (the old code pickle.loads'ed `state["env"]["pickled_env"]`), and a saved
generation batch that is a pickled object (the old code torch.load'ed it with weights_only=False).
Each payload is an object whose `__reduce__` opens a marker file for writing: unpickling it creates
the file, so the marker says whether code from the file ran.
"""
from __future__ import annotations

import pickle
import shutil
from pathlib import Path
from types import SimpleNamespace

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


# ----------------------------------------------------------------------------- generation batches
class TinyLM(torch.nn.Module):
    """A seeded bigram model with generate()'s call signature: the store needs a model, not a good one."""

    def __init__(self, vocab: int = 11):
        super().__init__()
        self.table = torch.nn.Embedding(vocab, vocab)
        torch.nn.init.normal_(self.table.weight, generator=torch.Generator().manual_seed(0))
        self.device = torch.device("cpu")

    def forward(self, input_ids, cache=None, **_):
        return SimpleNamespace(logits=self.table(input_ids), cache=cache)


@pytest.fixture
def resume_off():
    from iclr26.core.lm import generate as generation

    yield generation
    generation.resume_in(None)


def test_a_pickled_object_planted_as_a_generation_batch_never_runs(tmp_path, resume_off, capsys):
    generation = resume_off
    model, prompts = TinyLM().eval(), [[1, 2], [3], [4, 5, 6], [7], [8, 9]]

    def sample():
        return generation.generate(model, prompts, pad_id=0, eos_id=10, max_new_tokens=5, temperature=1.0,
                                   seed=3, batch_size=2)

    reference = sample()   # no store (resume off)
    generation.resume_in(tmp_path / "generation")
    assert sample() == reference
    batches = sorted((tmp_path / "generation").rglob("chunk_*.pt"))
    assert [p.name for p in batches] == ["chunk_0000000.pt", "chunk_0000002.pt", "chunk_0000004.pt"]
    marker = tmp_path / "code-ran"
    torch.save(Payload(marker), batches[0])   # what the audit planted in the folder _ChunkStore.open computes
    capsys.readouterr()

    assert sample() == reference
    assert not marker.exists()
    refusals = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[generate] refusing")]
    assert len(refusals) == 1 and batches[0].name in refusals[0], refusals
    assert set(torch.load(batches[0], weights_only=True)) == {*generation.FIELDS, "rng"}   # written again


# ----------------------------------------------------------------------------- pinned downloads
# Both used to be unpickled in full once their pin matched; a pin says which bytes were expected,
# not that they are harmless, so here each payload comes with a pin that matches it.
def test_a_panns_checkpoint_with_an_object_is_refused_with_its_pin(tmp_path):
    import hashlib

    import numpy as np

    from iclr26.core.errors import DataError
    from iclr26.papers.dart.encoders import load_checkpoint

    path, marker = tmp_path / "ResNet38_mAP=0.434.pth", tmp_path / "code-ran"
    sampler = {"indexes_per_class": [np.arange(3)], "queue": [np.int64(2)], "pointers_of_classes": [0]}
    torch.save({"iteration": 0, "model": {"w": torch.ones(2)}, "sampler": sampler}, path)
    assert torch.equal(load_checkpoint(path, None)["w"], torch.ones(2))   # PANNs' numpy arrays still load
    torch.save({"iteration": 0, "model": {"w": torch.ones(2)}, "sampler": Payload(marker)}, path)
    with pytest.raises(DataError, match="holds objects other than tensors, numpy arrays and plain data"):
        load_checkpoint(path, hashlib.md5(path.read_bytes()).hexdigest())
    assert not marker.exists()


def test_a_cifar_batch_with_an_object_is_refused_with_its_pin(tmp_path):
    import io
    import tarfile

    from iclr26.core.errors import DataError
    from iclr26.core.io import sha256_file
    from iclr26.papers.conditioned_init import data

    archive, marker = tmp_path / "cifar-10-python.tar.gz", tmp_path / "code-ran"
    with tarfile.open(archive, "w:gz") as tar:
        blob = pickle.dumps({b"data": Payload(marker), b"labels": [0]}, protocol=4)
        info = tarfile.TarInfo("cifar-10-batches-py/data_batch_1")
        info.size = len(blob)
        tar.addfile(info, io.BytesIO(blob))
    with pytest.raises(DataError, match=r"names [a-z_.]*open, which this reader does not build"):
        data.read_cifar10(archive, sha256_file(archive))
    assert not marker.exists()
