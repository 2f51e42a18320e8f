"""The hostile tester's defects (../shared/audits/2026-12-02/reliability.md), each reproduced:
reuse across configs, tampered completion files, the compose cache, stale folders, provenance, the
command line and the summaries of a subset run. The vehicle is diffusion_convergence (numpy only:
seconds at smoke scale); the end-to-end reruns through Snakemake are at the bottom (slow)."""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from conftest import venv_env
from iclr26.core.config import compose_job_config
from iclr26.core.errors import ConfigError, DataError
from iclr26.core.io import read_json, write_json
from iclr26.core.job import load_records, run_paper, run_stage

PAPER = "diffusion_convergence"


@pytest.fixture
def finished(workdir):
    return workdir, run_paper(PAPER, "smoke")


def _records(evals):
    return load_records(evals)


# ----------------------------------------------------------------------------- reuse across configs
def test_run_with_an_override_on_a_finished_tree_reruns_under_the_new_config(finished, tmp_path_factory,
                                                                                monkeypatch):
    """Audit R14: `run --override` ran 0 stages and put the new config beside the old records."""
    workdir, evals = finished
    default = _records(evals)
    changed = _records(run_paper(PAPER, "smoke", overrides=["train.refine=1"]))
    fresh_dir = tmp_path_factory.mktemp("fresh")
    monkeypatch.chdir(fresh_dir)
    fresh = _records(run_paper(PAPER, "smoke", overrides=["train.refine=1"]))
    assert changed != default and changed == fresh


def test_evaluate_refuses_a_train_output_made_under_another_config(finished):
    """Audit R15: a train run by hand with another config was evaluated under the workflow's."""
    workdir, evals = finished
    block = evals[0].parent
    method, seeds = block.parent.name, block.name
    run_stage("train", PAPER, "smoke", ["eval.path_kl.samples=100"], method=method, seed_block=seeds)
    with pytest.raises(DataError) as err:
        run_stage("evaluate", PAPER, "smoke", method=method, seed_block=seeds)
    message = str(err.value)
    assert "\n" not in message and "made under another config (config key 'eval.path_kl.samples'" in message
    assert not (block / "metrics.json").exists()  # so that the same command retrains


def test_saved_units_are_redone_after_a_change_of_the_shared_code(tmp_path, monkeypatch):
    """Audit R8: `--forcerun` after an edit of src/iclr26/core reused every saved unit."""
    from iclr26.core import job as job_module
    from iclr26.core.paper import get_paper

    job = job_module.Job(paper=get_paper(PAPER), cfg=compose_job_config(PAPER, "smoke"), stage="train",
                         out_dir=tmp_path)
    calls = []
    job.units(["a"], lambda key: calls.append(key) or {"x": 1})
    job.units(["a"], lambda key: calls.append(key) or {"x": 1})
    assert calls == ["a"]  # reused under the same code
    monkeypatch.setattr(job_module, "core_digest", lambda: "edited-core")
    job.units(["a"], lambda key: calls.append(key) or {"x": 1})
    assert calls == ["a", "a"]  # redone under the edited code


def test_a_hand_edited_eval_file_is_refused_with_one_line(finished):
    """Audit H4: a valid-JSON edit of eval.json was tabulated without a word."""
    _, evals = finished
    payload = read_json(evals[0])
    payload["records"][0][next(k for k, v in payload["records"][0].items() if isinstance(v, float))] = 499.0
    write_json(evals[0], payload)
    with pytest.raises(DataError, match=r"was edited after the evaluate job wrote it .*removed"):
        load_records(evals)
    assert not evals[0].exists()


def test_a_corrupt_raw_manifest_removes_what_was_made_from_it_so_the_same_command_remakes_all(finished):
    """Audit H2: the removed manifest's downstream outputs stayed, so Snakemake did nothing."""
    workdir, evals = finished
    raw = next(workdir.glob(f"data/smoke/{PAPER}/raw/*/manifest.json"))
    dataset = raw.parent.name
    raw.write_text('{"files": {"x": ')
    with pytest.raises(DataError, match=r"is unreadable; removed .* and the \d+ completion file\(s\) made from it"):
        run_stage("prepare", PAPER, "smoke", dataset=dataset)
    prepared = workdir / f"data/smoke/{PAPER}/prepared/{dataset}/manifest.json"
    assert not raw.exists() and not prepared.exists() and not any(e.exists() for e in evals)


def test_files_of_an_earlier_config_leave_the_folder_before_its_manifest_is_written(finished):
    """Audit H13: grids of an earlier config stayed in the folder and entered the new manifest."""
    workdir, _ = finished
    folder = next(workdir.glob(f"data/smoke/{PAPER}/prepared/*/"))
    before = set(read_json(folder / "manifest.json")["files"])
    (folder / "grid_n99999.npz").write_bytes(b"left by another config")
    for overrides in ([f"data.{folder.name}.grid.n=1024"], []):
        for stage in ("acquire", "prepare"):
            run_stage(stage, PAPER, "smoke", overrides, dataset=folder.name)
    assert set(read_json(folder / "manifest.json")["files"]) == before
    assert not (folder / "grid_n99999.npz").exists()


def test_one_datasets_change_is_not_seen_by_another_datasets_jobs():
    """Audit R4: a change of one dataset's `data` reran every dataset's jobs."""
    from iclr26.core.config import job_view, view_digest
    from iclr26.core.paper import get_paper

    paper = get_paper(PAPER)
    default = compose_job_config(PAPER, "smoke")
    changed = compose_job_config(PAPER, "smoke", ("data.atoms_1d.grid.n=1024",))
    digest = lambda cfg, d: view_digest(job_view(paper, cfg, "prepare", d), paper.source_digest())  # noqa: E731
    assert digest(default, "triangle_2d") == digest(changed, "triangle_2d")
    assert digest(default, "atoms_1d") != digest(changed, "atoms_1d")
    with pytest.raises(ConfigError, match="reads config key 'atoms_1d', which it does not declare"):
        job_view(paper, default, "prepare", "triangle_2d")["data"]["atoms_1d"]


def test_no_job_reads_the_seed_list_unless_its_paper_declares_it():
    """Audit R9: adding a seed reran the data stages and the unchanged seed blocks."""
    from iclr26.core.config import job_view, view_digest
    from iclr26.core.paper import get_paper

    paper = get_paper(PAPER)
    two, three = compose_job_config(PAPER, "smoke", (), [0, 1]), compose_job_config(PAPER, "smoke", (), [0, 1, 2])
    for stage in ("acquire", "train", "evaluate"):
        dataset = paper.datasets[0] if stage == "acquire" else None
        views = [job_view(paper, cfg, stage, dataset) for cfg in (two, three)]
        assert view_digest(views[0], "") == view_digest(views[1], "")
        with pytest.raises(ConfigError, match="reads config key 'seeds'.*seed_list_stages"):
            job_view(paper, two, stage, dataset)["seeds"]


# ----------------------------------------------------------------------------- validation
@pytest.mark.parametrize("overrides,seeds,needle", [
    (("slug=scorer",), None, "'slug' is who the job is"),
    (("scale=tiny",), None, "'scale' is who the job is"),
    (("seeds=[0,0]",), None, "seed 0 is listed twice"),
    (("seeds=[-1]",), None, "seed -1 is not allowed"),
    ((), [2**40], "is not allowed; allowed: integers from 0 to 2147483647"),
])
def test_identity_keys_and_bad_seeds_are_refused_when_composed(overrides, seeds, needle):
    with pytest.raises(ConfigError, match=re.escape(needle)):
        compose_job_config(PAPER, "smoke", overrides, seeds)


def test_a_yaml_key_given_twice_is_an_error(tmp_path):
    from iclr26.core.config import read_yaml_file

    path = tmp_path / "c.yaml"
    path.write_text("scale: smoke\npapers: []\nscale: tiny\n")
    with pytest.raises(ConfigError, match=r"c.yaml line \d+, column \d+: not valid YAML \(key 'scale' is given tw"):
        read_yaml_file(path)


# ----------------------------------------------------------------------------- the compose cache
def test_the_compose_cache_follows_environment_variables_and_refuses_edited_entries(monkeypatch):
    """Audit H10, H11: an env var read by ${oc.env:...} and a hand-edited cache entry."""
    from iclr26.core import config

    def manual_dir():
        config._compose.cache_clear()
        return compose_job_config("andor_template", "full")["data"]["layouts"]["manual_dir"]

    monkeypatch.setenv("ICLR26_AVA_DIR", "/data/ava_A")
    assert manual_dir() == "/data/ava_A"
    monkeypatch.setenv("ICLR26_AVA_DIR", "/data/ava_B")
    assert manual_dir() == "/data/ava_B"
    entry = config.COMPOSE_CACHE / f"{config._compose_key('andor_template', 'full', ())}.yaml"
    entry.write_text(entry.read_text().replace("/data/ava_B", "/data/ava_EDITED"))
    assert manual_dir() == "/data/ava_B"


# ----------------------------------------------------------------------------- provenance
def test_an_untracked_file_marks_the_commit_dirty(tmp_path, monkeypatch):
    """Audit P3: a new module changed the code digest and the commit was recorded clean."""
    from iclr26.core import provenance

    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "a.py").write_text("x = 1\n")
    subprocess.run([*git, "add", "-A"], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-qm", "c"], cwd=tmp_path, check=True)
    monkeypatch.setattr(provenance, "REPO_ROOT", tmp_path)
    provenance.git_commit.cache_clear()
    assert not provenance.git_commit().endswith("+dirty")
    (tmp_path / "extra.py").write_text("y = 2\n")
    provenance.git_commit.cache_clear()
    assert provenance.git_commit().endswith("+dirty")
    provenance.git_commit.cache_clear()


def test_every_completion_file_records_the_digests_that_decide_its_reuse(finished):
    workdir, evals = finished
    for done in [*workdir.glob("data/smoke/*/*/*/manifest.json"), *evals]:
        payload = read_json(done)
        assert payload["config_digest"] == payload["provenance"]["config_digest"]
        assert set(payload["provenance"]["code"]) == {"paper", "core"} and payload["provenance"]["work_digest"]


# ----------------------------------------------------------------------------- the command line
def _cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "iclr26", *args], cwd=cwd, env=venv_env(), capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("args,needle", [
    (["config", "--paper", PAPER, "--scale", "smoke", "--seed-list", "a,b"], "--seed-list 'a,b': expected"),
    (["train", "--paper", PAPER, "--scale", "smoke", "--method", "ei_sde", "--seeds", "s0-x"], "--seeds 's0-x'"),
    (["train", "--paper", PAPER, "--scale", "smoke", "--method", "ei_sde", "--seeds", "../../../../escape"],
     "--seeds '../../../../escape'"),
])
def test_bad_seeds_on_the_command_line_are_one_line_and_create_nothing(args, needle, tmp_path):
    cwd = tmp_path / "a" / "b" / "c" / "d"
    cwd.mkdir(parents=True)
    proc = _cli(*args, cwd=cwd)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and needle in proc.stderr
    assert not (tmp_path / "escape").exists() and not (cwd / "runs").exists()


def test_a_full_disk_is_one_line(monkeypatch, capsys):
    import errno

    from iclr26 import __main__ as cli
    from iclr26.core import job

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", "runs/x/checkpoint.pt")

    monkeypatch.setattr(job, "run_stage", full)
    assert cli.main(["train", "--paper", PAPER, "--scale", "smoke", "--method", "ei_sde", "--seeds", "s0-1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "No space left on device" in err and "runs/x/checkpoint.pt" in err


# ----------------------------------------------------------------------------- summaries of a subset run
def test_a_subset_run_keeps_every_other_paper_in_the_summaries_marked_not_rerun(tmp_path):
    """Audit P4: a run of some papers rewrote claims.md and the report with that subset only."""
    from iclr26.core.claims import write_claims_summary

    results = tmp_path / "results"
    for paper in ("alpha", "beta"):
        write_json(results / paper / "claims.json", {
            "paper": paper, "scale": "smoke", "claims": [], "provenance": {"created_utc": "2026-12-01T00:00:00+00:00",
                                                                            "git_commit": "abc"}})
    out = write_claims_summary([results / "alpha" / "claims.json"], results / "claims.md", results_dir=results)
    text = out.read_text()
    assert "- beta: not rerun by this run: tabulated 2026-12-01" in text and "- alpha" not in text


# ----------------------------------------------------------------------------- through Snakemake (slow)
def _snakemake(repo, *args):
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "2", *args], cwd=repo, env=venv_env(),
                          capture_output=True, text=True, timeout=900)
    return proc, proc.stdout + proc.stderr


def _planned(repo, *config):
    """The jobs a run would do: {rule: count}."""
    proc, out = _snakemake(repo, "-n", "all", "--config", *config)
    assert proc.returncode == 0, out[-3000:]
    if "Nothing to be done" in out:
        return {}
    stats = out.split("Job stats:")[1].split("Reasons:")[0]
    return {rule: int(n) for rule, n in re.findall(r"^(\w+)\s+(\d+)$", stats, re.M) if rule != "total"}


@pytest.mark.slow
def test_reruns_do_what_changed_and_only_that(checkout):
    """Audit R9-R11, H2, H4 through the workflow: a restated default reruns nothing; an added seed
    reruns only its own jobs; a corrupt manifest or an edited eval.json is remade by the same command."""
    smoke = ("scale=smoke", f"papers=[{PAPER}]")
    proc, out = _snakemake(checkout, "all", "--config", *smoke)
    assert proc.returncode == 0, out[-3000:]
    seeds = compose_job_config(PAPER, "smoke")["seeds"]
    assert _planned(checkout, *smoke, f"seeds=[{','.join(map(str, seeds))}]") == {}
    assert _planned(checkout, *smoke, f"overrides=[{PAPER}:train.refine=2]") == {}
    more = _planned(checkout, *smoke, f"seeds=[{','.join(map(str, [*seeds, 7]))}]")
    assert "acquire" not in more and "prepare" not in more and more["train"] == more["evaluate"] >= 1

    eval_file = next(checkout.glob(f"runs/smoke/{PAPER}/*/*/eval.json"))
    payload = json.loads(eval_file.read_text())
    payload["records"][0]["seed"] = 99
    eval_file.write_text(json.dumps(payload))
    proc, out = _snakemake(checkout, "all", "--config", *smoke)
    assert proc.returncode != 0 and "was edited after the evaluate job wrote it" in out
    proc, out = _snakemake(checkout, "all", "--config", *smoke)
    assert proc.returncode == 0, out[-3000:]

    raw = next(checkout.glob(f"data/smoke/{PAPER}/raw/*/manifest.json"))
    raw.write_text('{"files": {"x": ')  # newer than what prepare made from it: prepare reruns, and refuses it
    proc, out = _snakemake(checkout, "all", "--config", *smoke)
    assert proc.returncode != 0 and "rerun the same command" in out, out[-3000:]
    proc, out = _snakemake(checkout, "all", "--config", *smoke)
    assert proc.returncode == 0 and re.search(r"^acquire\s+1$", out, re.M), out[-3000:]  # the acquire job reran
