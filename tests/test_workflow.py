"""The workflow as users run it: dry runs at every scale, config errors, the Slurm profile,
DVC, the pinned environments, and one real end-to-end run that is killed and resumed."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO, venv_env
from iclr26.core.paper import all_papers

SNAKEMAKE = [sys.executable, "-m", "snakemake"]


def snakemake(cwd, *args, check=True, timeout=600):
    proc = subprocess.run([*SNAKEMAKE, *args], cwd=cwd, env=venv_env(), capture_output=True, text=True,
                          timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


# ----------------------------------------------------------------------------- dry runs
def test_tiny_dag_has_every_stage_for_every_paper():
    out = snakemake(REPO, "-n", "--forceall", "all", "--quiet", "rules").stdout
    for rule in ("acquire", "prepare", "train", "evaluate", "tabulate", "claims", "report"):
        assert rule in out, rule


def test_full_scale_dag_requests_gpus_on_training():
    proc = snakemake(REPO, "-n", "--forceall", "all", "--config", "scale=full", "-p")
    text = proc.stdout + proc.stderr
    assert "--scale full" in text
    blocks = text.split("\nrule ")
    gpu_papers = [slug for slug, paper in all_papers().items() if "train" in paper.gpu_stages]
    train = [b for b in blocks if b.startswith("train:")]
    on_gpu = [b for b in train if any(f"paper={slug}," in b for slug in gpu_papers)]
    assert gpu_papers and on_gpu and all("gpu=1" in b for b in on_gpu), on_gpu[:1]
    assert all("gpu=0" in b for b in train if b not in on_gpu)
    prepare = [b for b in blocks if b.startswith("prepare:")]
    assert prepare and all("gpu=0" in b for b in prepare)
    assert re.search(r"acquire \w+/\w+ \(full\): url=https://", text)  # real sources, in the job log


def test_slurm_profile_dry_run_from_repo_root():
    proc = snakemake(REPO, "--profile", "slurm", "-n", "--forceall", "all")
    assert "train" in proc.stdout + proc.stderr


@pytest.mark.parametrize("args,needle", [
    (["scale=huge"], "config key 'scale' = 'huge' is not allowed; allowed: smoke, tiny, full"),
    (["papers=[nonesuch]"], "config key 'papers' names unknown paper 'nonesuch'"),
    (["seeds=three"], "config key 'seeds'"),
    (["methods={scorer: [ppo]}"], "config key 'methods.scorer' names unknown method 'ppo'"),
    (["overrides=[scorer:train.no_such_key=1]"], "bad override"),
])
def test_bad_config_fails_before_any_job_with_one_line(args, needle, tmp_path):
    proc = snakemake(REPO, "-n", "all", "--config", *args, check=False)
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if "iclr26 config error" in line]
    assert len(lines) == 1 and needle in lines[0], proc.stderr[-2000:]
    assert "Job stats" not in proc.stdout + proc.stderr


# ----------------------------------------------------------------------------- static checks
def test_dvc_stages_cover_every_paper():
    spec = yaml.safe_load((REPO / "dvc.yaml").read_text())
    assert sorted(spec["vars"][0]["papers"]) == sorted(all_papers())


def test_every_rule_names_a_pinned_env_matching_the_installed_versions():
    from importlib import metadata

    rules = "".join(p.read_text() for p in (REPO / "workflow" / "rules").glob("*.smk"))
    assert len(re.findall(r"^rule \w+:", rules, re.M)) == len(re.findall(r"^    conda:", rules, re.M))
    for env_file in (REPO / "envs").glob("*.yaml"):
        env = yaml.safe_load(env_file.read_text())
        pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
        for pin in pip:
            name, _, version = pin.partition("==")
            assert version, f"{env_file.name}: {pin} is not an exact pin"
            assert metadata.version(name) == version, f"{env_file.name}: {name} pinned {version}"
    for slug in all_papers():
        from iclr26.core.config import compose_job_config

        assert (REPO / "envs" / f"{compose_job_config(slug, 'tiny').get('conda_env', 'pipeline')}.yaml").exists()


# ----------------------------------------------------------------------------- real runs
def _outputs(repo: Path):
    return sorted(p for p in repo.glob("results/**/*") if p.is_file())


@pytest.mark.slow
def test_end_to_end_killed_midway_then_resumed(checkout):
    """Kill a smoke run after its first jobs finish; the rerun completes, reruns nothing finished,
    and leaves no partial file; a third run has nothing to do."""
    cmd = [*SNAKEMAKE, "--cores", "2", "all", "--config", "scale=smoke"]
    proc = subprocess.Popen(cmd, cwd=checkout, env=venv_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    outputs, finished = {}, {}  # jobid -> output; outputs of train jobs Snakemake reported finished
    output = None
    for line in proc.stdout:  # follow Snakemake's own progress report
        if line.startswith("    output: "):
            output = line.split(": ", 1)[1].strip()
        elif line.startswith("    jobid: ") and output:
            outputs[line.split(": ", 1)[1].strip()] = output
        elif (m := re.match(r"Finished jobid: (\d+) \(Rule: train\)", line.strip())):
            path = checkout / outputs[m.group(1)]
            finished[path] = path.stat().st_mtime_ns
            if len(finished) >= 2:
                break
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert len(finished) >= 2, "no training job finished before the kill"

    # SIGKILL gives Snakemake no chance to release its lock (Ctrl-C would): unlock, then the same command
    snakemake(checkout, "--unlock", "--config", "scale=smoke")
    resumed = snakemake(checkout, "--cores", "2", "all", "--config", "scale=smoke")
    assert "Nothing to be done" not in resumed.stdout + resumed.stderr
    for path, mtime in finished.items():
        assert path.stat().st_mtime_ns == mtime, f"{path} was rerun"
    assert not list(checkout.rglob("*.tmp")), "a temporary file was left behind"
    for paper in all_papers():
        for name in ("table.md", "table.csv", "table.tex", "claims.json"):
            assert (checkout / "results" / paper / name).stat().st_size > 0
        claims = json.loads((checkout / "results" / paper / "claims.json").read_text())
        assert all(c["verdict"] in ("holds", "not reproduced", "inconclusive") for c in claims["claims"])
        assert list((checkout / "results" / paper).glob("*.png")), f"{paper}: no figure"
    assert "<table>" in (checkout / "results" / "report.html").read_text()
    assert "verdict" in (checkout / "results" / "claims.md").read_text()

    again = snakemake(checkout, "--cores", "2", "all", "--config", "scale=smoke")
    assert "Nothing to be done" in again.stdout + again.stderr

    # editing one paper's method reruns that paper's jobs, and no other paper's
    edited, *others = sorted(all_papers())
    source = checkout / "src" / "iclr26" / "papers" / edited / "__init__.py"
    source.write_text(source.read_text() + "\n# edited\n")
    plan = snakemake(checkout, "-n", "all", "--config", "scale=smoke").stdout
    assert f"runs/smoke/{edited}/" in plan
    assert not any(f"runs/smoke/{other}/" in plan for other in others)


@pytest.mark.slow
def test_dvc_repro_push_pull_in_a_fresh_clone(checkout, tmp_path):
    """dvc repro builds the tables (smoke scale here, to keep the suite short), a second repro is a
    no-op, and push / pull through the local remote restore them after they are deleted."""
    config = checkout / "config" / "config.yaml"
    config.write_text(config.read_text().replace("scale: tiny", "scale: smoke"))
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "smoke"], cwd=checkout,
                   check=True)
    subprocess.run([sys.executable, "-m", "dvc", "remote", "modify", "--local", "local", "url",
                    str(tmp_path / "remote")], cwd=checkout, check=True, env=venv_env())

    def dvc(*args):
        proc = subprocess.run([sys.executable, "-m", "dvc", *args], cwd=checkout, env=venv_env(),
                              capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return proc.stdout + proc.stderr

    dvc("repro")
    tables = {p: p.read_bytes() for p in checkout.glob("results/*/table.*")}
    assert len(tables) == 3 * len(all_papers())
    assert "didn't change, skipping" in dvc("repro") or "Data and pipelines are up to date" in dvc("status")
    dvc("push")
    import shutil

    shutil.rmtree(checkout / "results")
    shutil.rmtree(checkout / ".dvc" / "cache")
    dvc("pull")
    assert {p: p.read_bytes() for p in checkout.glob("results/*/table.*")} == tables
