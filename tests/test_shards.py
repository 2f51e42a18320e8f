"""Shard jobs (core.job): a stage too long for one job runs as N shard jobs, each computing its share
of the job's units of work, then the ordinary job gathers them. The gathered outputs are those of an
unsharded run; a killed shard resumes; the workflow queues the shard jobs with the stage's GPU
resources before the gathering job; the preflight divides a sharded job's runtime by the shards.
"""
from __future__ import annotations

import copy
import re
import subprocess
import sys

import pytest

from conftest import REPO, venv_env
from iclr26.core import faults, preflight
from iclr26.core.config import compose_job_config
from iclr26.core.errors import ConfigError
from iclr26.core.io import read_json
from iclr26.core.job import Job, ShardDone, run_stage, shard_marker, shard_of
from iclr26.core.paper import get_paper

SLUG = "step_entropy"   # its prepare saves units (base models, then own traces); full scale shards it
DATASET = "reasoning"
# smoke made smaller still: two units per job.units call, a second of work each
CHEAP = ("base.steps=4", "method.max_new_tokens=12", f"data.{DATASET}.n_train=40", f"data.{DATASET}.n_test=6",
         "train.n_problems=6")


def _prepared(root):
    folder = root / "data" / "smoke" / SLUG / "prepared" / DATASET
    return folder, read_json(folder / "manifest.json")


def _acquire():
    run_stage("acquire", SLUG, "smoke", CHEAP, dataset=DATASET)


@pytest.fixture(scope="module")
def unsharded(tmp_path_factory):
    root = tmp_path_factory.mktemp("unsharded")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        _acquire()
        run_stage("prepare", SLUG, "smoke", CHEAP, dataset=DATASET)
    return _prepared(root)[1]


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    """Shard 1 of 2 killed right after its first unit, run again; shard 2; the gathering job."""
    root = tmp_path_factory.mktemp("sharded")
    seen = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        _acquire()
        folder = root / "data" / "smoke" / SLUG / "prepared" / DATASET
        faults.enter_stage("prepare")
        with faults.armed("prepare", "unit", after=1), pytest.raises(faults.InjectedFault):
            run_stage("prepare", SLUG, "smoke", CHEAP, dataset=DATASET, shard=(1, 2))
        seen["after_kill"] = {p.name: p.stat().st_mtime_ns for p in (folder / "units").glob("*.json")}
        seen["marker_after_kill"] = shard_marker(folder, 1, 2).exists()
        for k in (1, 2):
            run_stage("prepare", SLUG, "smoke", CHEAP, dataset=DATASET, shard=(k, 2))
            seen[f"marker{k}"] = read_json(shard_marker(folder, k, 2))
        seen["before_gather"] = {p.name: p.stat().st_mtime_ns for p in (folder / "units").glob("*.json")}
        seen["manifest_before_gather"] = (folder / "manifest.json").exists()
        run_stage("prepare", SLUG, "smoke", CHEAP, dataset=DATASET)
        seen["after_gather"] = {p.name: p.stat().st_mtime_ns for p in (folder / "units").glob("*.json")}
    seen["folder"], seen["manifest"] = _prepared(root)
    return seen


def test_two_shards_then_the_gather_give_the_unsharded_outputs_byte_for_byte(unsharded, sharded):
    manifest = sharded["manifest"]
    assert manifest["files"] == unsharded["files"]      # every file, by sha256 (units/*.json included)
    assert manifest["info"] == unsharded["info"]
    assert not any(name.startswith(".shard") for name in manifest["files"])   # markers stay outside it
    assert not sharded["manifest_before_gather"]          # shard jobs write no completion file
    # every unit the shards saved was computed once: one by the run of shard 1 that was killed, the
    # rest by the two shard jobs; the gathering job computed only units no shard reached (a later
    # job.units call) and rewrote none of theirs
    before, after = sharded["before_gather"], sharded["after_gather"]
    computed = 1 + sharded["marker1"]["units_computed"] + sharded["marker2"]["units_computed"]
    assert computed == len(before) >= 2 and sharded["marker2"]["units_computed"] >= 1
    assert set(before) <= set(after) and all(after[name] == t for name, t in before.items())


def test_a_shard_killed_at_a_unit_boundary_resumes(sharded):
    assert len(sharded["after_kill"]) == 1 and not sharded["marker_after_kill"]
    saved = next(iter(sharded["after_kill"]))
    assert sharded["before_gather"][saved] == sharded["after_kill"][saved]   # not redone on the rerun
    assert sharded["marker1"]["ended_at_its_share"]


def test_units_are_dealt_by_hash_and_the_gathering_job_only_gathers(tmp_path):
    """One job.units call of 7 keys over 3 shards: balanced, the same whatever the order; each shard
    computes its own and ends there; a shard run again once all are saved goes on; the gather
    computes none."""
    keys = [f"batch_{i}" for i in range(7)]
    owner = shard_of(keys, 3)
    assert owner == shard_of(reversed(keys), 3) and sorted(owner.values()) == [1, 1, 1, 2, 2, 3, 3]
    paper, cfg = get_paper("diffusion_convergence"), compose_job_config("diffusion_convergence", "smoke")
    computed = []

    def work(key):
        computed.append(key)
        return {"twice": key * 2}

    for k in (1, 2, 3):
        job = Job(paper=paper, cfg=cfg, stage="evaluate", out_dir=tmp_path, shard=(k, 3))
        with pytest.raises(ShardDone):
            job.units(keys, work)
        assert sorted(computed[-sum(v == k for v in owner.values()):]) == sorted(x for x in keys if owner[x] == k)
    again = Job(paper=paper, cfg=cfg, stage="evaluate", out_dir=tmp_path, shard=(1, 3))
    assert list(again.units(keys, work)) == keys and len(computed) == 7   # all saved before: it goes on
    gathered = Job(paper=paper, cfg={**cfg, "shards": {"evaluate": 5}}, stage="evaluate", out_dir=tmp_path)
    assert gathered.units(keys, work) == {key: {"twice": key * 2} for key in keys} and len(computed) == 7


@pytest.mark.parametrize("shards,needle", [
    ({"train": 2}, r"config key 'shards.train' = 'train' is not allowed; allowed: prepare, evaluate"),
    ({"prepare": 0}, r"config key 'shards.prepare' = 0 is not allowed; allowed: a positive integer"),
    ({"prepare": {"nope": 2}}, r"config key 'shards.prepare.nope' = 'nope' is not allowed; allowed: reasoning"),
])
def test_a_bad_shards_key_is_one_line(shards, needle):
    from iclr26.core.contract import check_shards

    with pytest.raises(ConfigError, match=needle) as err:
        check_shards(get_paper(SLUG), shards)
    assert "\n" not in str(err.value)


# ----------------------------------------------------------------------------- workflow and preflight
def test_full_scale_dag_queues_the_shard_jobs_with_gpus_before_the_gather(tmp_path):
    from conftest import copy_checkout

    repo = copy_checkout(tmp_path)
    n = compose_job_config(SLUG, "full")["shards"]["prepare"][DATASET]
    target = f"data/full/{SLUG}/prepared/{DATASET}/manifest.json"
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--profile", "slurm", "-n", "--forceall", target,
                           "-p", "--config", "scale=full", f"papers=[{SLUG}]"], cwd=repo, env=venv_env(),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    counts = dict(re.findall(r"^(\w+)\s+(\d+)$", proc.stdout.split("Job stats:")[1], re.M))
    assert (int(counts["prepare_shard"]), int(counts["prepare"]), int(counts["acquire"])) == (n, 1, 1)
    blocks = [b for b in proc.stdout.split("\nrule ")[1:] if b.startswith("prepare_shard:")]
    assert len(blocks) == n and all(re.search(r"\bgpu=1\b", b) and "slurm_partition=gpu" in b for b in blocks)
    assert {int(m) for b in blocks for m in re.findall(rf"--shard (\d+)/{n}\b", b)} == set(range(1, n + 1))
    gather = next(b for b in proc.stdout.split("\nrule ")[1:] if b.startswith("prepare:"))
    assert all(f".shard-{k}-of-{n}.json" in gather.split("output:")[0] for k in range(1, n + 1))


def test_preflight_passes_sharded_and_fails_with_one_line_unsharded():
    paper, cfg = get_paper(SLUG), compose_job_config(SLUG, "full")
    problems, plan = preflight.check_paper(paper, cfg, retries=2)
    assert problems == [] and plan["jobs"]["prepare_shard"] == cfg["shards"]["prepare"][DATASET]
    whole = copy.deepcopy(cfg)
    whole["shards"].pop("prepare")
    found, unsharded = preflight.check_paper(paper, whole, retries=2)
    assert len(found) == 1 and re.fullmatch(
        rf"{SLUG} prepare {DATASET}: estimated \d+\.\d h \(.*\) exceeds its runtime \(.*\); shards\.prepare: \d+ "
        r"would each fit one attempt", found[0]), found
    assert "prepare_shard" not in unsharded["jobs"]
    # the estimated GPU-hours are the whole work either way (plus each shard's model loading)
    extra = (plan["jobs"]["prepare_shard"] - 1) * cfg["estimate"]["prepare"]["overhead_s"] / 3600
    assert plan["gpu_hours_estimated"] == pytest.approx(unsharded["gpu_hours_estimated"] + extra)


def test_the_cli_takes_a_shard_and_refuses_a_bad_one():
    proc = subprocess.run([sys.executable, "-m", "iclr26", "prepare", "--paper", SLUG, "--scale", "smoke",
                           "--dataset", DATASET, "--shard", "3/2"], capture_output=True, text=True,
                          env={**venv_env(), "PYTHONPATH": str(REPO / "src")}, cwd=REPO)   # this checkout's package
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0
    assert "--shard '3/2': expected k/N with 1 <= k <= N" in proc.stderr
