"""The workflow as users run it: dry runs at every scale, config errors, the Slurm profile,
DVC, the pinned environments, and one real end-to-end run that is killed and resumed."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
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


@pytest.fixture(scope="module")
def dry(tmp_path_factory):
    """A copy of the checkout for dry runs: they never read a config/config.yaml a developer edited."""
    from conftest import copy_checkout

    repo = copy_checkout(tmp_path_factory.mktemp("dry"))
    committed = subprocess.run(["git", "show", "HEAD:config/config.yaml"], cwd=REPO, capture_output=True,
                               text=True, check=True).stdout
    (repo / "config" / "config.yaml").write_text(committed)  # the shipped defaults, not a local edit
    return repo


# ----------------------------------------------------------------------------- dry runs
def test_tiny_dag_has_every_stage_for_every_paper(dry):
    out = snakemake(dry, "-n", "--forceall", "all", "--quiet", "rules").stdout
    counts = dict(re.findall(r"^(\w+)\s+(\d+)$", out.split("Job stats:")[1], re.M))
    papers = all_papers()
    assert int(counts["acquire"]) == int(counts["prepare"]) == sum(len(p.datasets) for p in papers.values())
    assert {rule for rule in counts if rule.startswith("tabulate_")} == {f"tabulate_{p}" for p in papers}
    for rule in ("train", "evaluate", "claims", "report"):
        assert int(counts[rule]) >= 1, rule


def _rule_blocks(text: str, rule: str) -> dict[str, list[str]]:
    """The printed jobs of one rule, grouped by paper."""
    grouped: dict[str, list[str]] = {}
    for block in text.split("\nrule ")[1:]:
        if block.startswith(f"{rule}:") and (m := re.search(r"paper=(\w+)", block)):
            grouped.setdefault(m.group(1), []).append(block)
    return grouped


def test_full_scale_dag_requests_gpus_exactly_on_each_papers_gpu_stages(dry):
    """Through the Slurm profile: every stage whose code picks a device (the preflight's static scan)
    runs with a GPU, in the GPU partition, exactly on the paper's gpu_stages (07's prepare among
    them); no other job asks for one; a training-free method queues no train job."""
    from iclr26.core.config import compose_job_config
    from iclr26.core.preflight import stage_code

    proc = snakemake(dry, "--profile", "slurm", "-n", "--forceall", "all", "--config", "scale=full", "-p")
    text = proc.stdout + proc.stderr
    assert "--scale full" in text
    checked = 0
    for stage in ("acquire", "prepare", "train", "evaluate"):
        for slug, blocks in _rule_blocks(text, stage).items():
            paper = all_papers()[slug]
            wants_gpu = stage in paper.gpu_stages
            assert wants_gpu or not stage_code(paper, stage)["picks_device"], (slug, stage)
            gpus = {int(m) for b in blocks for m in re.findall(r"\bgpu=(\d+)", b)}
            partitions = {m for b in blocks for m in re.findall(r"\bslurm_partition=(\w*)", b)}
            assert gpus and (min(gpus) >= 1 if wants_gpu else gpus == {0}), (slug, stage, gpus)
            assert partitions == ({"gpu"} if wants_gpu else {""}), (slug, stage, partitions)
            checked += 1
            if stage == "train":
                queued = {m for b in blocks for m in re.findall(r"method=(\w+)", b)}
                run = compose_job_config(slug, "full").get("run_methods") or paper.methods  # a scale's subset
                assert queued == set(run) - set(paper.training_free), (slug, queued)
    assert checked >= 3 * len(all_papers())  # acquire prints its message (the source) instead of its block
    assert any(p.training_free for p in all_papers().values())
    assert re.search(r"acquire \w+/\w+ \(full\): url=https://", text)  # real sources, in the job log
    # 07's prepare runs the model (its own traces) on a GPU
    assert "prepare" in all_papers()["step_entropy"].gpu_stages
    assert stage_code(all_papers()["step_entropy"], "prepare")["picks_device"]


def test_retries_double_memory_and_runtime():
    """The README's promise: memory and runtime double on each retry (x1, x2, x4), runtime never above
    the partition's limit; the rules ask core.config.job_resource for every resource."""
    from iclr26.core.config import retry_scaled

    assert [retry_scaled(100, attempt) for attempt in (1, 2, 3)] == [100, 200, 400]
    assert [retry_scaled(2880, attempt, 2880) for attempt in (1, 2, 3)] == [2880, 2880, 2880]
    assert "job_resource(PAPER_DECL[wildcards.paper], job_config(wildcards.paper), stage, key, attempt)" in (
        REPO / "workflow" / "rules" / "common.smk").read_text()


def test_data_parallel_train_jobs_start_under_accelerate_launch(dry):
    parallel = [slug for slug, paper in all_papers().items() if paper.data_parallel]
    if not parallel:
        pytest.skip("no paper declares data-parallel training")
    slug = parallel[0]
    plan = snakemake(dry, "-n", "--forceall", "all", "-p", "--config", f"papers=[{slug}]",
                     "overrides=[launch.processes=2]").stdout
    train = [b for blocks in _rule_blocks(plan, "train").values() for b in blocks]
    assert train and all("accelerate launch --multi_gpu --num_processes 2" in b for b in train)
    single = snakemake(dry, "-n", "--forceall", "all", "-p", "--config", f"papers=[{slug}]").stdout
    assert "accelerate launch" not in single


def test_slurm_profile_dry_run_from_repo_root(dry):
    proc = snakemake(dry, "--profile", "slurm", "-n", "--forceall", "all")
    assert "Job stats:" in proc.stdout and re.search(r"^train\s+\d+$", proc.stdout, re.M)


def test_print_a_resolved_job_config():
    proc = subprocess.run([sys.executable, "-m", "iclr26", "config", "--paper", sorted(all_papers())[0],
                           "--scale", "smoke"], capture_output=True, text=True, env=venv_env(), cwd=REPO)
    cfg = yaml.safe_load(proc.stdout)
    assert proc.returncode == 0 and cfg["scale"] == "smoke" and cfg["slug"] == sorted(all_papers())[0]


@pytest.mark.parametrize("args,needle", [
    (["scale=huge"], "config key 'scale' = 'huge' is not allowed; allowed: smoke, tiny, full"),
    (["papers=[nonesuch]"], "config key 'papers' names unknown paper 'nonesuch'"),
    (["seeds=three"], "config key 'seeds'"),
    (["methods={scorer: [ppo]}"], "config key 'methods.scorer' names unknown method 'ppo'"),
    (["overrides=[scorer:train.no_such_key=1]"], "bad override"),
    (["overrides=[nosuch:train.total_steps=1]"], "names unknown paper 'nosuch'"),
    (["overrides=[scorer:resources.train.cpus=abc]"], "gives a string where 'resources.train.cpus' is an integer"),
    # the hostile tester's inputs (reliability audit I6, I8, I10, I13-I16, I28, I34, I35)
    (["papers=[scorer,scorer]"], "config key 'papers' = ['scorer', 'scorer'] lists an item twice"),
    (["seeds=[0,0]"], "config key 'seeds' = [0, 0] lists an item twice"),
    (["seeds=[99999999999999999999]"], "config key 'seeds.0' = 99999999999999999999 is too large"),
    (["methods={scorr: [dqn]}"], "config key 'methods.scorr' names unknown paper 'scorr'"),
    (["methods={andor_template: [mlp, mlp, template]}"], "lists an item twice"),
    (['overrides=["diffusion_convergence:seeds=[-1,-2]"]'], "seed -1 is not allowed"),
    (['overrides=["diffusion_convergence:seeds=[3,3]"]'], "seed 3 is listed twice"),
    (["overrides=[diffusion_convergence:scale=tiny]"], "'scale' is who the job is, not a setting"),
    (["overrides=[slug=scorer]"], "'slug' is who the job is, not a setting"),
])
def test_bad_config_fails_before_any_job_with_one_line(args, needle, dry):
    proc = snakemake(dry, "-n", "all", "--config", *args, check=False)
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if "iclr26 config error" in line]
    assert len(lines) == 1 and needle in lines[0], proc.stderr[-2000:]
    assert "Job stats" not in proc.stdout + proc.stderr


def test_seeds_null_on_the_command_line_keeps_each_papers_seeds(dry):
    """The schema allows null; Snakemake hands it over as the string 'null' (audit I20)."""
    proc = snakemake(dry, "-n", "all", "--config", "scale=smoke", "papers=[scorer]", "seeds=null")
    assert "Job stats" in proc.stdout + proc.stderr


@pytest.mark.parametrize("text,needle", [
    ("scale: smoke\nscale: tiny\n", "key 'scale' is given twice"),
    ("", "empty or not a mapping of keys"),
    ("- scale\n", "empty or not a mapping of keys"),
])
def test_a_config_file_with_a_key_twice_or_no_keys_is_one_line(text, needle, tmp_path):
    from conftest import copy_checkout

    repo = copy_checkout(tmp_path)
    (repo / "config" / "config.yaml").write_text(text)
    proc = snakemake(repo, "-n", "all", check=False)
    lines = [line for line in proc.stderr.splitlines() if "iclr26 config error" in line]
    assert proc.returncode != 0 and len(lines) == 1 and needle in lines[0], proc.stderr[-2000:]


def _break_paper_config(repo: Path, slug: str, change) -> None:
    path = repo / "config" / "hydra" / "paper" / f"{slug}.yaml"
    cfg = yaml.safe_load(path.read_text())
    change(cfg)
    path.write_text("# @package _global_\n" + yaml.safe_dump(cfg, sort_keys=False))


def _misspell_a_dataset(cfg):
    first = next(iter(cfg["data"]))
    cfg["data"] = {(first + "x" if k == first else k): v for k, v in cfg["data"].items()}


def _claim_an_unrecorded_metric(cfg):
    cfg["claims"][0]["metric"] = "no_such_metric"


def _bootstrap_a_claim_on_3_seeds(cfg):
    cfg["seeds"] = [0, 1, 2]
    claim = next(c for c in cfg["claims"] if "baseline" in c)
    claim["test"] = "bootstrap_iqm"


@pytest.mark.parametrize("change,needle", [
    (_bootstrap_a_claim_on_3_seeds, r"claim '\S+': test 'bootstrap_iqm' is valid from 8 seeds, the config gives 3"),
    (_misspell_a_dataset, r"config key 'data\.\w+x' = '\w+x' is not allowed; allowed: "),
    (_claim_an_unrecorded_metric, r"config key 'claims\[0\] \(\S+\)\.metric' = 'no_such_metric' is not allowed"),
])
def test_a_broken_paper_config_stops_the_dag_with_one_line(change, needle, tmp_path):
    from conftest import copy_checkout

    repo = copy_checkout(tmp_path)
    slug = sorted(all_papers())[-1]
    _break_paper_config(repo, slug, change)
    proc = snakemake(repo, "-n", "all", check=False)
    lines = [line for line in proc.stderr.splitlines() if "iclr26 config error" in line]
    assert proc.returncode != 0 and len(lines) == 1, proc.stderr[-2000:]
    assert f"paper {slug}:" in lines[0] and re.search(needle, lines[0]), lines[0]
    assert "Job stats" not in proc.stdout + proc.stderr


# ----------------------------------------------------------------------------- static checks
def test_nothing_outside_the_papers_folder_names_a_paper():
    """One list of papers: the folders of src/iclr26/papers/. dvc.yaml, the workflow, core and
    scripts discover them (README and the tests may name papers; a paper's own script carries its
    slug in its file name, e.g. scripts/coverage_scorer.py, and may name that paper only)."""
    from conftest import project_files

    slugs = [s for s in all_papers()]
    for rel in project_files():
        if rel.startswith(("src/iclr26/papers/", "config/hydra/paper", "tests/", "README.md", ".dvc", "metrics/",
                           "dvc.lock")):
            continue
        if rel == "scripts/hostile.py":  # replays the 2026-12-02 audit, whose cases name the papers it used
            continue
        text = (REPO / rel).read_text(errors="ignore")
        named = [s for s in slugs if re.search(rf"\b{s}\b", text) and s not in Path(rel).name]
        assert not named, f"{rel} names paper(s) {named}"
    spec = yaml.safe_load((REPO / "dvc.yaml").read_text())
    assert "results" in str(spec["stages"]["tables"]["outs"]) and "all" in spec["stages"]["tables"]["cmd"]


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
def _check_promised_outputs(repo: Path, papers) -> None:
    """What the README's "What you get" table promises, per paper and for the report."""
    import pandas as pd

    from iclr26.core.config import compose_job_config
    from iclr26.core.job import load_records

    for slug in papers:
        out = repo / "results" / slug
        records = load_records(sorted(repo.glob(f"runs/smoke/{slug}/*/*/eval.json")))
        table = pd.read_csv(out / "records.csv")
        assert len(table) == len(records) > 0 and {"method", "seed"} <= set(table.columns)
        assert yaml.safe_load((out / "config.yaml").read_text()) == compose_job_config(slug, "smoke")
        meta = json.loads((out / "provenance.json").read_text())
        assert re.fullmatch(r"[0-9a-f]{40}(\+dirty)?", meta["git_commit"]) and meta["packages"]["numpy"]
    report = (repo / "results" / "report.html").read_text()
    assert "<table>" in report and all(slug in report for slug in papers)
    # self-contained: every image inline, no stylesheet, script or image fetched from elsewhere
    assert not re.search(r"""(src|href)=["'](?!data:|#)""", report), "the report links an external file"
    assert report.count("data:image/png;base64,") >= len(papers)
    assert "verdict" in (repo / "results" / "claims.md").read_text()


def _jobs_running_in(repo: Path) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and b"iclr26" in (entry / "cmdline").read_bytes() and \
                    Path(os.readlink(entry / "cwd")) == repo.resolve():
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def test_setup_does_nothing_the_second_time():
    subprocess.run(["bash", "scripts/setup.sh"], cwd=REPO, capture_output=True, timeout=1800)  # up to date now
    proc = subprocess.run(["bash", "scripts/setup.sh"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "[setup] ready" in proc.stdout, proc.stdout + proc.stderr
    assert "installing" not in proc.stdout and "creating" not in proc.stdout, proc.stdout


# two cheap papers with training-free methods and trained ones (sorted: the first is edited below)
E2E = ("ldar", "zebra_cot")
E2E_PAPERS = f"papers=[{','.join(E2E)}]"


@pytest.mark.slow
def test_end_to_end_killed_midway_then_resumed(checkout):
    """Kill a smoke run after its first jobs finish; the rerun completes, reruns nothing finished,
    and leaves no partial file; a third run has nothing to do. Two papers: the workflow's mechanics
    are the same for every paper (each paper's stages are the contract test's, its DAG the dry runs')."""
    cmd = [*SNAKEMAKE, "--cores", "2", "all", "--config", "scale=smoke", E2E_PAPERS]
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
    proc.kill()  # kill -9 of Snakemake alone: its running jobs are orphaned
    proc.wait()
    proc.stdout.close()
    assert len(finished) >= 2, "no training job finished before the kill"
    # the orphans notice their Snakemake is gone and stop themselves (a job still importing torch on a
    # loaded machine notices only once its watcher thread starts)
    deadline = time.time() + 90
    while _jobs_running_in(checkout) and time.time() < deadline:
        time.sleep(0.5)
    assert not _jobs_running_in(checkout), "a job outlived its Snakemake"

    # SIGKILL gave Snakemake no chance to release its lock: the same command removes the stale lock
    resumed = snakemake(checkout, "--cores", "2", "all", "--config", "scale=smoke", E2E_PAPERS)
    assert "removed a stale lock" in resumed.stderr
    assert "Nothing to be done" not in resumed.stdout + resumed.stderr
    for path, mtime in finished.items():
        assert path.stat().st_mtime_ns == mtime, f"{path} was rerun"
    assert not list(checkout.rglob("*.tmp")), "a temporary file was left behind"
    for paper in E2E:
        for name in ("table.md", "table.csv", "table.tex", "claims.json"):
            assert (checkout / "results" / paper / name).stat().st_size > 0
        claims = json.loads((checkout / "results" / paper / "claims.json").read_text())
        assert all(c["verdict"] in ("holds", "not reproduced", "inconclusive", "untestable here")
                   for c in claims["claims"])
        assert list((checkout / "results" / paper).glob("*.png")), f"{paper}: no figure"
    _check_promised_outputs(checkout, E2E)

    again = snakemake(checkout, "--cores", "2", "all", "--config", "scale=smoke", E2E_PAPERS)
    assert "Nothing to be done" in again.stdout + again.stderr

    # a changed training config reruns the jobs that read it (train, evaluate, tabulate), not
    # acquire or prepare, and no other paper's
    edited, *others = E2E
    paper_config = checkout / "config" / "hydra" / "paper_scale" / edited / "smoke.yaml"
    original = paper_config.read_text()
    assert "train: {epochs: 2," in original  # a training key the data stages do not read
    paper_config.write_text(original.replace("train: {epochs: 2,", "train: {epochs: 3,"))
    plan = snakemake(checkout, "-n", "all", "--config", "scale=smoke", E2E_PAPERS, "--quiet", "rules").stdout
    counts = dict(re.findall(r"^(\w+)\s+(\d+)$", plan.split("Job stats:")[1], re.M))
    assert counts.get(f"tabulate_{edited}") == "1" and int(counts.get("train", 0)) >= 1, counts
    assert not any(f"tabulate_{other}" in counts for other in others), counts
    assert "acquire" not in counts and "prepare" not in counts, counts
    paper_config.write_text(original)
    # the same for an override on the command line: it reaches only the jobs of the keys they read
    plan = snakemake(checkout, "-n", "all", "--config", "scale=smoke", E2E_PAPERS,
                     f"overrides=[{edited}:train.epochs=3]",
                     "--quiet", "rules").stdout
    counts = dict(re.findall(r"^(\w+)\s+(\d+)$", plan.split("Job stats:")[1], re.M))
    assert "acquire" not in counts and "prepare" not in counts and int(counts.get("train", 0)) >= 1, counts

    # every file tabulate writes is a declared output: a deleted one is made again by a plain rerun
    deleted = [checkout / "results" / edited / name for name in ("records.csv", "provenance.json")]
    deleted.append(checkout / "results" / edited / all_papers()[edited].figures[0])
    for path in deleted:
        path.unlink()
    snakemake(checkout, "--cores", "2", "all", "--config", "scale=smoke", E2E_PAPERS)
    assert all(path.stat().st_size for path in deleted)

    # editing one paper's method reruns that paper's jobs, and no other paper's
    source = checkout / "src" / "iclr26" / "papers" / edited / "__init__.py"
    source.write_text(source.read_text() + "\n# edited\n")
    plan = snakemake(checkout, "-n", "all", "--config", "scale=smoke", E2E_PAPERS).stdout
    assert f"runs/smoke/{edited}/" in plan
    assert not any(f"runs/smoke/{other}/" in plan for other in others)


@pytest.mark.slow
def test_dvc_exp_run_params_metrics_and_push_pull_in_a_fresh_clone(checkout, tmp_path):
    """`dvc exp run -S` changes the workflow config as DVC params (smoke scale, one paper here, to
    keep the suite short); `dvc params diff` and `dvc metrics show` see the settings and every
    claim; a second repro is a no-op; push / pull through the local remote restore the tables."""
    paper = "diffusion_convergence"  # numpy only: the fastest paper
    subprocess.run([sys.executable, "-m", "dvc", "remote", "modify", "--local", "local", "url",
                    str(tmp_path / "remote")], cwd=checkout, check=True, env=venv_env())

    def dvc(*args):
        proc = subprocess.run([sys.executable, "-m", "dvc", *args], cwd=checkout, env=venv_env(),
                              capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return proc.stdout + proc.stderr

    dvc("exp", "run", "-S", "config/config.yaml:scale=smoke", "-S", f"config/config.yaml:papers=[{paper}]")
    assert yaml.safe_load((checkout / "config" / "config.yaml").read_text())["scale"] == "smoke"
    assert re.search(r"config/config.yaml\s+scale\s+tiny\s+smoke", dvc("params", "diff"))
    metrics = json.loads((checkout / "metrics" / "claims.json").read_text())
    claims = json.loads((checkout / "results" / paper / "claims.json").read_text())["claims"]
    assert set(metrics) == {paper} and set(metrics[paper]) == {c["id"] for c in claims}
    assert all(m["verdict"] in (-1, 0, 1) for m in metrics[paper].values())
    assert claims[0]["id"] in dvc("metrics", "show")
    tables = {p: p.read_bytes() for p in checkout.glob("results/*/table.*")}
    assert len(tables) == 3

    mtimes = {p: p.stat().st_mtime_ns for p in checkout.glob("results/**/*") if p.is_file()}
    again = dvc("repro")
    assert "didn't change, skipping" in again and "Running stage" not in again, again
    assert {p: p.stat().st_mtime_ns for p in checkout.glob("results/**/*") if p.is_file()} == mtimes
    assert "up to date" in dvc("status")
    dvc("push")
    import shutil

    shutil.rmtree(checkout / "results")
    shutil.rmtree(checkout / ".dvc" / "cache")
    dvc("pull")
    assert {p: p.read_bytes() for p in checkout.glob("results/*/table.*")} == tables


def test_a_malformed_workflow_config_names_the_file_and_line(tmp_path):
    from conftest import copy_checkout

    repo = copy_checkout(tmp_path)
    (repo / "config" / "config.yaml").write_text("scale: tiny\npapers: [a\n")
    proc = snakemake(repo, "-n", "all", check=False)
    lines = [line for line in proc.stderr.splitlines() if "iclr26 config error" in line]
    assert proc.returncode != 0 and len(lines) == 1, proc.stderr[-2000:]
    assert "config/config.yaml line 3" in lines[0] and "not valid YAML" in lines[0]


def test_cli_help_describes_every_subcommand():
    proc = subprocess.run([sys.executable, "-m", "iclr26", "--help"], capture_output=True, text=True, env=venv_env())
    listed = re.findall(r"^    (\w+)\s+(\S.*)$", proc.stdout, re.M)
    assert {name for name, _ in listed} >= {"acquire", "prepare", "train", "evaluate", "tabulate", "claims", "report",
                                             "config", "run"}, proc.stdout


def _readme_examples() -> list[str]:
    """The commands of the README's "Using it" block."""
    text = (REPO / "README.md").read_text().split("## Using it", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    return [line.split("  #")[0].strip() for line in text.splitlines()
            if line.strip() and not line.startswith((".", "#"))]


@pytest.mark.parametrize("example", _readme_examples())
def test_every_readme_example_runs_as_printed(example, dry, tmp_path):
    """Snakemake examples as dry runs (the Slurm one included), `dvc repro` as a dry run, the
    iclr26 commands for real; `dvc push && dvc pull` is exercised by the DVC test."""
    import shlex

    argv = shlex.split(example)
    if argv[0] == "snakemake":
        proc = snakemake(dry, *argv[1:], *([] if "-n" in argv else ["-n"]), check=False)
    elif argv[0] == "dvc":
        if argv[1] != "repro":
            pytest.skip("needs a remote: covered by test_dvc_exp_run_params_metrics_and_push_pull_in_a_fresh_clone")
        proc = subprocess.run([sys.executable, "-m", "dvc", "repro", "--dry"], cwd=dry, env=venv_env(),
                              capture_output=True, text=True, timeout=600)
    else:   # iclr26 commands for real, but a stability check (two seed sets' runs) as a dry run
        dry_run = ["-n"] if argv[1:4] == ["-m", "iclr26", "stability"] and "-n" not in argv else []
        proc = subprocess.run([sys.executable, *argv[1:], *dry_run], cwd=dry if dry_run else tmp_path, env=venv_env(),
                              capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{example}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"


def test_an_unknown_paper_on_the_command_line_lists_the_papers():
    proc = subprocess.run([sys.executable, "-m", "iclr26", "config", "--paper", "nosuch"], capture_output=True,
                          text=True, env=venv_env())
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "unknown paper 'nosuch'; implemented: " + ", ".join(sorted(all_papers())) in proc.stderr


def test_each_papers_env_holds_what_its_code_imports():
    """`--sdm conda` gives each rule its paper's env: every third-party package the paper's modules
    import (anywhere in them), and the core modules they and the job runner import at module level,
    must be pinned there (the preflight's static scan, core.preflight.env_missing_imports)."""
    from iclr26.core.config import compose_job_config
    from iclr26.core.preflight import env_missing_imports, third_party_imports

    for slug, paper in all_papers().items():
        cfg = compose_job_config(slug, "tiny")
        missing = env_missing_imports(paper, cfg)
        assert not missing, f"{slug}: envs/{cfg.get('conda_env', 'pipeline')}.yaml lacks {missing}"
    assert "torch" in third_party_imports(all_papers()["scorer"])  # the scan sees imports inside functions
