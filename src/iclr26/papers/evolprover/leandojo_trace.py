"""Tracing the seed corpus with LeanDojo (lean-dojo 4.20.0, pinned in envs/lean.yaml) at full scale:
the seed statements and their proofs, as a Lean repository, into theorems, tactics and the proof
states before and after each tactic, written in LeanDojo Benchmark's format.

The seed corpus (Lean-Workbook) is a JSON file, not a Lean repository, so the acquire job of the
seeds builds one (`seed_project`) and pins it by its git commit:
    1. MiniF2F-lean4 at its pinned commit (data.minif2f: the same git pin and tree as its own
       acquire) gives the toolchain (its `lean-toolchain`, which must equal the pinned
       `lean.toolchain`) and Mathlib's commit (its `lake-manifest.json`);
    2. elan and that toolchain are installed by this job into its own ELAN_HOME (`trace.home`,
       lean_tools.install: url + sha256 pins), so it never races MiniF2F's acquire over one home;
    3. a Lake project `EvolSeeds` (lakefile.lean requiring Mathlib at that commit, one default
       `lean_lib`) is built (`lake exe cache get`, `lake build`); every seed with a proof is checked
       by `lake env lean --json` in it (lean_tools.check_problems), and the first `trace.n_theorems`
       that Lean accepts are written as `EvolSeeds/<name>.lean` (the standard header + the theorem
       with its proof). A proof Lean rejects would fail `lake build` for the whole repository;
    4. the project is committed into a local git repository with fixed author, committer and
       dates (the same files give the same commit id), the id recorded in the manifest;
    5. `lean_dojo.trace(LeanGitRepo(<local path>, <commit>), build_deps=False)` in a child Python
       whose environment holds ELAN_HOME, PATH, CACHE_DIR (LeanDojo's cache of cloned and traced
       repositories, under the job's folder), DISABLE_REMOTE_CACHE (LeanDojo would otherwise try its
       remote cache of traced repositories first) and NUM_PROCS. LeanDojo reads these when it is
       imported, hence the child process; TMP_DIR keeps its working clone in the job's folder.
       LeanDojo clones the commit, runs `lake exe cache get` and
       `lake build`, then `lake env lean --run ExtractData.lean noDeps`. LeanDojo uses a local path
       as a git repository of type LOCAL, so the GitHub API is queried only for the Lean 4 commit
       of the toolchain (get_dependencies);
    6. every traced theorem of the repository becomes one row of `theorems.jsonl` in LeanDojo
       Benchmark's format (`benchmark_row`): url, commit, file_path, full_name,
       theorem_statement, start, end, traced_tactics [{tactic, annotated_tactic, state_before,
       state_after}].
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from iclr26.core.errors import DataError
from iclr26.core.io import read_jsonl, write_json, write_jsonl

LIB = "EvolSeeds"
MATHLIB_GIT = "https://github.com/leanprover-community/mathlib4"
# fixed identity and dates of the local commit: the same seed files give the same commit id
GIT_ENV = {"GIT_AUTHOR_NAME": "iclr26", "GIT_AUTHOR_EMAIL": "iclr26@localhost",
           "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
           "GIT_COMMITTER_NAME": "iclr26", "GIT_COMMITTER_EMAIL": "iclr26@localhost",
           "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z"}


# ----------------------------------------------------------------------------- the repository
def mathlib_rev(manifest: Path) -> str:
    """Mathlib's commit in a `lake-manifest.json` (packages[name == mathlib].rev)."""
    for pkg in json.loads(Path(manifest).read_text()).get("packages", []):
        if pkg.get("name") == "mathlib":
            return str(pkg["rev"])
    raise DataError(f"{manifest}: no mathlib package")


def lakefile(rev: str) -> str:
    """A Lake project requiring Mathlib at `rev`, its one library built by `lake build`."""
    return ("import Lake\nopen Lake DSL\n\npackage «evolseeds» where\n\n"
            f'require mathlib from git "{MATHLIB_GIT}" @ "{rev}"\n\n@[default_target]\nlean_lib {LIB} where\n')


def theorem_file(header: str, statement: str, proof: str, name: str) -> str:
    """One seed: the header, then its theorem (named `name`) with the proof's tactic block."""
    from . import lean_tools

    text, _ = lean_tools.proof_file(header, lean_tools._statement(statement), [proof], name)
    # proof_file names the theorem <name>_p0 and adds `#print axioms`: the traced file keeps the name
    lines = [ln for ln in text.split("\n") if not ln.startswith("#print axioms")]
    return "\n".join(lines).replace(f"{name}_p0", name).rstrip() + "\n"


def seed_project(dest: Path, toolchain: str, rev: str, seeds: list[dict], header: str) -> list[str]:
    """Write the Lake project: lean-toolchain, lakefile.lean, EvolSeeds/<name>.lean per seed
    ({name, lean, proof}) and the library root EvolSeeds.lean importing them. Returns the names."""
    from . import lean_tools

    dest = Path(dest)
    (dest / LIB).mkdir(parents=True, exist_ok=True)
    (dest / "lean-toolchain").write_text(toolchain.strip() + "\n")
    (dest / "lakefile.lean").write_text(lakefile(rev))
    (dest / ".gitignore").write_text(".lake\n")
    names = []
    for s in seeds:
        name = lean_tools._safe(s["name"])
        (dest / LIB / f"{name}.lean").write_text(theorem_file(header, s["lean"], s["proof"], name))
        names.append(name)
    (dest / f"{LIB}.lean").write_text("".join(f"import {LIB}.{n}\n" for n in names))
    return names


def commit(repo: Path) -> str:
    """Commit every file of `repo` (git init if needed) with the fixed identity; returns the id."""
    env = {**os.environ, **GIT_ENV}
    run = lambda *a: subprocess.run(["git", "-c", "commit.gpgsign=false", *a], cwd=repo, env=env,  # noqa: E731
                                    check=True, capture_output=True, text=True).stdout.strip()
    if not (Path(repo) / ".git").exists():
        run("init", "-q")
    run("add", "-A")
    run("commit", "-q", "--allow-empty", "-m", "the seed corpus as a Lean repository (iclr26, card 13)")
    return run("rev-parse", "HEAD")


# ----------------------------------------------------------------------------- tracing
def trace_env(home: Path, cache_dir: Path, num_procs: int) -> dict:
    """The child's environment: the Lean toolchain first on PATH, LeanDojo's cache and processes."""
    from . import lean_tools

    env = lean_tools.environ(Path(home))
    tmp = Path(cache_dir).absolute() / "tmp"   # LeanDojo's working clones (TMP_DIR), beside its cache
    tmp.mkdir(parents=True, exist_ok=True)
    env.update({"CACHE_DIR": str(Path(cache_dir).absolute()), "DISABLE_REMOTE_CACHE": "1",
                "NUM_PROCS": str(int(num_procs)), "TMP_DIR": str(tmp)})
    return env


def trace(repo: Path, commit_id: str, home: Path, cache_dir: Path, out: Path, num_procs: int = 1,
          timeout: float | None = None) -> list[dict]:
    """LeanDojo traces the local repository at `commit_id` (in a child process: LeanDojo reads its
    environment variables on import); the traced theorems are written to `out` and returned."""
    cmd = [sys.executable, "-m", "iclr26.papers.evolprover.leandojo_trace", str(Path(repo).absolute()), commit_id,
           str(Path(out).absolute())]
    try:
        done = subprocess.run(cmd, env=trace_env(home, cache_dir, num_procs), capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        raise DataError(f"lean-dojo tracing of {repo} at {commit_id} ran past {timeout} s") from None
    if done.returncode != 0:
        lines = [ln for ln in (done.stderr or done.stdout or "").strip().splitlines() if ln.strip()]
        stop = [ln for ln in lines if ln.startswith("lean-dojo stopped")]
        raise DataError((stop or lines[-1:] or ["lean-dojo tracing failed (no output)"])[-1])
    return read_jsonl(Path(out))


def benchmark_row(url: str, commit_id: str, thm) -> dict:
    """One traced theorem (lean_dojo.TracedTheorem) in LeanDojo Benchmark's format."""
    tactics = []
    for t in thm.get_traced_tactics():
        annotated, provenances = t.get_annotated_tactic()
        tactics.append({"tactic": t.tactic, "annotated_tactic": [annotated, provenances],
                        "state_before": t.state_before, "state_after": t.state_after})
    return {"url": url, "commit": commit_id, "file_path": str(thm.file_path), "full_name": thm.theorem.full_name,
            "theorem_statement": thm.get_theorem_statement(), "start": list(thm.start), "end": list(thm.end),
            "traced_tactics": tactics}


def _child(repo: str, commit_id: str, out: str) -> int:
    """The child process: LeanDojo's own API, from the repository object to the traced theorems."""
    from lean_dojo import LeanGitRepo
    from lean_dojo import trace as dojo_trace

    try:
        repo_obj = LeanGitRepo(repo, commit_id)
        traced = dojo_trace(repo_obj, build_deps=False)
    except subprocess.CalledProcessError as err:   # LeanDojo runs lake through a shell (utils.execute)
        print(f"lean-dojo stopped at `{err.cmd}` (exit {err.returncode}) in its clone of {repo} at {commit_id}",
              file=sys.stderr)
        return 2
    rows = [benchmark_row(repo_obj.url, repo_obj.commit, t) for t in traced.get_traced_theorems()
            if Path(t.file_path).parts[:1] == (LIB,)]   # the seeds' files (no dependency is traced)
    write_jsonl(Path(out), rows)
    return 0


# ----------------------------------------------------------------------------- the acquire step
def trace_seed_corpus(cfg: dict, spec: dict, out_dir: Path, log=print, runner=subprocess.run) -> dict:
    """Steps 1-6 above, on the seeds' acquire node (network: git, elan, the toolchain, Mathlib's
    cache, LeanDojo's query of the Lean 4 commit). `runner` runs our own Lake and Lean commands (step 3;
    lean-dojo runs its own).

    Steps 1-4 build the seeds' Lake project that prepare's LLM evolutions are checked in: their failure
    stops the job. Steps 5-6 (lean-dojo's trace, out_dir/leandojo/theorems.jsonl) are an optional
    product that neither prepare nor train reads (audit M1): unless `trace.required` is true, their
    failure is recorded (the manifest's `leandojo.traced: false` and its `error`, and
    leandojo/status.json, which the seeds' prepare reports in its own manifest and log) and the job
    goes on."""
    from . import data, lean_tools

    tr = spec["trace"]
    lean = {**cfg["lean"], **cfg["data"]["minif2f"]["lean"], "home": tr["home"]}
    work = Path(out_dir) / "leandojo"
    template = work / "minif2f"
    data.git_checkout({**cfg["data"]["minif2f"], "lean_project": True}, template, log)
    toolchain = lean_tools.project_toolchain(template / "project", lean)
    rev = mathlib_rev(template / "project" / "lake-manifest.json")
    home = Path(tr["home"])
    info = lean_tools.install(lean, home, home / "downloads", log)
    repo = work / "repo"
    seed_project(repo, toolchain, rev, [], lean["header"])
    lean_tools.build_project(repo, home, log, runner)   # Mathlib's cache, then the (empty) library
    rows = [{**r, "proof": data.tactic_block(r["proof"], r["name"])}
            for r in data.read_problems("seeds", spec, Path(out_dir)) if r.get("proof")]
    rows = [r for r in rows if r["proof"]][: tr.get("n_candidates") or None]
    ok = lean_tools.check_problems([{"name": r["name"], "lean": r["lean"], "proofs": [r["proof"]]} for r in rows],
                                   repo, home, work / "check", lean["header"],
                                   tr.get("workers", 1), lean.get("timeout_s", 600), runner=runner)
    accepted = [r for r, v in zip(rows, ok) if v and v[0]][: tr["n_theorems"]]
    log(f"Lean accepted {len(accepted)} of {len(rows)} seed proofs checked (kept up to {tr['n_theorems']})")
    seed_project(repo, toolchain, rev, accepted, lean["header"])
    commit_id = commit(repo)
    out = {"commit": commit_id, "toolchain": toolchain, "mathlib": rev, "checked": len(rows),
           "accepted": len(accepted), "elan_sha256": info["elan_sha256"], "archive_sha256": info["archive_sha256"]}
    try:
        traced = trace(repo, commit_id, home, work / "cache", work / "theorems.jsonl", tr.get("num_procs", 1))
    except DataError as err:
        if tr.get("required"):
            raise
        status = {"traced": False, "error": str(err)}
        log(f"lean-dojo tracing failed, recorded and not required (data.seeds.trace.required: false; nothing "
            f"downstream reads theorems.jsonl): {err}")
    else:
        n_tactics = sum(len(r["traced_tactics"]) for r in traced)
        status = {"traced": True, "theorems": len(traced), "tactics": n_tactics}
        log(f"lean-dojo traced {len(traced)} theorems ({n_tactics} tactics) of {repo} at {commit_id[:12]}")
    write_json(work / "status.json", status)
    return {**out, **status}


def _tactics(proof: str) -> str | None:
    """A seed's proof as a tactic block (data.tactic_block: Lean-Workbook stores the whole `theorem ... := by ...`)."""
    from . import data

    return data.tactic_block(proof)


if __name__ == "__main__":
    raise SystemExit(_child(*sys.argv[1:4]))
