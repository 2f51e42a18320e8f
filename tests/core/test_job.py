"""The job runner's promises about its inputs and saved work: a changed or truncated input is one
line naming the file and the job that makes it, and a plain rerun re-creates it; saved units of
work are redone when the config changes."""
from __future__ import annotations

import pytest

from iclr26.core.errors import DataError
from iclr26.core.job import load_records, run_paper, run_stage

PAPER = "diffusion_convergence"  # numpy only: seconds at smoke scale


@pytest.fixture
def finished(workdir):
    evals = run_paper(PAPER, "smoke")
    return workdir, evals


def _a_prepared_file(workdir):
    return next(p for p in sorted(workdir.glob(f"data/smoke/{PAPER}/prepared/*/*"))
                if p.name != "manifest.json" and not p.name.startswith("."))


@pytest.mark.parametrize("damage", ["rewrite", "truncate"])
def test_a_changed_input_is_one_line_and_a_rerun_recreates_it(finished, damage):
    workdir, evals = finished
    before = load_records(evals)
    target = _a_prepared_file(workdir)
    manifest = target.parent / "manifest.json"
    if damage == "rewrite":
        target.write_bytes(target.read_bytes()[::-1])
    else:
        target.write_bytes(target.read_bytes()[: target.stat().st_size // 2])
    block = evals[0].parent
    with pytest.raises(DataError) as err:
        run_stage("evaluate", PAPER, "smoke", method=block.parent.name, seed_block=block.name)
    message = str(err.value)
    assert "\n" not in message and str(target.relative_to(workdir)) in message
    assert f"prepare {PAPER}/{target.parent.name}" in message
    assert "rerun the same command" in message and not manifest.exists()
    assert load_records(run_paper(PAPER, "smoke")) == before  # prepare reran; the same numbers


def test_a_garbled_eval_file_is_one_line(finished):
    _, evals = finished
    evals[0].write_text("{not json")
    with pytest.raises(DataError, match=rf"{evals[0]} is unreadable; removed"):
        load_records(evals)
    assert not evals[0].exists()


def _job(tmp_path, cfg_change=None):
    from iclr26.core.config import compose_job_config
    from iclr26.core.job import Job
    from iclr26.core.paper import get_paper

    cfg = compose_job_config(PAPER, "smoke")
    if cfg_change:
        cfg = {**cfg, **cfg_change}
    return Job(paper=get_paper(PAPER), cfg=cfg, stage="train", out_dir=tmp_path)


def test_units_resume_after_a_fault_and_are_redone_under_another_config(tmp_path):
    from iclr26.core import faults

    done = []

    def work(key):
        done.append(key)
        return {"value": key.upper()}

    job = _job(tmp_path)
    faults.enter_stage("train")
    with faults.armed("train", "unit", after=2), pytest.raises(faults.InjectedFault):
        job.units(["a", "b", "c"], work)
    assert done == ["a", "b"]
    assert job.units(["a", "b", "c"], work) == {"a": {"value": "A"}, "b": {"value": "B"}, "c": {"value": "C"}}
    assert done == ["a", "b", "c"]  # a and b were not redone
    _job(tmp_path, {"threads": 99}).units(["a"], work)
    assert done == ["a", "b", "c", "a"]  # another config: the saved unit is not reused


def test_a_checkpoint_is_resumed_only_under_its_own_config(tmp_path):
    from iclr26.core.checkpoint import Checkpointer

    Checkpointer(tmp_path, config_digest="one").save({"step": 3})
    assert Checkpointer(tmp_path, config_digest="one").load() == {"step": 3}
    assert Checkpointer(tmp_path, config_digest="two").load() is None


class _Payload:  # any class: unpickling it would run code chosen by whoever wrote the file
    pass


def test_a_checkpoint_holding_a_pickled_object_is_refused_with_one_line(tmp_path, capsys):
    import torch

    from iclr26.core.checkpoint import Checkpointer

    torch.save({"config_digest": "one", "state": {"step": 3, "env": _Payload()}}, tmp_path / "checkpoint.pt")
    assert Checkpointer(tmp_path, config_digest="one").load() is None
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1 and "refusing" in lines[0] and "pickled objects" in lines[0]


def test_rng_states_round_trip_through_a_weights_only_checkpoint(tmp_path):
    import random

    import numpy as np
    import torch

    from iclr26.core.checkpoint import Checkpointer, rng_state, set_rng_state

    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    Checkpointer(tmp_path, config_digest="d").save({"rng": rng_state()})
    expected = (random.random(), np.random.rand(), torch.rand(1).item())
    set_rng_state(Checkpointer(tmp_path, config_digest="d").load()["rng"])
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected


def test_a_job_resumed_after_an_override_equals_a_clean_run_with_it(tmp_path, monkeypatch):
    """The reported case: a train job stopped at a checkpoint, rerun with another learning rate,
    must not resume from the old config's checkpoint (it did: silently wrong records)."""
    from iclr26.core import faults
    from iclr26.core.paper import get_paper

    slug = "scorer"
    method, override = get_paper(slug).methods[0], ("train.lr=0.01",)

    def train_then_records(folder, overrides=(), fault=None):
        folder.mkdir()
        monkeypatch.chdir(folder)
        for dataset in get_paper(slug).datasets:
            run_stage("acquire", slug, "smoke", dataset=dataset)
            run_stage("prepare", slug, "smoke", dataset=dataset)
        from iclr26.core.config import compose_job_config, seed_blocks

        cfg = compose_job_config(slug, "smoke")
        block = seed_blocks(cfg["seeds"], cfg.get("seed_batch", 1))[0]
        if fault:
            with faults.armed("train", "checkpoint", after=1), pytest.raises(faults.InjectedFault):
                run_stage("train", slug, "smoke", method=method, seed_block=block)
        run_stage("train", slug, "smoke", overrides, method=method, seed_block=block)
        return load_records([run_stage("evaluate", slug, "smoke", overrides, method=method, seed_block=block)])

    resumed = train_then_records(tmp_path / "resumed", override, fault=True)
    clean = train_then_records(tmp_path / "clean", override)
    assert resumed == clean


def test_a_corrupt_train_completion_file_is_removed_so_a_rerun_retrains(finished):
    workdir, evals = finished
    before = load_records(evals)
    metrics = evals[0].parent / "metrics.json"
    metrics.write_text("{garbled")
    evals[0].unlink()  # as Snakemake would: evaluate is to run again
    block = evals[0].parent
    with pytest.raises(DataError, match=r"metrics.json is unreadable; removed .* the train .* job runs again"):
        run_stage("evaluate", PAPER, "smoke", method=block.parent.name, seed_block=block.name)
    assert not metrics.exists()
    assert load_records(run_paper(PAPER, "smoke")) == before and metrics.exists()  # retrained, same numbers


def test_a_changed_run_file_is_one_line_naming_the_train_job(finished):
    workdir, evals = finished
    run = evals[0].parent
    target = next(p for p in sorted(run.rglob("*")) if p.is_file() and p.suffix in (".npz", ".json")
                  and p.name not in ("metrics.json", "eval.json"))
    target.write_bytes(target.read_bytes() + b" ")
    with pytest.raises(DataError, match=rf"was changed after train {PAPER}/{run.parent.name}/{run.name} wrote it"):
        run_stage("evaluate", PAPER, "smoke", method=run.parent.name, seed_block=run.name)
    assert not (run / "metrics.json").exists()


def test_a_stale_lock_is_removed_only_when_no_snakemake_works_here(tmp_path, monkeypatch):
    import subprocess
    import sys
    import time
    from pathlib import Path

    from iclr26.core.lifecycle import release_stale_locks

    locks = tmp_path / ".snakemake" / "locks"
    locks.mkdir(parents=True)
    (locks / "0.input.lock").write_text("x")
    monkeypatch.setenv("SLURM_JOB_ID", "7")  # a Slurm job step: the lock is its submitter's
    assert not release_stale_locks(tmp_path) and (locks / "0.input.lock").exists()
    monkeypatch.delenv("SLURM_JOB_ID")
    # a live Snakemake working in this directory holds it (here: a script named snakemake that sleeps)
    fake = tmp_path / "bin" / "snakemake"
    fake.parent.mkdir()
    fake.write_text("import time\ntime.sleep(60)\n")
    holder = subprocess.Popen([sys.executable, str(fake)], cwd=tmp_path)
    cmdline = Path(f"/proc/{holder.pid}/cmdline")
    for _ in range(500):  # a new process shows its argv a moment after exec
        if b"snakemake" in cmdline.read_bytes():
            break
        time.sleep(0.01)
    try:
        assert not release_stale_locks(tmp_path) and (locks / "0.input.lock").exists()
    finally:
        holder.kill()
        holder.wait()
    assert release_stale_locks(tmp_path) and not (locks / "0.input.lock").exists()
