#!/usr/bin/env python3
"""Re-run every case of the 2026-12-02 reliability audit and judge each one automatically.

The audit (shared/audits/2026-12-02/reliability.md) tried 61 bad inputs (I1-I61), 13 corrupt or hostile
data cases (H1-H13), 19 faults (K1-K19), 15 reruns (R1-R15), 7 DVC checks (V1-V7) and 4 provenance
checks (P1-P4) by hand. This script repeats them with the audit's commands and prints its tables and
its totals in the audit's own form, so that the project can re-measure itself after each change:

    python scripts/hostile.py --repo .                          # every case: ~40 min on 2 idle cores
    python scripts/hostile.py --repo . --only I,K18 --json out.json
    python scripts/hostile.py --repo /work/main --workdir /tmp/hostile --keep

How it runs, and why:
- Every case gets a fresh `git clone` of the HEAD commit of --repo (its committed tree: no data, runs or
  results, no local edits), in <workdir>/<case>/repo, and runs from the clone's root with the venv's
  bin first on PATH and PYTHONPATH=<clone>/src, as the audit did. The clone's parent holds nothing
  else, so "nothing created outside the clone" is a listing of that folder (I54's escape).
- A case that starts "on a complete tree" starts from a copy of the outputs of one reference run,
  `snakemake --cores 2 all S3` (mtimes kept, so Snakemake sees it finished), made once per
  invocation. Faults start from a wiped tree (a fresh clone) and are compared with that reference.
- "Identical" is the audit's comparison (`fingerprint`): every file under results/<paper>/ and
  results/claims.md, the `records` of every runs/**/eval.json and the `files` of every
  data/**/manifest.json; claims.json without its provenance block; provenance.json and report.html
  left out (they carry timestamps).
- Shorthands as in the audit: DC and S3 (below). Every command has a timeout, every wait is bounded,
  cases run one after another on this machine only; nothing reaches the network.

Verdicts: ✓ as the audit expects; ~ partly (for bad inputs: refused, but not by one line naming the
cause); ✗ not; "skipped: why" when a case cannot be run here (a mount not permitted, a fault that
never fired, a change that no longer applies to the files); "note" for what the audit only noted (H12).
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

AUDIT = "shared/audits/2026-12-02/reliability.md"
DC = "--config scale=smoke 'papers=[diffusion_convergence]'"
S3 = "--config scale=smoke 'papers=[diffusion_convergence,scorer,andor_template]'"
S3_PAPERS = ("diffusion_convergence", "scorer", "andor_template")
RUN_S3 = "snakemake --cores 2 all S3"
SCORER = "--config scale=smoke 'papers=[scorer]'"
LDAR = "--config scale=smoke 'papers=[ldar]'"
# what a run leaves in the checkout: copied (mtimes kept) to start a case "on a complete tree"
OUTPUT_DIRS = ("data", "runs", "results", "logs", "benchmarks", "metrics", ".snakemake", ".cache")

# timeouts (s). Generous: the audit's 51 s reference run took 4-5 min on a loaded 2-core machine.
T_CLI, T_DRY, T_RUN = 300, 300, 1800
GRACE = 15.0          # how long a job may outlive its killed Snakemake before it counts as an orphan
SIGTERM_GRACE = 20.0  # how long a train job may take to checkpoint and stop after SIGTERM (K18)

JOB_LINE = re.compile(r"^\s*(?:local)?rule \w+:$|^\[[\w-]+/\w+/[\w.-]+\] start|^Job \d+: ")
# a rule with a `message:` (acquire) is shown by its message instead of a `rule X:` block
MESSAGE_JOB = re.compile(r"^Job \d+: (\w+) ([\w-]+)/([\w.-]+) \((\w+)\)")
ERROR_LINE = re.compile(r"^iclr26\b.*\berror: ")
EXCEPTION_LINE = re.compile(r"^(?:[\w.]+\.)?\w*(?:Error|Exception|Exit|Interrupt)\b(?::|$)")
CHATTER = re.compile(r"^(?:Using workflow specific profile|Config file .* is extended by additional config"
                     r"|Building DAG of jobs|Assuming unrestricted shared filesystem|[Hh]ost: )")
SUMMARY_RULES = {"claims", "report", "all"}


class Skip(Exception):
    """The case cannot be run here; the message says why."""


@dataclass
class Outcome:
    verdict: str          # ✓ ~ ✗ note skipped
    observed: str
    category: str = ""    # how the totals count it (bad inputs, faults)


@dataclass
class Result:
    id: str
    section: str
    what: str
    command: str
    expected: str
    verdict: str = "skipped"
    observed: str = ""
    category: str = ""
    wall_s: float = 0.0
    cpu_s: float = 0.0    # CPU time of the case's processes: what the wall time would be near on idle cores x2


@dataclass
class Case:
    id: str
    section: str          # I H K R V P
    what: str
    command: str          # as printed in the table (with the audit's shorthands)
    expected: str
    check: Callable[[Lab, Case], Outcome]
    data: dict = field(default_factory=dict)


def expand(cmd: str) -> str:
    """The audit's shorthands DC and S3, as words of a shell command."""
    return re.sub(r"(?<= )(DC|S3)(?= |$)", lambda m: {"DC": DC, "S3": S3}[m.group(1)], cmd)


# ============================================================================= running commands
@dataclass
class Proc:
    cmd: str
    rc: int
    out: str
    wall: float
    timed_out: bool = False


def procs_in(folder: Path) -> dict[int, list[str]]:
    """Processes whose working directory is in `folder` (Linux /proc): pid -> argv."""
    root, found = str(folder.resolve()), {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cwd = os.readlink(entry / "cwd")
            argv = [a.decode(errors="replace") for a in (entry / "cmdline").read_bytes().split(b"\0") if a]
        except OSError:  # gone meanwhile, or a zombie
            continue
        if argv and (cwd == root or cwd.startswith(root + "/")):
            found[int(entry.name)] = argv
    return found


def wait_gone(folder: Path, timeout: float) -> dict[int, list[str]]:
    """Wait (bounded) until no process works in `folder`; what is still there."""
    deadline = time.monotonic() + timeout
    while (left := procs_in(folder)) and time.monotonic() < deadline:
        time.sleep(0.25)
    return left


def kill_all(folder: Path) -> None:
    """SIGKILL what this harness started in `folder` (found by working directory, pid by pid)."""
    for pid in procs_in(folder):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def describe(procs: dict[int, list[str]]) -> str:
    return ", ".join(f"{pid} ({' '.join(argv)[:70]})" for pid, argv in list(procs.items())[:3])


def is_snakemake(argv: list[str]) -> bool:
    names = [Path(a).name for a in argv[:3]]
    return bool(names) and (names[0] == "snakemake" or (names[0].startswith("python") and "snakemake" in names[1:3]))


def job_pid(folder: Path, stage: str, paper: str, method: str | None = None) -> int | None:
    """The python process of a running job (`python -m iclr26 <stage> --paper P --method M ...`)."""
    for pid, argv in procs_in(folder).items():
        if Path(argv[0]).name.startswith("python") and "iclr26" in argv and stage in argv and paper in argv \
                and (method is None or method in argv):
            return pid
    return None


class Live:
    """A command whose output is read as it comes, so that a fault can be sent when a line appears."""

    def __init__(self, cmd: str, cwd: Path, env: dict):
        self.cmd, self.cwd, self.lines, self.started = cmd, cwd, [], time.monotonic()
        self.p = subprocess.Popen(["bash", "-c", cmd], cwd=cwd, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, errors="replace", start_new_session=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.p.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, pattern: str, timeout: float) -> bool:
        """True once a line matches `pattern`; False if the command ends or `timeout` passes first."""
        regex, seen, deadline = re.compile(pattern), 0, time.monotonic() + timeout
        while time.monotonic() < deadline:
            lines = self.lines[seen:]
            if any(regex.search(line) for line in lines):
                return True
            seen += len(lines)
            if self.p.poll() is not None and not self._reader.is_alive() and seen == len(self.lines):
                return False
            time.sleep(0.05)
        return False

    def wait(self, timeout: float) -> Proc:
        """The command's end (not its pipe's: an orphaned job may hold that open); killed on timeout."""
        timed_out = False
        try:
            self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            with contextlib.suppress(OSError):
                os.killpg(self.p.pid, signal.SIGKILL)
            self.p.wait(30)
        self._reader.join(2)
        rc = 124 if timed_out else self.p.returncode
        return Proc(self.cmd, rc, "\n".join(self.lines), time.monotonic() - self.started, timed_out)

    def snakemake_pid(self) -> int | None:
        procs = procs_in(self.cwd)
        if self.p.pid in procs and is_snakemake(procs[self.p.pid]):
            return self.p.pid  # bash -c execs a lone command
        return next((pid for pid, argv in sorted(procs.items()) if is_snakemake(argv)), None)


# ============================================================================= the lab: clones, env, references
class Lab:
    def __init__(self, source: Path, workdir: Path, venv_bin: Path, keep: bool, reuse: bool = False):
        self.source, self.workdir, self.venv_bin, self.keep, self.reuse = source, workdir, venv_bin, keep, reuse
        self.commit = subprocess.run(["git", "-C", str(source), "rev-parse", "HEAD"], capture_output=True,
                                     text=True, check=True, timeout=30).stdout.strip()
        self._refs: dict[str, object] = {}
        self.ref_walls: dict[str, float] = {}   # seconds spent making each reference (not the cases')
        self.ref_total = 0.0
        self.dvc: dict | None = None            # the clone V1-V7 share, and their outcomes

    def env(self, repo: Path, extra: dict | None = None) -> dict:
        # nothing of this process's own ICLR26_* or Snakemake settings leaks into the runs
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("ICLR26_", "SNAKEMAKE", "VIRTUAL_ENV", "PYTHONPATH", "CONDA"))}
        env.update(PATH=f"{self.venv_bin}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
                   PYTHONPATH=str(repo / "src"), PYTHONUNBUFFERED="1", **(extra or {}))
        return env

    def clone(self, name: str, tree: Path | None = None) -> Path:
        """<workdir>/<name>/repo: a fresh clone of the commit; with `tree`, that run's outputs copied in."""
        case_dir = self.workdir / name
        self.discard(case_dir)
        case_dir.mkdir(parents=True)
        repo = case_dir / "repo"
        git = ["git", "-c", "advice.detachedHead=false"]
        subprocess.run([*git, "clone", "--quiet", str(self.source), str(repo)], check=True, timeout=120)
        subprocess.run([*git, "-C", str(repo), "checkout", "--quiet", "--detach", self.commit], check=True, timeout=60)
        for name_ in OUTPUT_DIRS if tree else ():
            if (tree / name_).exists():
                shutil.copytree(tree / name_, repo / name_, symlinks=True,
                                ignore=shutil.ignore_patterns("locks"))
        return repo

    def run(self, repo: Path, cmd: str, timeout: float = T_RUN, env: dict | None = None) -> Proc:
        start = time.monotonic()
        p = subprocess.Popen(["bash", "-c", cmd], cwd=repo, env=self.env(repo, env), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, errors="replace", start_new_session=True)
        try:
            out, _ = p.communicate(timeout=timeout)
            return Proc(cmd, p.returncode, out, time.monotonic() - start)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError):
                os.killpg(p.pid, signal.SIGKILL)
            try:
                out, _ = p.communicate(timeout=30)
            except subprocess.TimeoutExpired:  # a grandchild outside the group holds the pipe
                out = ""
            return Proc(cmd, 124, out or "", time.monotonic() - start, timed_out=True)

    def live(self, repo: Path, cmd: str, env: dict | None = None) -> Live:
        return Live(cmd, repo, self.env(repo, env))

    def python(self, repo: Path, code: str, *args: str, timeout: float = T_CLI) -> Proc:
        """A helper script of a case (planting a payload), run with the clone's code."""
        script = repo.parent / "helper.py"
        script.write_text(code)
        try:
            return self.run(repo, " ".join(["python", str(script), *map(shell_quote, args)]), timeout)
        finally:
            script.unlink(missing_ok=True)

    def discard(self, case_dir: Path) -> None:
        """Stop what runs there, unmount what a case mounted, remove the folder (inside the workdir only)."""
        if not case_dir.exists() or self.workdir not in case_dir.parents:
            return
        kill_all(case_dir)
        wait_gone(case_dir, 10)
        for mount in sorted(mounts_under(case_dir), reverse=True):
            subprocess.run(["umount", "-l", mount], capture_output=True, timeout=30)
        shutil.rmtree(case_dir, ignore_errors=True)

    # -- references, each made once per invocation (a failed one skips the cases that need it)
    def ref(self, name: str):
        if name not in self._refs:
            start, nested = time.monotonic(), self.ref_total
            kept = self.workdir / f"ref-{name}" / "made.json"   # a reference an earlier --keep run left
            try:
                if self.reuse and (made := read_json(kept)) and made.get("commit") == self.commit and \
                        Path(made.get("repo") or made["path"]).exists():
                    self._refs[name] = Tree(Path(made["repo"]), made["fp"]) if "fp" in made else Path(made["path"])
                else:
                    self._refs[name] = REFERENCES[name](self)
                    made = self._refs[name]
                    kept.write_text(json.dumps({"commit": self.commit, **(
                        {"repo": str(made.repo), "fp": made.fp} if isinstance(made, Tree) else {"path": str(made)})}))
            except Skip as err:
                self._refs[name] = err
            finally:  # its own time: a reference made inside it counts once, as its own
                own = time.monotonic() - start - (self.ref_total - nested)
                self.ref_walls[name] = round(own, 1)
                self.ref_total += own
                print(f"     reference {name}: {own:.0f} s", file=sys.stderr, flush=True)
        made = self._refs[name]
        if isinstance(made, Skip):
            raise Skip(f"reference '{name}' failed: {made}")
        return made


def shell_quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


def mounts_under(folder: Path) -> list[str]:
    root = str(folder.resolve())
    try:
        lines = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return []
    return [m for m in (line.split()[1] for line in lines) if m == root or m.startswith(root + "/")]


@dataclass
class Tree:
    """A finished run: its checkout and its fingerprint."""
    repo: Path
    fp: dict[str, str]
    proc: Proc | None = None


def reference_run(lab: Lab, name: str, cmd: str, papers=None, tree: Path | None = None) -> Tree:
    repo = lab.clone(f"ref-{name}", tree)
    p = lab.run(repo, expand(cmd), T_RUN)
    if p.rc != 0:
        raise Skip(f"`{cmd}` gave rc {p.rc}: {first_error(p.out)}")
    return Tree(repo, fingerprint(repo, papers), p)


def _ref_checkpoint(lab: Lab) -> Path:
    """A genuine scorer checkpoint: dqn s0-1 stopped by SIGTERM at its 2nd checkpoint (H5-H8)."""
    repo = lab.clone("ref-checkpoint", lab.ref("S3").repo)
    block = repo / "runs/smoke/scorer/dqn/s0-1"
    shutil.rmtree(block)  # its saved units would let the train finish without training (no checkpoint)
    p = lab.run(repo, "ICLR26_FAULT=train:checkpoint:2:term python -m iclr26 train --paper scorer --scale smoke "
                      "--method dqn --seeds s0-1", T_CLI)
    if not (block / "checkpoint.pt").is_file():
        raise Skip(f"the stopped train left no checkpoint.pt (rc {p.rc}: {first_error(p.out)})")
    return block


REFERENCES: dict[str, Callable[[Lab], object]] = {
    "S3": lambda lab: reference_run(lab, "S3", RUN_S3),
    "scorer-lr": lambda lab: reference_run(
        lab, "scorer-lr", f"snakemake --cores 2 all {SCORER} 'overrides=[\"scorer:train.lr=0.001\"]'", ("scorer",)),
    "dc-c": lambda lab: reference_run(
        lab, "dc-c", "snakemake --cores 2 all DC 'overrides=[\"diffusion_convergence:train.c=0.25\"]'",
        ("diffusion_convergence",)),
    "ldar": lambda lab: reference_run(lab, "ldar", f"snakemake --cores 2 all {LDAR}", ("ldar",)),
    # the data stages do not read train.epochs: this one starts from the default ldar run's tree
    "ldar-300": lambda lab: reference_run(
        lab, "ldar-300", f"snakemake --cores 2 all {LDAR} 'overrides=[\"ldar:train.epochs=300\"]'", ("ldar",),
        lab.ref("ldar").repo),
    "dc-refine1": lambda lab: reference_run(
        lab, "dc-refine1", "python -m iclr26 run --paper diffusion_convergence --scale smoke --override "
                           "train.refine=1", ("diffusion_convergence",)),
    "checkpoint": _ref_checkpoint,
}


# ============================================================================= reading outputs
def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def json_sha(obj) -> str:
    return sha(json.dumps(obj, sort_keys=True).encode())


def scrub(obj):
    """A JSON value without what carries timestamps or digests of provenance."""
    if isinstance(obj, dict):
        return {k: scrub(v) for k, v in obj.items() if k not in ("provenance", "created_utc")}
    if isinstance(obj, list):
        return [scrub(v) for v in obj]
    return obj


def read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def fingerprint(repo: Path, papers=None) -> dict[str, str]:
    """The audit's "identical": a sha256 per file a user reads (module docstring); `papers`: only theirs."""
    fp, results = {}, repo / "results"
    mine = (lambda paper: True) if papers is None else (lambda paper: paper in papers)
    for folder in sorted(p for p in results.glob("*") if p.is_dir() and mine(p.name)):
        for f in sorted(p for p in folder.rglob("*") if p.is_file() and p.name != "provenance.json"):
            rel = str(f.relative_to(repo))
            fp[rel] = json_sha(scrub(read_json(f))) if f.suffix == ".json" else sha(f.read_bytes())
    if papers is None and (results / "claims.md").is_file():
        fp["results/claims.md"] = sha((results / "claims.md").read_bytes())
    for pattern, key in (("runs/*/*/**/eval.json", "records"), ("data/*/*/**/manifest.json", "files")):
        for f in sorted(repo.glob(pattern)):
            rel = f.relative_to(repo)
            if mine(rel.parts[2]):
                payload = read_json(f)
                fp[f"{rel}:{key}"] = json_sha(payload.get(key)) if isinstance(payload, dict) else "<unreadable>"
    return fp


def compare(got: dict, want: dict) -> str:
    """'' when identical, else which files differ."""
    diff = sorted(k for k in got.keys() | want.keys() if got.get(k) != want.get(k))
    if not diff:
        return ""
    label = [f"{k}{' (missing)' if k not in got else ' (extra)' if k not in want else ''}" for k in diff[:3]]
    return f"{len(diff)} of {len(want)} files differ: {', '.join(label)}{' ...' if len(diff) > 3 else ''}"


def leftovers(repo: Path) -> list[str]:
    """What a finished run must not leave: processes, Snakemake locks and incomplete markers, temp files."""
    found = [f"process {describe({pid: argv})}" for pid, argv in procs_in(repo).items()]
    smk = repo / ".snakemake"
    found += [f"lock {p.name}" for p in (smk / "locks").glob("*")]
    found += [f"incomplete marker {p.name}" for p in (smk / "incomplete").rglob("*") if p.is_file()]
    found += [str(p.relative_to(repo)) for p in repo.rglob("*")
              if p.name.endswith((".tmp", ".part")) and ".git" not in p.relative_to(repo).parts and p.is_file()]
    return found


def cause_lines(out: str) -> list[str]:
    """The output without Snakemake's own chatter (profile, config merge, its banner, DAG building)."""
    lines, banner = [], False
    for line in out.splitlines():
        s = line.strip()
        if s == "SNAKEMAKE":
            banner = True
        elif banner:
            banner = bool(s)  # the banner ends at its first blank line
        elif s and not CHATTER.match(s):
            lines.append(s)
    return lines


def first_error(out: str) -> str:
    """The line that names the cause: an iclr26 error line, else a traceback's exception, else an error."""
    lines = cause_lines(out)
    for line in lines:
        if ERROR_LINE.match(line):
            return line
    if "Traceback" in out:  # the exception that ends the first traceback (its frames are indented)
        after = out.split("Traceback (most recent call last):", 1)[-1].splitlines()[1:]
        raised = next((line for line in after if line.strip() and not line[0].isspace()), "?")
        return "traceback: " + raised.strip()
    for line in lines:
        if re.search(r"error|exception|refus|not allowed|invalid|cannot", line, re.I):
            return line
    return lines[-1] if lines else "(no output)"


def error_naming(p: Proc, fragment: str) -> str | None:
    """The iclr26 error line of a run that names `fragment` (the job's one line, tee'd to the console)."""
    return next((s for s in cause_lines(p.out) if ERROR_LINE.match(s) and fragment in s), None)


def jobs_ran(p: Proc) -> Counter:
    """rule -> jobs a real run started (`rule X:` or `localrule X:` per job, or the rule's message)."""
    return Counter(j.rule for j in planned_jobs(p.out))


def jobs_note(p: Proc) -> str:
    if "snakemake" not in p.cmd:
        return "no Snakemake"
    planned = re.search(r"^total\s+(\d+)$", p.out, re.M)
    if "This was a dry-run" in p.out or (planned and "-n " in p.cmd):
        return f"{planned.group(1)} jobs planned" if planned else "nothing planned"
    ran = sum(jobs_ran(p).values())
    return "Nothing to be done" if "Nothing to be done" in p.out else f"{ran} jobs"


def edit(repo: Path, rel: str, old: str, new: str) -> None:
    """Replace the first `old` in a file of the clone; the case is skipped if it is not there any more."""
    path = repo / rel
    text = path.read_text()
    if old not in text:
        raise Skip(f"cannot make the change: {old!r} is not in {rel}")
    path.write_text(text.replace(old, new, 1))


def appender(rel: str, text: str) -> Callable[[Path], None]:
    def append(repo: Path) -> None:
        with (repo / rel).open("a") as handle:
            handle.write(text)
    return append


def need(path: Path) -> Path:
    if not path.exists():
        raise Skip(f"{path.name} is not where the audit found it ({path})")
    return path


# ============================================================================= 1. bad inputs
def judge_refusal(p: Proc, fragment: str, snakemake: bool) -> Outcome:
    """✓ refused before any job with one line naming `fragment`; ~ refused otherwise; ✗ not refused."""
    lines = cause_lines(p.out)
    if p.timed_out:
        return Outcome("✗", "timed out", "in_job")
    if p.rc == 0:
        return Outcome("✗", f"accepted (rc 0{', ' + jobs_note(p) if 'snakemake' in p.cmd else ''})", "accepted")
    if any(JOB_LINE.match(s) for s in lines):
        return Outcome("✗", f"refused only inside a job (rc {p.rc}): {first_error(p.out)}", "in_job")
    if "Traceback" in p.out and not snakemake:
        return Outcome("✗", f"rc {p.rc}, {first_error(p.out)}", "traceback")
    if len(lines) == 1 and ERROR_LINE.match(lines[0]) and fragment in lines[0]:
        return Outcome("✓", lines[0])
    return Outcome("~", f"refused (rc {p.rc}), not by one line naming {fragment!r}: {first_error(p.out)}", "unclear")


def check_bad_input(lab: Lab, case: Case) -> Outcome:
    repo = lab.clone(case.id)
    if case.data.get("setup"):
        case.data["setup"](repo)
    before = set(os.listdir(repo.parent))
    outcomes = []
    for cmd in case.data["commands"]:
        p = lab.run(repo, expand(cmd), T_RUN if " --cores " in cmd else T_DRY)
        if case.data.get("valid"):
            outcomes.append(Outcome("✓", f"accepted (rc 0{', ' + jobs_note(p) if 'snakemake' in p.cmd else ''})")
                            if p.rc == 0 else
                            Outcome("✗", f"refused: {first_error(p.out)}", "false_refusal"))
        else:
            outcome = judge_refusal(p, case.data["fragment"], cmd.startswith("snakemake"))
            if outcome.category == "accepted" and case.data.get("identity"):
                outcome.category = "identity"
            outcomes.append(outcome)
    outside = sorted(set(os.listdir(repo.parent)) - before)
    if outside:
        return Outcome("✗", f"created {', '.join(outside)} outside the clone; {outcomes[0].observed}", "outside")
    worst = max(outcomes, key=lambda o: "✓~✗".index(o.verdict))
    if len(outcomes) > 1:
        worst = Outcome(worst.verdict, "; ".join(f"cmd {i + 1}: {o.observed}" for i, o in enumerate(outcomes)),
                        worst.category)
    return worst


def config_file(content: str) -> Callable[[Path], None]:
    return lambda repo: (repo / "config/config.yaml").write_text(content)


def paper_yaml(old: str, new: str) -> Callable[[Path], None]:
    return lambda repo: edit(repo, "config/hydra/paper/diffusion_convergence.yaml", old, new)


N = "snakemake -n all DC"
TRAIN = "python -m iclr26 train --paper diffusion_convergence --scale smoke --method ei_sde"
CONF = "python -m iclr26 config --paper diffusion_convergence --scale smoke"
OV = "'overrides=[\"diffusion_convergence:{}\"]'"
# (id, input, command(s), fragment the one line must name, options). Options: setup (a change of the
# clone before the commands), valid (the input is allowed: accepted is ✓), identity (an identity key).
BAD_INPUTS = [
    ("I1", "wrong type", f"{N} scale=3", "'scale'", {}),
    ("I2", "case", f"{N} scale=Smoke", "'scale'", {}),
    ("I3", "unknown key", f"{N} sclae=tiny", "sclae", {}),
    ("I4", "string, not list", "snakemake -n all --config scale=smoke papers=diffusion_convergence", "'papers'", {}),
    ("I5", "unknown paper", f"{N} 'papers=[diffusion_convergenc]'", "diffusion_convergenc", {}),
    ("I6", "duplicate paper", f"{N} 'papers=[diffusion_convergence,diffusion_convergence]'", "papers", {}),
    ("I7", "unknown method", f"{N} 'methods={{diffusion_convergence: [ei_sdee]}}'", "ei_sdee", {}),
    ("I8", "unknown paper in `methods`", f"{N} 'methods={{diffusion_convergenc: [ei_sde]}}'",
     "diffusion_convergenc", {}),
    ("I9", "empty list", f"{N} 'methods={{diffusion_convergence: []}}'", "methods.diffusion_convergence", {}),
    ("I10", "duplicate method", "snakemake --cores 2 all --config scale=smoke 'papers=[andor_template]' "
     "'methods={andor_template: [mlp, mlp, template]}'", "mlp", {}),
    ("I11", "negative seed", f"{N} 'seeds=[-1]'", "seeds", {}),
    ("I12", "empty list", f"{N} 'seeds=[]'", "seeds", {}),
    ("I13", "huge seed", f"{N} 'seeds=[99999999999999999999]'", "seeds", {}),
    ("I14", "huge seed", f"snakemake --cores 2 all {SCORER} 'seeds=[12345678901234567890123,1]'", "seeds", {}),
    ("I15", "duplicate seed", "snakemake --cores 2 all --config scale=smoke 'papers=[andor_template]' 'seeds=[0,0]'",
     "seed", {}),
    ("I16", "duplicate seed, tiny", "snakemake -n all --config scale=tiny 'papers=[scorer]' 'seeds=[3,3,3,3,3,3,3,3]'",
     "seed", {}),
    ("I17", "float", f"{N} 'seeds=[1.5]'", "seeds", {}),
    ("I18", "string", f"{N} 'seeds=[a]'", "seeds", {}),
    ("I19", "scalar", f"{N} seeds=3", "seeds", {}),
    ("I20", "null (allowed by the schema)", [f"{N} seeds=null", f"{N} seeds=None"], "", {"valid": True}),
    ("I21", "override without `=`", f"{N} 'overrides=[train.sweeps]'", "overrides.0", {}),
    ("I22", "wrong type", f"{N} {OV.format('train.refine=abc')}", "train.refine", {}),
    ("I23", "nonexistent key", f"{N} {OV.format('train.nosuch=1')}", "train.nosuch", {}),
    ("I24", "global key missing from this paper", f"{N} 'overrides=[\"train.total_steps=5\"]'", "train.total_steps",
     {}),
    ("I25", "unknown paper prefix", f"{N} 'overrides=[\"diffusion_convergenc:train.refine=2\"]'",
     "diffusion_convergenc", {}),
    ("I26", "override for a paper that is not run", f"{N} 'overrides=[\"scorer:train.nosuch=2\"]'", "",
     {"valid": True}),
    ("I27", "out-of-range value", f"snakemake --cores 2 all DC {OV.format('train.refine=-3')}", "train.refine", {}),
    ("I28", "negative seeds via override", f"{N} {OV.format('seeds=[-1,-2]')}", "seed", {}),
    ("I29", "misspelled added key", f"{N} {OV.format('+train.refnie=2')}", "refnie", {}),
    ("I30", "Hydra delete, no `=`", f"{N} {OV.format('~train')}", "overrides", {}),
    ("I31", "Hydra delete", f"{N} {OV.format('~train=null')}", "train", {}),
    ("I32", "list to int", f"{N} {OV.format('seeds=5')}", "seeds", {}),
    ("I33", "bad interpolation", f"{N} {OV.format('train.refine=${nosuch}')}", "nosuch", {}),
    ("I34", "identity key `scale`", f"snakemake --cores 2 all DC {OV.format('scale=tiny')}", "'scale'",
     {"identity": True}),
    ("I35", "identity key `slug`", [f"{N} {OV.format('slug=scorer')}", f"{CONF} --override slug=scorer"], "'slug'",
     {"identity": True}),
    ("I36", "zero budget", f"snakemake --cores 2 all {SCORER} 'overrides=[\"scorer:train.total_steps=0\"]'",
     "total_steps", {}),
    # I37: the paper must be run for its override to be composed (I26); the audit's refusal names andor's dataset
    ("I37", "extra dataset", "snakemake -n all --config scale=smoke 'papers=[andor_template]' "
     "'overrides=[\"andor_template:+data.evil={n_images: 1}\"]'", "data.evil", {}),
    ("I38", "`../` in a dataset key", f"{N} 'overrides=[\"andor_template:+data.x/../../y=1\"]'", "overrides", {}),
    # config/config.yaml itself (no --config: the file is what is read)
    ("I39", "malformed YAML in `config/config.yaml` (unclosed `[`)", "snakemake -n all", "config.yaml",
     {"setup": config_file("scale: smoke\npapers: [diffusion_convergence\nseeds: null\n")}),
    ("I40", "empty `config/config.yaml`", "snakemake -n all", "config.yaml", {"setup": config_file("")}),
    ("I41", "tab indentation", "snakemake -n all", "line 2", {"setup": config_file("scale: smoke\n\tpapers: []\n")}),
    ("I42", "top-level list", "snakemake -n all", "config.yaml", {"setup": config_file("- scale\n")}),
    ("I43", "`overrides:` as a string", "snakemake -n all", "overrides",
     {"setup": config_file("scale: smoke\npapers: [diffusion_convergence]\noverrides: \"train.refine=2\"\n")}),
    ("I44", "bool seeds", "snakemake -n all", "seeds",
     {"setup": config_file("scale: smoke\npapers: [diffusion_convergence]\nseeds: [true, false]\n")}),
    ("I45", "negative seed in the file", "snakemake -n all", "seeds",
     {"setup": config_file("scale: smoke\npapers: [diffusion_convergence]\nseeds: [-3]\n")}),
    ("I46", "`methods` as a list", "snakemake -n all", "methods",
     {"setup": config_file("scale: smoke\npapers: [diffusion_convergence]\nmethods: [ei_sde]\n")}),
    ("I47", "`scale` missing", "snakemake -n all", "scale",
     {"setup": config_file("papers: [diffusion_convergence]\n")}),
    ("I48", "duplicate key", "snakemake -n all", "scale",
     {"setup": config_file("scale: smoke\npapers: [diffusion_convergence]\nscale: tiny\n")}),
    # typos in a paper's yaml
    ("I49", "paper yaml typo (missing key): `newton_iters:` → `newton_iter:`", "snakemake --cores 2 all DC",
     "newton_iter", {"setup": paper_yaml("newton_iters:", "newton_iter:")}),
    ("I50", "paper yaml typo (unknown key): `seed_batch:` → `seed_bacth:`",
     "snakemake -n all --config scale=tiny 'papers=[diffusion_convergence]'", "seed_bacth",
     {"setup": paper_yaml("seed_batch:", "seed_bacth:")}),
    ("I51", "paper yaml typo (value): `kind: mixture` → `kind: mixtrue`", "snakemake --cores 2 all DC", "mixtrue",
     {"setup": paper_yaml("kind: mixture", "kind: mixtrue")}),
    # the command line
    ("I52", "CLI", f"{CONF} --seed-list a,b", "--seed-list", {}),
    ("I53", "CLI", f"{TRAIN} --seeds s0-x", "--seeds", {}),
    ("I54", "CLI path traversal", f"{TRAIN} --seeds ../../../../../escape_test", "--seeds", {}),
    ("I55", "CLI `../` dataset", "python -m iclr26 acquire --paper diffusion_convergence --scale smoke "
     "--dataset ../../../../x", "../../../../x", {}),
    ("I56", "CLI `../` method", "python -m iclr26 train --paper diffusion_convergence --scale smoke "
     "--method ../../../x --seeds s0", "../../../x", {}),
    ("I57", "CLI unknown paper", "python -m iclr26 config --paper nosuch --scale smoke", "nosuch", {}),
    ("I58", "CLI scale", "python -m iclr26 config --paper diffusion_convergence --scale ../../x", "'scale'", {}),
    ("I59", "CLI override", f"{CONF} --override train.nosuch=1", "train.nosuch", {}),
    ("I60", "CLI shard", "python -m iclr26 prepare --paper diffusion_convergence --scale smoke --dataset atoms_1d "
     "--shard 3/2", "--shard", {}),
    ("I61", "preflight unknown paper", "python -m iclr26 preflight --scale full --papers nosuch", "nosuch", {}),
]


def bad_input_cases() -> list[Case]:
    cases = []
    for cid, what, commands, fragment, options in BAD_INPUTS:
        commands = [commands] if isinstance(commands, str) else commands
        expected = "accepted" if options.get("valid") else f"refused before any job, one line naming {fragment}"
        cases.append(Case(cid, "I", what, "; ".join(commands), expected, check_bad_input,
                          {"commands": commands, "fragment": fragment, **options}))
    return cases


# ============================================================================= 2. corrupt or hostile data
EVIL = '''
import os
class Evil:
    """Unpickled, this runs a shell command that writes the marker: the marker says code ran."""
    def __reduce__(self):
        return (os.system, ("echo code ran from __WHAT__ as pid $$ > " + __MARKER__,))
'''


def payload(script: str, what: str, marker: Path) -> str:
    """A helper script with the payload class: unpickling an Evil() writes `marker`."""
    return script.replace("__WHAT__", what).replace("__MARKER__", repr(str(marker)))


def complete_tree(lab: Lab, case: Case) -> Path:
    return lab.clone(case.id, lab.ref("S3").repo)


def identical_to_s3(lab: Lab, repo: Path) -> str:
    diff = compare(fingerprint(repo), lab.ref("S3").fp)
    return diff or "identical"


def check_truncated_prepared(lab: Lab, case: Case) -> Outcome:
    """H1: a prepared grid truncated; the plain run, then the consumer forced twice."""
    repo = complete_tree(lab, case)
    grid = need(repo / "data/smoke/diffusion_convergence/prepared/atoms_1d/grid_n2048.npz")
    os.truncate(grid, 1000)
    plain = lab.run(repo, expand(RUN_S3))
    forced = [lab.run(repo, expand(f"{RUN_S3} --forcerun runs/smoke/diffusion_convergence/ei_sde/s0-1/metrics.json"))
              for _ in range(2)]
    runs = [plain, *forced]
    detected = [error_naming(p, "grid_n2048.npz") or ("prepare reran" if "/prepare/atoms_1d] start" in p.out else "")
                for p in runs]
    result = identical_to_s3(lab, repo)
    partial = " (partial: the plain rerun did not look)" if "Nothing to be done" in plain.out else ""
    observed = (f"plain run: {detected[0] or jobs_note(plain)}; forced: {detected[1] or jobs_note(forced[0])}; "
                f"forced again: rc {forced[1].rc}, {result}{partial}")
    ok = any(detected) and forced[1].rc == 0 and result == "identical"
    return Outcome("✓" if ok else "✗", observed, "partial" if ok and partial else "")


def check_refused_then_remade(lab: Lab, case: Case) -> Outcome:
    """H2, H3: a corrupt completion file; the same command twice must end identical to the reference."""
    repo = complete_tree(lab, case)
    target = need(repo / case.data["file"])
    case.data["corrupt"](target)
    first, second = lab.run(repo, expand(RUN_S3)), lab.run(repo, expand(RUN_S3))
    said = error_naming(first, target.name)
    result = identical_to_s3(lab, repo)
    observed = (f"1st: {said or f'rc {first.rc}, {first_error(first.out)}'}; "
                f"2nd (same command): rc {second.rc}, {jobs_note(second)}, {result}")
    ok = (first.rc == 0 or (said and "Traceback" not in first.out)) and second.rc == 0 and result == "identical"
    return Outcome("✓" if ok else "✗", observed)


def check_edited_eval(lab: Lab, case: Case) -> Outcome:
    """H4: a valid-JSON edit of a record must be refused with one line, and never reach the tables."""
    repo = complete_tree(lab, case)
    path = need(repo / "runs/smoke/scorer/dqn/s0-1/eval.json")
    payload = json.loads(path.read_text())
    payload["records"][0]["final_return"] = 499
    path.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")
    first = lab.run(repo, expand(RUN_S3))
    said = error_naming(first, "eval.json")
    # a table file that differs from the reference holds the edit (Snakemake removes a failed job's outputs)
    want = fingerprint(lab.ref("S3").repo, ("scorer",))
    tables = ", ".join(k for k, v in fingerprint(repo, ("scorer",)).items() if want.get(k) != v)
    second = lab.run(repo, expand(RUN_S3))
    result = identical_to_s3(lab, repo)
    if first.rc == 0:
        verdict = "✗" if tables else "~"
        observed = (f"used silently: rc 0, changed {tables}" if tables else "remade silently (rc 0), not refused") + \
            f"; rerun: {result}"
    else:
        ok = said and "Traceback" not in first.out and not tables and second.rc == 0 and result == "identical"
        verdict = "✓" if ok else "✗"
        observed = f"{said or first_error(first.out)}; rerun (same command): rc {second.rc}, {result}"
    return Outcome(verdict, observed)


PLANT = {  # what H5-H8 do to the genuine checkpoint (`path`); the marker is outside the clone
    "H5": lambda path: path.write_bytes(os.urandom(5000)),
    "H6": lambda path: os.truncate(path, min(50000, path.stat().st_size // 2)),
}
PLANT_PICKLE = EVIL + '''
import sys, torch
path = sys.argv[1]
saved = torch.load(path, map_location="cpu", weights_only=True)
torch.save({"config_digest": saved["config_digest"], "state": Evil()}, path)
print("planted")
'''
PLANT_ENV = EVIL + '''
import pickle, sys, numpy as np, torch
path = sys.argv[1]
saved = torch.load(path, map_location="cpu", weights_only=True)
blob = np.frombuffer(pickle.dumps(Evil()), dtype=np.uint8).copy()
saved["state"]["env"]["pickled_env"] = torch.from_numpy(blob)  # a tensor: passes weights_only
torch.save(saved, path)
print("planted")
'''


def check_checkpoint(lab: Lab, case: Case) -> Outcome:
    """H5-H8: a stopped scorer train's checkpoint replaced or poisoned, then the workflow resumes it."""
    stopped = lab.ref("checkpoint")
    repo = complete_tree(lab, case)
    block = repo / "runs/smoke/scorer/dqn/s0-1"
    shutil.rmtree(block)
    shutil.copytree(stopped, block)
    (block / "metrics.json").unlink(missing_ok=True)  # the stopped train's state: not finished
    if case.id == "H8":  # as after a run stopped in this train: nothing downstream made yet, so the plain
        shutil.rmtree(repo / "results/scorer")  # command must run it (a missing intermediate alone is not, H12)
    path, marker = block / "checkpoint.pt", repo.parent / "marker"
    if case.id in PLANT:
        PLANT[case.id](path)
    else:
        code = payload(PLANT_PICKLE if case.id == "H7" else PLANT_ENV, "checkpoint", marker)
        planted = lab.python(repo, code, str(path))
        if "planted" not in planted.out:
            raise Skip(f"could not plant the payload: {first_error(planted.out)}")
    p = lab.run(repo, expand(case.data["run"]))
    said = next((s for s in p.out.splitlines() if "[checkpoint]" in s), "")
    said = said.split("] ", 1)[-1][:120] if said else "no checkpoint message"
    resumed = next((s.split("] ", 1)[-1] for s in p.out.splitlines() if "resumed at" in s), "")
    if "[scorer/train/dqn] start" not in p.out:
        raise Skip(f"the dqn train never ran, so the checkpoint was never read (rc {p.rc}, {jobs_note(p)})")
    if case.id in ("H7", "H8"):
        ran = marker.read_text().strip() if marker.exists() else ""
        observed = f"the payload ran: {ran!r}" if ran else \
            f"no code ran (rc {p.rc}; {said}; {resumed or 'not resumed'})"
        return Outcome("✗" if ran else "✓", observed)
    fresh = "resumed at" not in p.out
    result = identical_to_s3(lab, repo)
    ok = p.rc == 0 and fresh and result == "identical"
    return Outcome("✓" if ok else "✗", f"rc {p.rc}; {said}; {'fresh start' if fresh else 'resumed'}; {result}")


SAVED_BATCH = EVIL + '''
import sys, torch
from iclr26.core.lm import generate as g
folder = sys.argv[1]
original = g._ChunkStore.open.__func__
def planting_open(cls, *args, **kwargs):
    """The store generate() opens, with the payload saved as its first batch where it will look."""
    store = original(cls, *args, **kwargs)
    store.folder.mkdir(parents=True, exist_ok=True)
    torch.save(Evil(), store._path(0))
    print("planted", flush=True)
    return store
g._ChunkStore.open = classmethod(planting_open)
class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(2))
    @property
    def device(self):
        return torch.device("cpu")
g.resume_in(folder)  # what load_model does when model.source is set
try:
    g.generate(Tiny(), [[1, 2, 3]], pad_id=0, eos_id=1, max_new_tokens=2)
    print("generate returned")
except Exception as err:
    print(f"generate raised {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}")
'''


def check_saved_batch(lab: Lab, case: Case) -> Outcome:
    """H9: a saved generation batch that is a pickled object (function level, as the audit did)."""
    repo = lab.clone(case.id)
    marker = repo.parent / "marker"
    p = lab.python(repo, payload(SAVED_BATCH, "a saved batch", marker), str(repo / "runs/generation"))
    if "planted" not in p.out:
        raise Skip(f"could not plant the payload: {first_error(p.out)}")
    ran = marker.read_text().strip() if marker.exists() else ""
    said = next((s for s in p.out.splitlines() if s.startswith("generate ")), first_error(p.out))
    return Outcome("✗" if ran else "✓", f"the payload ran: {ran!r}" if ran else f"no code ran ({said})")


def check_compose_cache_edit(lab: Lab, case: Case) -> Outcome:
    """H10: `refine: 2` -> `1` in the compose cache entry of diffusion_convergence/smoke."""
    repo = complete_tree(lab, case)
    show = "python -m iclr26 config --paper diffusion_convergence --scale smoke"
    lab.run(repo, show, T_CLI)  # makes sure the entry exists
    edited = 0
    for entry in (repo / ".cache/compose").glob("*"):
        text = entry.read_text(errors="replace")
        if "slug: diffusion_convergence" in text and "scale: smoke" in text and "  refine: 2" in text:
            entry.write_text(text.replace("  refine: 2", "  refine: 1", 1))
            edited += 1
    if not edited:
        raise Skip("no compose cache entry of diffusion_convergence/smoke holds `refine: 2`")
    shown, plan = lab.run(repo, show, T_CLI), lab.run(repo, expand("snakemake -n all S3"), T_DRY)
    refine = re.search(r"^\s+refine: (\S+)", shown.out, re.M)
    used = refine.group(1) if refine else f"rc {shown.rc}: {first_error(shown.out)}"
    ok = refine is not None and refine.group(1) == "2" and plan.rc == 0 and "Nothing to be done" in plan.out
    return Outcome("✓" if ok else "✗", f"config prints refine: {used}; `snakemake -n all S3`: {jobs_note(plan)}")


def check_env_in_config(lab: Lab, case: Case) -> Outcome:
    """H11: ${oc.env:...} values must follow the environment, not the first composition."""
    repo = lab.clone(case.id)
    seen = []
    for paper, var, key, values in (("andor_template", "ICLR26_AVA_DIR", "manual_dir", ("/data/ava_A", "/data/ava_B")),
                                    ("step_entropy", "ICLR26_HUB_CACHE", "cache_dir", ("/hub/one", "/hub/two"))):
        for value in values:
            p = lab.run(repo, f"python -m iclr26 config --paper {paper} --scale full", T_CLI, {var: value})
            found = re.findall(rf"^\s*{key}: (\S+)", p.out, re.M)
            seen.append((value, found[0] if found else f"rc {p.rc}: {first_error(p.out)}"))
    ok = all(want == got for want, got in seen)
    return Outcome("✓" if ok else "✗", "; ".join(f"{want} -> {got}" for want, got in seen[1::2]))


def check_deleted_intermediate(lab: Lab, case: Case) -> Outcome:
    """H12 (not promised): an intermediate folder deleted under finished results."""
    repo = complete_tree(lab, case)
    shutil.rmtree(need(repo / "runs/smoke/scorer/dqn"))
    p = lab.run(repo, f"snakemake --cores 2 all {SCORER}")
    return Outcome("note", f"rc {p.rc}, {jobs_note(p)}; runs/smoke/scorer/dqn "
                           f"{'remade' if (repo / 'runs/smoke/scorer/dqn').exists() else 'left missing'}")


def check_stale_files(lab: Lab, case: Case) -> Outcome:
    """H13: files of an earlier config must leave the folder and its new manifest."""
    repo = complete_tree(lab, case)
    earlier = lab.run(repo, expand(f"snakemake --cores 2 all DC {OV.format('data.atoms_1d.grid.n=4096')}"))
    again = lab.run(repo, expand("snakemake --cores 2 all DC"))
    ref = lab.ref("S3").repo
    rel = "data/smoke/diffusion_convergence/prepared/atoms_1d"
    listed = sorted((read_json(repo / rel / "manifest.json") or {}).get("files", {}))
    want = sorted((read_json(ref / rel / "manifest.json") or {}).get("files", {}))
    extra = sorted(set(os.listdir(repo / rel)) - set(os.listdir(ref / rel))) if (repo / rel).is_dir() else []
    ok = earlier.rc == 0 and again.rc == 0 and listed == want and not extra
    observed = (f"earlier config rc {earlier.rc}, this config rc {again.rc}; manifest lists "
                f"{', '.join(sorted(set(listed) - set(want))) or 'only this run`s files'}"
                f"{'; stale in the folder: ' + ', '.join(extra) if extra else ''}")
    return Outcome("✓" if ok else "✗", observed.replace("`", "'"))


def half(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


FORCE_DQN = f"{RUN_S3} --forcerun runs/smoke/scorer/dqn/s0-1/metrics.json"
HOSTILE = [
    ("H1", "truncate a prepared file", "`truncate -s 1000 data/smoke/diffusion_convergence/prepared/atoms_1d/"
     "grid_n2048.npz`; `snakemake --cores 2 all S3`; then `... --forcerun runs/smoke/diffusion_convergence/ei_sde/"
     "s0-1/metrics.json`, twice", "detected; rerun recreates", check_truncated_prepared, {}),
    ("H2", "garbage `manifest.json` (raw)", "`echo '{\"files\": {\"ratings.csv\": ' > data/smoke/andor_template/raw/"
     "layouts/manifest.json`; `snakemake --cores 2 all S3`, twice", "detected; the same command remakes everything",
     check_refused_then_remade, {"file": "data/smoke/andor_template/raw/layouts/manifest.json",
                                 "corrupt": lambda p: p.write_text('{"files": {"ratings.csv": \n')}),
    ("H3", "truncated `eval.json`", "andor mlp `eval.json` cut in half; `snakemake --cores 2 all S3`, twice",
     "detected; rerun recreates", check_refused_then_remade,
     {"file": "runs/smoke/andor_template/mlp/s0-1/eval.json", "corrupt": half}),
    ("H4", "edited `eval.json` (valid JSON)", "`final_return` of the first scorer dqn record set to 499; "
     "`snakemake --cores 2 all S3`", "refused with one line; never tabulated", check_edited_eval, {}),
    ("H5", "random bytes in `checkpoint.pt`", "dqn stopped by `ICLR26_FAULT=train:checkpoint:2:term python -m iclr26 "
     "train --paper scorer --scale smoke --method dqn --seeds s0-1`; `head -c 5000 /dev/urandom > .../checkpoint.pt`; "
     f"`{FORCE_DQN}`", "fresh start, identical", check_checkpoint, {"run": FORCE_DQN}),
    ("H6", "truncated genuine checkpoint", f"the same, with `truncate -s 50000 .../checkpoint.pt`; `{FORCE_DQN}`",
     "fresh start, identical", check_checkpoint, {"run": FORCE_DQN}),
    ("H7", "plain malicious pickle as `checkpoint.pt`", "`torch.save({\"config_digest\": <the real digest>, "
     f"\"state\": Evil()}}, p)`; `{FORCE_DQN}`", "refused, no code run", check_checkpoint, {"run": FORCE_DQN}),
    ("H8", "code in a checkpoint that passes `weights_only` (scorer)", "a genuine checkpoint plus "
     "`state[\"env\"][\"pickled_env\"]` = uint8 tensor of `pickle.dumps(Evil())`; "
     f"`snakemake --cores 2 all {SCORER}`", "refused, no code run", check_checkpoint,
     {"run": f"snakemake --cores 2 all {SCORER}"}),
    ("H9", "code in a saved generation batch (`core/lm`)", "`generate.resume_in(dir)`; `chunk_0000000.pt = "
     "torch.save(Evil())` planted where `_ChunkStore.open` looks; `generate.generate(...)`", "refused, no code run",
     check_saved_batch, {}),
    ("H10", "edited compose cache", "`refine: 2` → `1` in `.cache/compose/<key>.yaml` of diffusion_convergence/smoke; "
     "`python -m iclr26 config ...`; `snakemake -n all S3`", "ignored or detected", check_compose_cache_edit, {}),
    ("H11", "environment-dependent config (`${oc.env:...}`)", "`ICLR26_AVA_DIR=/data/ava_A python -m iclr26 config "
     "--paper andor_template --scale full`, then `/data/ava_B` (and `ICLR26_HUB_CACHE`, step_entropy)",
     "the second value", check_env_in_config, {}),
    ("H12", "deleted intermediate folder", f"`rm -rf runs/smoke/scorer/dqn`; `snakemake --cores 2 all {SCORER}`",
     "(not promised)", check_deleted_intermediate, {}),
    ("H13", "stale files from an earlier config",
     f"`snakemake --cores 2 all DC {OV.format('data.atoms_1d.grid.n=4096')}`; then `snakemake --cores 2 all DC`",
     "manifest lists this run's files", check_stale_files, {}),
]


# ============================================================================= 3. faults
@dataclass
class Fault:
    id: str
    what: str
    when: str
    trigger: str | None = None     # a regex of the output line after which the fault is sent
    delay: float = 0.0
    action: str = ""               # see send()
    target: tuple = ()             # (stage, paper, method) of the job that gets the signal
    hook: str | None = None        # ICLR26_FAULT of the first run


FAULTS = [
    Fault("K1", "`kill -9` Snakemake", "at `[scorer/acquire/headline] start`", r"\[scorer/acquire/headline\] start",
          0, "kill-snakemake"),
    Fault("K2", "`kill -9` process group", "1 s into `[andor_template/prepare/layouts]`",
          r"\[andor_template/prepare/layouts\] start", 1.0, "kill-group"),
    Fault("K3", "SIGTERM to a train job", "2 s after `[scorer/train/dqn] start`", r"\[scorer/train/dqn\] start", 2.0,
          "term-job", ("train", "scorer", "dqn")),
    Fault("K4", "SIGTERM to a train job, mid-training", "3.5 s after start", r"\[scorer/train/dqn\] start", 3.5,
          "term-job", ("train", "scorer", "dqn")),
    Fault("K5", "`kill -9` Snakemake, mid-train", "3 s after `[scorer/train/dqn] start`", r"\[scorer/train/dqn\] start",
          3.0, "kill-snakemake"),
    Fault("K6", "`kill -9` an evaluate job", "0.8 s into andor `template_pool_em`",
          r"\[andor_template/evaluate/template_pool_em\] start", 0.8, "kill-job",
          ("evaluate", "andor_template", "template_pool_em")),
    Fault("K7", "`kill -9` process group in tabulate", "2 s after `localrule tabulate_scorer:`",
          r"^localrule tabulate_scorer:", 2.0, "kill-group"),
    Fault("K8", "SIGTERM Snakemake", "3.2 s into a scorer train", r"\[scorer/train/\w+\] start", 3.2, "term-snakemake"),
    Fault("K9", "SIGINT process group (Ctrl-C)", "3.2 s into a scorer train", r"\[scorer/train/\w+\] start", 3.2,
          "int-group"),
    Fault("K10", "`ICLR26_FAULT=train:checkpoint:3:term`", "every scorer train", hook="train:checkpoint:3:term"),
    Fault("K11", "`ICLR26_FAULT=train:done:1:kill`", "work done, completion file not yet written",
          hook="train:done:1:kill"),
    Fault("K12", "`ICLR26_FAULT=train:unit:2:kill`", "diffusion and andor units", hook="train:unit:2:kill"),
]


def send(live: Live, fault: Fault) -> str:
    """Deliver the fault; what was done, or raise Skip when its target is not there."""
    if fault.action in ("kill-snakemake", "term-snakemake"):
        pid = live.snakemake_pid()
        sig = signal.SIGKILL if fault.action == "kill-snakemake" else signal.SIGTERM
    elif fault.action in ("kill-group", "int-group"):
        pid, sig = -live.p.pid, signal.SIGKILL if fault.action == "kill-group" else signal.SIGINT
    else:
        pid = job_pid(live.cwd, *fault.target)
        sig = signal.SIGKILL if fault.action == "kill-job" else signal.SIGTERM
    if pid is None:
        raise Skip(f"fault not delivered: no running process for {fault.action} {'/'.join(fault.target)}")
    try:
        if pid < 0:
            os.killpg(-pid, sig)
        else:
            os.kill(pid, sig)
    except OSError as err:
        raise Skip(f"fault not delivered: {err}") from err
    return f"{signal.Signals(sig).name} to {'group ' + str(-pid) if pid < 0 else pid}"


def judge_restart(repo: Path, rerun: Proc, want: dict, orphans: dict, papers=None, before: str = "") -> Outcome:
    """Survived: no orphan outlived the fault, the rerun ended rc 0, identical, nothing left behind."""
    left = leftovers(repo)
    diff = compare(fingerprint(repo, papers), want)
    notes = [n for n in (before, f"rerun rc {rerun.rc}, {jobs_note(rerun)}",
                         "stale lock removed" if "removed a stale lock" in rerun.out else "",
                         f"{rerun.out.count('resumed at')}× resumed" if "resumed at" in rerun.out else "",
                         diff or "identical",
                         f"orphan alive {GRACE:.0f} s after the fault: {describe(orphans)}" if orphans else "",
                         f"left behind: {', '.join(left[:3])}" if left else "no leftovers") if n]
    ok = not orphans and rerun.rc == 0 and not diff and not left
    return Outcome("✓" if ok else "✗", "; ".join(notes), "" if ok else "failed")


def check_fault(lab: Lab, case: Case) -> Outcome:
    fault: Fault = case.data["fault"]
    want = lab.ref("S3").fp
    repo = lab.clone(case.id)
    live = lab.live(repo, expand(RUN_S3), {"ICLR26_FAULT": fault.hook} if fault.hook else None)
    sent = f"ICLR26_FAULT={fault.hook}"
    if fault.trigger:
        if not live.wait_for(fault.trigger, T_RUN):
            live.wait(60)
            raise Skip(f"the line {fault.trigger!r} never appeared")
        time.sleep(fault.delay)
        try:
            sent = send(live, fault)
        except Skip:
            live.wait(T_RUN)
            raise
    first = live.wait(T_RUN)
    if first.rc == 0:
        raise Skip(f"the fault never took effect ({sent}; the run ended rc 0)")
    orphans = wait_gone(repo, GRACE)
    rerun = lab.run(repo, expand(RUN_S3))
    return judge_restart(repo, rerun, want, orphans, before=f"{sent}: rc {first.rc}")


def check_changed_config_resume(lab: Lab, case: Case) -> Outcome:
    """K13, K14: killed with saved work, rerun under another config: equal to a clean run under it."""
    first_cmd, second_cmd, ref, papers = case.data["commands"]
    repo = lab.clone(case.id)
    first = lab.run(repo, expand(first_cmd))
    if first.rc == 0:
        raise Skip("the fault hook never fired (rc 0)")
    orphans = wait_gone(repo, GRACE)
    rerun = lab.run(repo, expand(second_cmd))
    want = lab.ref(ref).fp
    matters = "" if want != fingerprint(lab.ref("S3").repo, papers) else "; the override changes nothing (vacuous)"
    fresh = len(re.findall(r"another config or code", rerun.out))
    outcome = judge_restart(repo, rerun, want, orphans, papers, f"{fresh}× 'another config or code'")
    outcome.observed += matters
    return outcome


def check_two_snakemakes(lab: Lab, case: Case) -> Outcome:
    """K15: A runs; B (the same command) and C (another subset) in the same checkout must be locked out."""
    repo = lab.clone(case.id)
    a = lab.live(repo, expand("snakemake --cores 1 all S3"))
    # the audit started B and C 6 s after A; here once A's first job runs, so that A holds the lock
    # whatever the machine's load
    if not a.wait_for(JOB_LINE.pattern, T_RUN):
        a.wait(60)
        raise Skip("A never started a job")
    time.sleep(1)
    others = [lab.live(repo, expand(cmd)) for cmd in ("snakemake --cores 1 all S3",
                                                      "snakemake --cores 1 all --config scale=smoke "
                                                      "'papers=[andor_template]'")]
    b, c = (o.wait(T_DRY) for o in others)
    a_done = a.wait(T_RUN * 2)
    locked = [p.rc != 0 and "lock" in p.out.lower() and not jobs_ran(p) for p in (b, c)]
    diff = compare(fingerprint(repo), lab.ref("S3").fp)
    left = leftovers(repo)
    ok = all(locked) and a_done.rc == 0 and not diff and not left
    observed = (f"B: rc {b.rc} {first_error(b.out)[:70]}; C: rc {c.rc}{'' if locked[1] else ' not locked'}; "
                f"A: rc {a_done.rc}, {diff or 'identical'}; {'left: ' + ', '.join(left) if left else 'no leftovers'}")
    return Outcome("✓" if ok else "✗", observed, "" if ok else "failed")


PRESENTATION = ("config/hydra/paper_scale/scorer/smoke.yaml", 'final_window: "50%"', 'final_window: "40%"')


@contextlib.contextmanager
def mounted(*mount_commands: list[str], at: Path):
    """Mounts made by a case, always undone; Skip when this machine does not permit them."""
    try:
        for cmd in mount_commands:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
            if p.returncode != 0:
                raise Skip(f"`{' '.join(cmd[:4])} ...` not permitted here: {p.stderr.strip()[:100]}")
        yield
    finally:
        for _ in range(len(mounts_under(at))):
            subprocess.run(["umount", str(at)], capture_output=True, timeout=60)
        for mount in mounts_under(at):
            subprocess.run(["umount", "-l", mount], capture_output=True, timeout=60)


def check_read_only(lab: Lab, case: Case) -> Outcome:
    """K16: results/ read-only during a presentation change; after umount, only the presentation reruns."""
    twin = lab.clone(f"{case.id}-twin", lab.ref("S3").repo)  # the same change, no fault: what to compare with
    edit(twin, *PRESENTATION)
    clean = lab.run(twin, expand(RUN_S3))
    if clean.rc != 0:
        raise Skip(f"the presentation change fails without the fault: {first_error(clean.out)}")
    want = fingerprint(twin)
    lab.discard(twin.parent)
    repo = complete_tree(lab, case)
    edit(repo, *PRESENTATION)
    results = str(repo / "results")
    with mounted(["mount", "--bind", results, results], ["mount", "-o", "remount,ro,bind", results],
                 at=repo / "results"):
        blocked = lab.run(repo, expand(RUN_S3))
    rerun = lab.run(repo, expand(RUN_S3))
    extra = set(jobs_ran(rerun)) - {"tabulate_scorer"} - SUMMARY_RULES
    before = (f"read-only: rc {blocked.rc}, {first_error(blocked.out)[:90]}"
              f"{' (jobs started: ' + ', '.join(jobs_ran(blocked)) + ')' if jobs_ran(blocked) else ''}")
    outcome = judge_restart(repo, rerun, want, {}, before=before)
    if blocked.rc == 0 or extra:
        outcome = Outcome("✗", outcome.observed + (f"; the rerun also ran {', '.join(sorted(extra))}" if extra else
                                                   "; the read-only run ended rc 0"), "failed")
    return outcome


def check_disk_full(lab: Lab, case: Case) -> Outcome:
    """K17: a 300 KiB tmpfs on the train folder; one line, no partial file; resumed at 50 MiB, identical."""
    repo = complete_tree(lab, case)
    block = repo / "runs/smoke/scorer/dqn/s0-1"
    want = (read_json(lab.ref("S3").repo / "runs/smoke/scorer/dqn/s0-1/eval.json") or {}).get("records")
    train = "python -m iclr26 train --paper scorer --scale smoke --method dqn --seeds s0-1"
    with mounted(["mount", "-t", "tmpfs", "-o", "size=300k", "tmpfs", str(block)], at=block):
        full = lab.run(repo, train, T_CLI)
        if full.rc == 0:
            raise Skip("300 KiB was enough: the disk never filled")
        partial = [p.name for p in block.rglob("*") if p.name.endswith((".tmp", ".part"))]
        message = error_naming(full, "") if "Traceback" not in full.out else None
        subprocess.run(["mount", "-o", "remount,size=50m", str(block)], capture_output=True, timeout=60)
        again = lab.run(repo, train, T_CLI)
        evaluate = lab.run(repo, train.replace(" train ", " evaluate "), T_CLI)
        got = (read_json(block / "eval.json") or {}).get("records")
    same = got is not None and got == want
    observed = (f"{message or first_error(full.out)}; "
                f"{'partial: ' + ', '.join(partial) if partial else 'no partial file'}"
                f"; at 50 MiB: rc {again.rc}{', resumed' if 'resumed at' in again.out else ''}; evaluate rc "
                f"{evaluate.rc}, records {'identical' if same else 'differ'}")
    if not (again.rc == 0 and evaluate.rc == 0 and same and not partial):
        return Outcome("✗", observed, "failed")
    return Outcome("✓" if message else "~", observed + ("" if message else " (message: not one line)"),
                   "" if message else "message")


def check_sigterm_train(lab: Lab, case: Case) -> Outcome:
    """K18: SIGTERM to the ldar train must checkpoint and stop (promise 7)."""
    repo = lab.clone(case.id, lab.ref("ldar").repo)
    live = lab.live(repo, "python -m iclr26 train --paper ldar --scale smoke --method ldar --seeds s0-1 "
                          "--override train.epochs=600")
    if not live.wait_for(r"\[ldar/train/ldar\] start", T_CLI):
        p = live.wait(60)
        raise Skip(f"the train never started: {first_error(p.out)}")
    time.sleep(10)
    pid = job_pid(repo, "train", "ldar")
    if pid is None:
        raise Skip("the train ended within 10 s")
    os.kill(pid, signal.SIGTERM)
    signalled = time.monotonic()
    with contextlib.suppress(subprocess.TimeoutExpired):
        live.p.wait(SIGTERM_GRACE)
    block = repo / "runs/smoke/ldar/ldar/s0-1"
    if live.p.poll() is None:
        live.wait(0.1)  # killed: it would train on for a minute
        return Outcome("✗", f"kept training {SIGTERM_GRACE:.0f} s after SIGTERM (then killed by the harness)", "failed")
    p = live.wait(5)
    took = time.monotonic() - signalled
    stopped = p.rc != 0 and not (block / "metrics.json").exists() and (block / "checkpoint.pt").exists()
    said = next((s for s in cause_lines(p.out) if "SIGTERM" in s), first_error(p.out))
    return Outcome("✓" if stopped else "✗", f"rc {p.rc} {took:.1f} s after SIGTERM: {said[:100]}; metrics.json "
                   f"{'absent' if not (block / 'metrics.json').exists() else 'written'}, checkpoint.pt "
                   f"{'saved' if (block / 'checkpoint.pt').exists() else 'absent'}", "" if stopped else "failed")


def check_orphan_train(lab: Lab, case: Case) -> Outcome:
    """K19: Snakemake killed with -9 during the ldar train: the job must stop; one rerun, identical."""
    want = lab.ref("ldar-300").fp
    cmd = f"snakemake --cores 2 all {LDAR} 'overrides=[\"ldar:train.epochs=300\"]'"
    repo = lab.clone(case.id)
    live = lab.live(repo, cmd)
    if not live.wait_for(r"\[ldar/train/\w+\] start", T_RUN):
        live.wait(60)
        raise Skip("the ldar train never started")
    time.sleep(12)
    pid = live.snakemake_pid()
    if pid is None:
        raise Skip("Snakemake was gone before the fault")
    os.kill(pid, signal.SIGKILL)
    live.wait(60)
    orphans = wait_gone(repo, GRACE)
    rerun = lab.run(repo, cmd)
    return judge_restart(repo, rerun, want, orphans, ("ldar",), "SIGKILL to Snakemake 12 s into train")


def fault_cases() -> list[Case]:
    cases = [Case(f.id, "K", f.what, f"{RUN_S3}; {f.when}", "rerun rc 0, no leftovers, identical", check_fault,
                  {"fault": f}) for f in FAULTS]
    k13 = (f"ICLR26_FAULT=train:checkpoint:3:term snakemake --cores 2 all {SCORER}",
           f"snakemake --cores 2 all {SCORER} 'overrides=[\"scorer:train.lr=0.001\"]'", "scorer-lr", ("scorer",))
    k14 = ("ICLR26_FAULT=train:unit:3:kill snakemake --cores 2 all DC --forcerun train",
           f"snakemake --cores 2 all DC {OV.format('train.c=0.25')}", "dc-c", ("diffusion_convergence",))
    return cases + [
        Case("K13", "K", "killed with a checkpoint, rerun with a changed config", f"`{k13[0]}`, then `{k13[1]}`",
             "starting fresh; equal to a clean run with that override", check_changed_config_resume,
             {"commands": k13}),
        Case("K14", "K", "killed at a unit, rerun with a changed config", f"`{k14[0]}`, then `{k14[1]}`",
             "redone; equal to a clean run with that override", check_changed_config_resume, {"commands": k14}),
        Case("K15", "K", "two Snakemakes in one checkout", "A: `snakemake --cores 1 all S3`; then B: the same, and C: "
             "`... 'papers=[andor_template]'`", "B and C locked out (rc 1); A rc 0, identical", check_two_snakemakes),
        Case("K16", "K", "read-only `results/`", "`mount --bind results results; mount -o remount,ro,bind results`; a "
             "presentation change (scorer `table.final_window`); `snakemake --cores 2 all S3`; umount; the same",
             "refused; after umount only tabulate, claims, report; equal to a run of that change",
             check_read_only),
        Case("K17", "K", "disk full", "a 300 KiB tmpfs on `runs/smoke/scorer/dqn/s0-1`; `python -m iclr26 train "
             "--paper scorer --scale smoke --method dqn --seeds s0-1`; remount at 50 MiB; the same; evaluate",
             "one line, no partial file; resumes; records identical", check_disk_full),
        Case("K18", "K", "SIGTERM to the ldar train job", "`python -m iclr26 train --paper ldar --scale smoke --method "
             "ldar --seeds s0-1 --override train.epochs=600`; `kill -TERM <pid>` 10 s after its start line",
             "checkpoint and stop", check_sigterm_train),
        Case("K19", "K", "`kill -9` Snakemake during ldar train", f"`snakemake --cores 2 all {LDAR} "
             "'overrides=[\"ldar:train.epochs=300\"]'`; kill 12 s into train; rerun the same command",
             "the job stops; one rerun, identical to a clean run", check_orphan_train),
    ]


# ============================================================================= 4. reruns
@dataclass
class Planned:
    rule: str
    outputs: list[str]

    @property
    def paper(self) -> str | None:
        if self.rule.startswith("tabulate_"):
            return self.rule.removeprefix("tabulate_")
        for out in self.outputs:
            m = re.match(r"^(?:runs|data)/[^/]+/([^/]+)/|^results/([^/]+)/", out)
            if m:
                return m.group(1) or m.group(2)
        return None


def planned_jobs(out: str) -> list[Planned]:
    """The jobs of a run or dry run: one `rule X:` block each, with its `output:` line."""
    jobs = []
    for line in out.splitlines():
        if m := re.match(r"^(?:local)?rule (\w+):$", line):
            jobs.append(Planned(m.group(1), []))
        elif m := MESSAGE_JOB.match(line):  # "Job 30: acquire <paper>/<dataset> (<scale>): ..."
            stage, paper, dataset, scale = m.groups()
            jobs.append(Planned(stage, [f"data/{scale}/{paper}/{'raw' if stage == 'acquire' else stage}/{dataset}/"]))
        elif (m := re.match(r"^\s+output: (.*)$", line)) and jobs and not jobs[-1].outputs:
            jobs[-1].outputs = [s.strip() for s in m.group(1).split(",")]
    return jobs


def plan_note(jobs: list[Planned]) -> str:
    counts = Counter(j.rule for j in jobs if j.rule != "all")
    return ", ".join(f"{rule} {n}" for rule, n in counts.items()) if counts else "Nothing to be done"


def stages(jobs, paper=None) -> Counter:
    return Counter(j.rule for j in jobs if j.rule not in SUMMARY_RULES and (paper is None or j.paper == paper))


def papers_in(jobs) -> set:
    return {j.paper for j in jobs if j.rule not in SUMMARY_RULES}


def trained(ref: Path, paper: str, name: str) -> int:
    return len(list(ref.glob(f"runs/smoke/{paper}/*/*/{name}")))


# each judge: (planned jobs, the reference tree) -> (verdict, note)
def expect_nothing(jobs, ref):
    return ("✓" if not jobs else "✗"), ""


def expect_training(paper):
    def judge(jobs, ref):
        got = stages(jobs)
        ok = set(got) == {"train", "evaluate", f"tabulate_{paper}"} and papers_in(jobs) == {paper} and \
            got["train"] == trained(ref, paper, "metrics.json") and got["evaluate"] == trained(ref, paper, "eval.json")
        return ("✓" if ok else "✗"), ""
    return judge


def expect_tabulate_only(jobs, ref):
    return ("✓" if set(stages(jobs)) == {"tabulate_scorer"} else "✗"), ""


def expect_dataset(paper, dataset):
    def judge(jobs, ref):
        data_jobs = [j for j in jobs if j.rule in ("acquire", "prepare")]
        mine = [j for j in data_jobs if any(f"/{dataset}/" in o for o in j.outputs)]
        got = stages(jobs)
        ok = papers_in(jobs) == {paper} and "prepare" in {j.rule for j in mine} and got["train"] >= 1 \
            and got["evaluate"] >= 1
        over = len(mine) < len(data_jobs)  # the audit's "✓ (over-invalidates)": noted, not failed
        return ("✓" if ok else "✗"), " (over-invalidates: other datasets too)" if over else ""
    return judge


def expect_paper_only(paper):
    def judge(jobs, ref):
        return ("✓" if jobs and papers_in(jobs) == {paper} else "✗"), ""
    return judge


def expect_new_seed_blocks(jobs, ref):
    blocks = [Path(o).parent for j in jobs if j.rule in ("train", "evaluate") for o in j.outputs]
    old = [b for b in blocks if (ref / b).exists()]
    got = stages(jobs)
    ok = blocks and not old and not got["acquire"] and not got["prepare"]
    return ("✓" if ok else "✗"), f" (reruns existing blocks: {', '.join(map(str, old[:2]))})" if old else ""


SCORER_SMOKE = "config/hydra/paper_scale/scorer/smoke.yaml"
PLANS = [  # (id, change, expected, setup of the clone, --config words added to S3, judge)
    ("R2", "`train.batch_size` 32→16 in config/hydra/paper_scale/scorer/smoke.yaml", "scorer train, evaluate, tabulate",
     lambda r: edit(r, SCORER_SMOKE, "batch_size: 32", "batch_size: 16"), "", expect_training("scorer")),
    ("R3", "`table.final_window` (presentation)", "tabulate only", lambda r: edit(r, *PRESENTATION[0:3]), "",
     expect_tabulate_only),
    ("R4", "`data.triangle_2d.grid.n` 48→40 (diffusion smoke)", "that dataset's acquire and prepare, then training",
     lambda r: edit(r, "config/hydra/paper_scale/diffusion_convergence/smoke.yaml", "n: 48}", "n: 40}"), "",
     expect_dataset("diffusion_convergence", "triangle_2d")),
    ("R5", "`data.layouts.n_images` (andor)", "acquire, prepare, training",
     lambda r: edit(r, "config/hydra/paper_scale/andor_template/smoke.yaml", "n_images: 900", "n_images: 800"), "",
     expect_dataset("andor_template", "layouts")),
    ("R6", "comment appended to `src/iclr26/papers/scorer/plots.py`", "that paper's jobs only",
     appender("src/iclr26/papers/scorer/plots.py", "# audit R6\n"), "",
     expect_paper_only("scorer")),
    ("R7", "comment appended to `src/iclr26/core/stats.py`", "nothing (documented)",
     appender("src/iclr26/core/stats.py", "# audit R7\n"), "", expect_nothing),
    ("R9", "`seeds=[0,1,2]` (smoke default is [0,1])", "the new seed block only (no data stages, no old block)",
     None, "'seeds=[0,1,2]'", expect_new_seed_blocks),
    ("R10", "`seeds=[0,1]`, equal to the default", "nothing", None, "'seeds=[0,1]'", expect_nothing),
    ("R11", "`'overrides=[\"scorer:train.lr=2.5e-4\"]'`, the default value", "nothing", None,
     "'overrides=[\"scorer:train.lr=2.5e-4\"]'", expect_nothing),
    ("R12", "`'overrides=[\"scorer:train.lr=0.001\"]'`", "train, evaluate, tabulate (no acquire, prepare)", None,
     "'overrides=[\"scorer:train.lr=0.001\"]'", expect_training("scorer")),
]


def check_plan(lab: Lab, case: Case) -> Outcome:
    repo = complete_tree(lab, case)
    if case.data["setup"]:
        case.data["setup"](repo)
    p = lab.run(repo, expand(f"snakemake -n all S3 {case.data['words']}".rstrip()), T_DRY)
    if p.rc != 0:
        return Outcome("✗", f"the plan failed (rc {p.rc}): {first_error(p.out)}")
    jobs = planned_jobs(p.out)
    verdict, note = case.data["judge"](jobs, lab.ref("S3").repo)
    return Outcome(verdict, plan_note(jobs) + note)


def check_no_op(lab: Lab, case: Case) -> Outcome:
    """R1: nothing changed: nothing to do, twice, in a few seconds."""
    repo = complete_tree(lab, case)
    dry, real = lab.run(repo, expand("snakemake -n all S3"), T_DRY), lab.run(repo, expand(RUN_S3), T_DRY)
    ok = all(p.rc == 0 and "Nothing to be done" in p.out for p in (dry, real))
    return Outcome("✓" if ok else "✗", f"-n: {jobs_note(dry)} ({dry.wall:.1f} s); run: {jobs_note(real)} "
                                       f"({real.wall:.1f} s)")


def check_core_edit(lab: Lab, case: Case) -> Outcome:
    """R8: a changed core function must run after `--forcerun train` (the README's remedy)."""
    repo = complete_tree(lab, case)
    path = repo / "src/iclr26/core/runtime.py"
    lines = path.read_text().splitlines(keepends=True)
    at = next((i for i, line in enumerate(lines) if line.startswith("def pick_device(")), None)
    if at is None:
        raise Skip("no `def pick_device(` in src/iclr26/core/runtime.py")
    while not lines[at].rstrip().endswith(":"):
        at += 1
    lines.insert(at + 1, '    raise RuntimeError("NEW CORE CODE RAN")  # audit R8\n')
    path.write_text("".join(lines))
    p = lab.run(repo, f"snakemake --cores 2 all {SCORER} --forcerun train")
    logs = "".join(f.read_text(errors="replace") for f in repo.glob("logs/smoke/scorer/train/*.log"))
    seen = (p.out + logs).count("NEW CORE CODE RAN")
    return Outcome("✓" if seen else "✗", f"rc {p.rc}; `NEW CORE CODE RAN` seen {seen}×"
                                         f"{'' if seen else ': the saved work was reused, the new code never ran'}")


def check_result_deleted(lab: Lab, case: Case) -> Outcome:
    repo = complete_tree(lab, case)
    need(repo / "results/scorer/table.tex").unlink()
    p = lab.run(repo, expand(RUN_S3))
    result = identical_to_s3(lab, repo)
    ok = p.rc == 0 and (repo / "results/scorer/table.tex").exists() and result == "identical"
    return Outcome("✓" if ok else "✗", f"rc {p.rc}, {jobs_note(p)}; {result}")


def check_run_override(lab: Lab, case: Case) -> Outcome:
    """R14: `run --override` on a finished default tree must equal a fresh run with that override."""
    repo = complete_tree(lab, case)
    p = lab.run(repo, "python -m iclr26 run --paper diffusion_convergence --scale smoke --override train.refine=1",
                T_RUN)
    records = "results/diffusion_convergence/records.csv"
    got, fresh = repo / records, lab.ref("dc-refine1").repo / records
    default = lab.ref("S3").repo / records

    def digest(f: Path) -> str:
        return sha(f.read_bytes())[:6] if f.exists() else "missing"
    ok = p.rc == 0 and digest(got) == digest(fresh) != digest(default)
    return Outcome("✓" if ok else "✗", f"rc {p.rc}; records.csv {digest(got)}…, fresh run with refine=1 "
                                       f"{digest(fresh)}…, default {digest(default)}…")


R15_EPOCHS = 20  # the audit used 600 (95 s); any value other than smoke's 2 makes the case


def check_hand_run_train(lab: Lab, case: Case) -> Outcome:
    """R15: a train run by hand under another config, then the workflow: retrain or refuse, never mix."""
    repo = lab.clone(case.id, lab.ref("ldar").repo)
    hand = lab.run(repo, "python -m iclr26 train --paper ldar --scale smoke --method ldar --seeds s0-1 --override "
                         f"train.epochs={R15_EPOCHS}", T_CLI)
    if hand.rc != 0:
        raise Skip(f"the hand-run train failed: {first_error(hand.out)}")
    wf_cmd = f"snakemake --cores 2 all {LDAR}"
    wf = lab.run(repo, expand(wf_cmd))
    said = first_error(wf.out) if wf.rc != 0 else ""
    if wf.rc != 0:  # refused: the same command must then retrain
        wf = lab.run(repo, expand(wf_cmd))
    block = repo / "runs/smoke/ldar/ldar/s0-1"
    used = ((read_json(block / "metrics.json") or {}).get("config") or {}).get("train", {}).get("epochs")
    table = yaml.safe_load((repo / "results/ldar/config.yaml").read_text()) if (
        repo / "results/ldar/config.yaml").exists() else {}
    said_epochs = (table or {}).get("train", {}).get("epochs")
    retrained = "[ldar/train/ldar] start" in wf.out
    ok = wf.rc == 0 and used == said_epochs and used is not None
    observed = (f"{'refused: ' + said + '; then ' if said else ''}rc {wf.rc}, "
                f"{'train reran' if retrained else 'train not rerun'} ({plan_note(planned_jobs(wf.out))}); "
                f"metrics.json epochs {used}, results/ldar/config.yaml epochs {said_epochs}")
    return Outcome("✓" if ok else "✗", observed)


def rerun_cases() -> list[Case]:
    cases = [Case("R1", "R", "nothing", "`snakemake -n all S3`, then `snakemake --cores 2 all S3`",
                  "nothing to do, a few s", check_no_op)]
    cases += [Case(cid, "R", change, f"`snakemake -n all S3{' ' + words if words else ''}`", expected, check_plan,
                   {"setup": setup, "words": words, "judge": judge})
              for cid, change, expected, setup, words, judge in PLANS]
    cases += [
        Case("R8", "R", "core edit, then `--forcerun train`: `pick_device` in src/iclr26/core/runtime.py made to raise",
             f"`snakemake --cores 2 all {SCORER} --forcerun train`", "the new core code runs", check_core_edit),
        Case("R13", "R", "`rm results/scorer/table.tex`", f"`{RUN_S3}`", "remade", check_result_deleted),
        Case("R14", "R", "`run --override` on a tree with the default run", "`python -m iclr26 run --paper "
             "diffusion_convergence --scale smoke --override train.refine=1`", "the stages rerun under the new config "
             "(records = a fresh run's)", check_run_override),
        Case("R15", "R", "a job run by hand under another config, then the workflow", "`python -m iclr26 train --paper "
             f"ldar --scale smoke --method ldar --seeds s0-1 --override train.epochs={R15_EPOCHS}`; "
             f"`snakemake --cores 2 all {LDAR}`", "train rerun, or refused", check_hand_run_train),
    ]
    return sorted(cases, key=lambda c: int(c.id[1:]))


# ============================================================================= 5. DVC
def dvc_repo(lab: Lab) -> Path:
    """One clone for V1-V7, whose config/config.yaml is `scale: smoke`, `papers: [diffusion_convergence]`."""
    if lab.dvc is None:
        repo = lab.clone("V")
        edit(repo, "config/config.yaml", "scale: tiny", "scale: smoke")
        edit(repo, "config/config.yaml", "papers: []", "papers: [diffusion_convergence]")
        lab.dvc = {"repo": repo, "done": {}}
    return lab.dvc["repo"]


def results_hashes(repo: Path) -> dict[str, str]:
    return {str(p.relative_to(repo)): sha(p.read_bytes()) for p in sorted((repo / "results").rglob("*")) if p.is_file()}


def dvc_step(lab: Lab, step: str) -> Outcome:
    """Run one DVC step on the shared clone, after the steps it builds on (each once)."""
    repo = dvc_repo(lab)
    state = lab.dvc
    if step in state["done"]:
        return state["done"][step]
    for before in DVC_NEEDS.get(step, ()):
        dvc_step(lab, before)
    run = lambda cmd: lab.run(repo, cmd, T_RUN)  # noqa: E731
    if step == "V1":
        p = run("dvc repro")
        ok = p.rc == 0 and (repo / "dvc.lock").exists()
        outcome = Outcome("✓" if ok else "✗", f"rc {p.rc}, {p.wall:.1f} s{'' if ok else ': ' + first_error(p.out)}")
    elif step in ("V2", "V3"):
        p = run("dvc status" if step == "V2" else "dvc repro")
        said = "up to date" if step == "V2" else "didn't change"
        line = next((s for s in p.out.splitlines() if said in s), first_error(p.out))
        outcome = Outcome("✓" if p.rc == 0 and said in p.out else "✗", f"{line.strip()} ({p.wall:.1f} s)")
    elif step == "V4":
        p = run("dvc push")
        pushed = re.search(r"\d+ files? pushed", p.out)
        outcome = Outcome("✓" if p.rc == 0 and pushed else "✗", pushed.group(0) if pushed else first_error(p.out))
    elif step == "V7":
        metrics, params = run("dvc metrics show"), run("dvc params diff")
        ok = metrics.rc == 0 and "claims.json" in metrics.out and params.rc == 0 and "scale" in params.out \
            and "smoke" in params.out
        said = "scale → smoke" if "smoke" in params.out else first_error(params.out)
        outcome = Outcome("✓" if ok else "✗", f"metrics show rc {metrics.rc} ({len(metrics.out.splitlines())} lines); "
                                              f"params diff rc {params.rc}: {said}")
    else:  # V5, V6: results (and the cache) removed, then pulled back
        before = results_hashes(repo)
        shutil.rmtree(repo / "results", ignore_errors=True)
        notes, ok = [], True
        if step == "V5":
            st = run("dvc status")
            ok &= "deleted" in st.out
            notes.append(f"status: {'deleted: results' if 'deleted' in st.out else first_error(st.out)}")
        else:
            shutil.rmtree(repo / ".dvc/cache", ignore_errors=True)
        pull = run("dvc pull")
        same = results_hashes(repo) == before and bool(before)
        status = run("dvc status")
        ok &= pull.rc == 0 and same and "up to date" in status.out
        notes += [f"pull rc {pull.rc}, {len(before)} files {'sha256 identical' if same else 'differ'}",
                  f"status {'up to date' if 'up to date' in status.out else first_error(status.out)}"]
        if step == "V6":
            plan = run("snakemake -n all")
            ok &= "Nothing to be done" in plan.out
            notes.append(f"`snakemake -n all`: {jobs_note(plan)}")
        outcome = Outcome("✓" if ok else "✗", "; ".join(notes))
    state["done"][step] = outcome
    return outcome


DVC_NEEDS = {"V2": ("V1",), "V3": ("V1",), "V4": ("V1",), "V5": ("V4",), "V6": ("V5",), "V7": ("V1",)}
DVC = [("V1", "`dvc repro`", "runs, writes `dvc.lock`"), ("V2", "`dvc status`", "up to date"),
       ("V3", "`dvc repro` again", "skipped"), ("V4", "`dvc push` (default remote `../dvc-remote`)", "pushed"),
       ("V5", "`rm -rf results; dvc status; dvc pull`", "identical files"),
       ("V6", "`rm -rf results .dvc/cache; dvc pull`", "fetched from the remote, identical"),
       ("V7", "`dvc metrics show`, `dvc params diff`", "metrics and params")]


# ============================================================================= 6. provenance
def commit_of(path: Path) -> str | None:
    payload = read_json(path) or {}
    return (payload.get("provenance") or payload).get("git_commit")


def check_fields(lab: Lab, case: Case) -> Outcome:
    """P1: every completion file carries config and provenance; results carry config and provenance."""
    ref = lab.ref("S3").repo
    missing, no_digest = [], []
    for f in [*ref.glob("data/*/*/*/*/manifest.json"), *ref.glob("runs/*/*/*/*/metrics.json"),
              *ref.glob("runs/*/*/*/*/eval.json")]:
        payload = read_json(f) or {}
        prov = payload.get("provenance") or {}
        keys = ["git_commit", "packages", "python", "machine", "created_utc"] + (["seeds"] if "runs" in f.parts else [])
        lacks = [k for k in ("config", "provenance") if k not in payload] + [k for k in keys if not prov.get(k)]
        if lacks:
            missing.append(f"{f.relative_to(ref)} lacks {', '.join(lacks)}")
        if "config_digest" not in payload:
            no_digest.append(f.name)
    for paper in S3_PAPERS:
        for name in ("config.yaml", "provenance.json"):
            if not (ref / "results" / paper / name).exists():
                missing.append(f"results/{paper}/{name}")
        if "seeds" not in (read_json(ref / "results" / paper / "claims.json") or {}):
            missing.append(f"results/{paper}/claims.json lacks seeds")
    if missing:
        return Outcome("✗", f"{len(missing)} gaps: {'; '.join(missing[:2])}")
    if no_digest:  # the audit's "✓ (gap noted)"
        return Outcome("✓", f"fields present (gap: no config digest in {len(no_digest)} completion files)")
    return Outcome("✓", "config, provenance (commit, packages, Python, machine, seeds, time) and the config digest "
                        "in every completion file; config.yaml and provenance.json beside every table")


def check_dirty(lab: Lab, case: Case) -> Outcome:
    """P2, P3: an edited tracked file, or a new untracked one, must mark the recorded commit +dirty."""
    ref = lab.ref("S3").repo
    control = commit_of(next(ref.glob("runs/smoke/diffusion_convergence/*/*/eval.json")))
    repo = complete_tree(lab, case)
    shutil.rmtree(repo / "metrics", ignore_errors=True)  # untracked output of the reference run (see below)
    clean_before = subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True,
                                  timeout=30).stdout.strip()
    case.data["change"](repo)
    started = time.time()
    p = lab.run(repo, expand("snakemake --cores 2 all DC"))
    files = [repo / "results/diffusion_convergence/provenance.json",
             next(repo.glob("runs/smoke/diffusion_convergence/*/*/eval.json"), repo / "none"),
             next(repo.glob("data/smoke/diffusion_convergence/*/*/manifest.json"), repo / "none")]
    rewritten = [f for f in files if f.exists() and f.stat().st_mtime >= started]
    commits = {str(f.relative_to(repo)).split("/")[-1]: commit_of(f) for f in rewritten}
    ok = p.rc == 0 and bool(rewritten) and all(c and c.endswith("+dirty") for c in commits.values())
    marks = [f"{k}: {(v or '?')[:8]}…{'+dirty' if v and v.endswith('+dirty') else ' (clean)'}"
             for k, v in commits.items()]
    observed = f"rc {p.rc}, {jobs_note(p)}; {', '.join(marks) or 'nothing rewritten'}"
    if control and control.endswith("+dirty") or clean_before:
        return Outcome("~", observed + f"; vacuous: the tree was dirty before the change ({clean_before[:40]!r})")
    return Outcome("✓" if ok else "✗", observed)


def check_summaries(lab: Lab, case: Case) -> Outcome:
    """P4: summaries rewritten by a subset run must keep every paper of results/."""
    repo = complete_tree(lab, case)
    p = lab.run(repo, expand("snakemake --cores 2 all DC --forcerun claims"))
    others = [paper for paper in S3_PAPERS if paper != "diffusion_convergence"]
    lacking = [f"{name} lacks {paper}" for name in ("results/claims.md", "results/report.html", "metrics/claims.json")
               for paper in others if paper not in ((repo / name).read_text(errors="replace")
                                                    if (repo / name).exists() else "")]
    ok = p.rc == 0 and not lacking
    return Outcome("✓" if ok else "✗", f"rc {p.rc}, {jobs_note(p)}; " + ("every paper listed in claims.md, "
                                                                        "report.html, metrics/claims.json"
                                                                        if not lacking else "; ".join(lacking)))


def append_comment(repo: Path) -> None:
    with (repo / "src/iclr26/papers/diffusion_convergence/plots.py").open("a") as handle:
        handle.write("# audit P2\n")


PROVENANCE = [
    ("P1", "the fields carried by every output", "(the reference run)", "resolved config, seed, commit, versions",
     check_fields, {}),
    ("P2", "a tracked file edited (`src/iclr26/papers/diffusion_convergence/plots.py`)", "`snakemake --cores 2 all DC`",
     "`+dirty`", check_dirty, {"change": append_comment}),
    ("P3", "an untracked `src/iclr26/papers/diffusion_convergence/extra.py`", "`snakemake --cores 2 all DC`",
     "`+dirty` (the file changes the code digest)", check_dirty,
     {"change": lambda r: (r / "src/iclr26/papers/diffusion_convergence/extra.py").write_text("X = 1\n")}),
    ("P4", "summaries after a subset run", "`snakemake --cores 2 all DC --forcerun claims` on the S3 tree",
     "every paper", check_summaries, {}),
]


# ============================================================================= the cases, and running them
SECTIONS = {"I": "1. Bad input", "H": "2. Corrupt or hostile data", "K": "3. Faults", "R": "4. Reruns",
            "V": "5. DVC", "P": "6. Provenance"}


def all_cases() -> list[Case]:
    cases = bad_input_cases()
    cases += [Case(cid, "H", what, cmd, exp, fn, data) for cid, what, cmd, exp, fn, data in HOSTILE]
    cases += fault_cases()
    cases += rerun_cases()
    cases += [Case(cid, "V", cmd, cmd, exp, lambda lab, case: dvc_step(lab, case.id)) for cid, cmd, exp in DVC]
    cases += [Case(cid, "P", what, cmd, exp, fn, data) for cid, what, cmd, exp, fn, data in PROVENANCE]
    return cases


def select(cases: list[Case], only: str | None) -> list[Case]:
    if not only:
        return cases
    wanted = {w.strip().upper() for w in only.split(",") if w.strip()}
    unknown = wanted - set(SECTIONS) - {c.id for c in cases}
    if unknown:
        sys.exit(f"--only: unknown section or case {', '.join(sorted(unknown))}")
    return [c for c in cases if c.section in wanted or c.id in wanted]


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_case(lab: Lab, case: Case) -> Result:
    result = Result(case.id, case.section, case.what, case.command, case.expected)
    start, refs, cpu = time.monotonic(), lab.ref_total, children_cpu()
    try:
        outcome = case.check(lab, case)
        result.verdict, result.observed, result.category = outcome.verdict, outcome.observed, outcome.category
    except Skip as why:
        result.verdict, result.observed = "skipped", f"skipped: {why}"
    except Exception as err:  # a harness failure is reported as the case's, never hidden
        result.verdict, result.observed = "✗", f"harness error: {type(err).__name__}: {err}"
        result.category = "harness"
    finally:
        result.wall_s = round(time.monotonic() - start - (lab.ref_total - refs), 1)  # without references
        result.cpu_s = round(children_cpu() - cpu, 1)  # (references included)
        if not lab.keep:
            for suffix in ("", "-twin"):
                lab.discard(lab.workdir / f"{case.id}{suffix}")
    return result


# ============================================================================= the report
def cell(text: str, width: int = 220) -> str:
    text = " ".join(str(text).split()).replace("|", "\\|")
    return text if len(text) <= width else text[: width - 1] + "…"


def tables(results: list[Result]) -> str:
    out = []
    for section, title in SECTIONS.items():
        rows = [r for r in results if r.section == section]
        if not rows:
            continue
        out += [f"## {title} ({len(rows)} cases)", "", "| # | case | command | expected | observed (first line) | "
                "verdict | wall s |", "|---|---|---|---|---|---|---|"]
        out += [f"| {r.id} | {cell(r.what, 80)} | {cell(r.command, 160)} | {cell(r.expected, 80)} | {cell(r.observed)}"
                f" | {r.verdict} | {r.wall_s:.0f} |" for r in rows]
        out.append("")
    return "\n".join(out)


def ids(rows, before: str = " (", after: str = ")") -> str:
    """' (I6, I13)' for some cases; '' for none."""
    named = ", ".join(r.id for r in rows)
    return f"{before}{named}{after}" if named else ""


def totals(results: list[Result]) -> str:
    """The audit's "Totals" section, counted from these results (same bullets, same order)."""
    by: dict[str, list[Result]] = {}
    for r in results:
        by.setdefault(r.section, []).append(r)
    out = ["## Totals", ""]
    if "I" in by:
        rows = by["I"]
        valid = {cid for cid, *_, options in BAD_INPUTS if options.get("valid")}
        bad = [r for r in rows if r.id not in valid]
        not_refused = [r for r in bad if r.verdict == "✗"]

        def cat(name):
            return [r for r in not_refused if r.category == name]

        out += [f"**Bad inputs: {len(rows)} tried.**",
                f"- {sum(r.verdict == '✓' for r in bad)} were refused before any job with one clear line.",
                f"- {sum(r.verdict == '~' for r in bad)} were refused only by a Snakemake error that does not name "
                f"the config key{ids(r for r in bad if r.verdict == '~')}.",
                f"- {sum(r.verdict == '✗' for r in rows if r.id in valid)} valid input(s) were refused"
                f"{ids(r for r in rows if r.id in valid and r.verdict == '✗')}.",
                f"- {sum(r.verdict == '✓' for r in rows if r.id in valid)} valid input(s) were accepted"
                f"{ids(r for r in rows if r.id in valid and r.verdict == '✓')}.",
                f"- {len(not_refused)} were not refused. Of these:",
                f"  - {len(cat('accepted'))} were silently accepted, with wrong or meaningless results or ignored "
                f"settings{ids(cat('accepted'), ': ', '')}.",
                f"  - {len(cat('in_job'))} failed later inside a job{ids(cat('in_job'))}.",
                f"  - {len(cat('traceback'))} gave CLI tracebacks{ids(cat('traceback'))}.",
                f"  - {len(cat('outside'))} created a directory outside the checkout{ids(cat('outside'))}.",
                f"  - {len(cat('identity'))} identity override(s) were accepted{ids(cat('identity'))}."]
        if cat("harness"):
            out.append(f"  - {len(cat('harness'))} could not be judged (a harness error){ids(cat('harness'))}.")
        if any(r.verdict == "skipped" for r in rows):
            out.append(f"- skipped{ids((r for r in rows if r.verdict == 'skipped'), ': ', '')}.")
        out.append("")
    if "K" in by:
        rows = by["K"]
        survived = [r for r in rows if r.verdict in ("✓", "~")]
        message = [r for r in survived if r.verdict == "~"]
        out += [f"**Faults: {len(rows)} injected** (kills, SIGTERM, SIGINT, fault hooks, concurrency, read-only, "
                "disk full).",
                f"- {len(survived)} survived: the same command restarted them, no orphan, lock or temporary file was "
                "left, and the outputs were byte-identical to an uninterrupted run"
                f"{ids(message, ' (', ': its message is not one line)')}."]
        out += [f"- {r.id} did not: {cell(r.observed, 300)}" for r in rows if r.verdict == "✗"]
        out += [f"- {r.id} {r.observed}" for r in rows if r.verdict == "skipped"]
        out.append("")
    if "H" in by:
        rows = by["H"]
        handled = [r for r in rows if r.verdict in ("✓", "note")]
        how = {r.id: " (partly)" if r.category == "partial" else " as a note" if r.verdict == "note" else ""
               for r in rows}
        out += [f"**Corrupt or hostile data: {len(rows)} cases.**",
                f"- {len(handled)} were handled" + (": " + ", ".join(f"{r.id}{how[r.id]}" for r in handled)
                                                     if handled else "") + ".",
                f"- {sum(r.verdict in ('✗', '~') for r in rows)} were not" +
                (":" if any(r.verdict in ("✗", "~") for r in rows) else ".")]
        out += [f"  - {r.id} ({r.what}): {cell(r.observed, 200)}" for r in rows if r.verdict in ("✗", "~")]
        out += [f"- {r.id} {r.observed}" for r in rows if r.verdict == "skipped"]
        out.append("")
    for section, noun in (("R", "Reruns"), ("V", "DVC checks"), ("P", "Provenance checks")):
        if section in by:
            rows = by[section]
            off = [f"{r.id} ({r.verdict})" for r in rows if r.verdict != "✓"]
            out += [f"**{noun}: {len(rows)}.** {sum(r.verdict == '✓' for r in rows)} as expected"
                    + (f"; not: {', '.join(off)}" if off else "") + ".", ""]
    checked = [r for r in results if r.id in WRONG_TABLES]
    if checked or "K" in by:
        wrong = [r for r in checked if r.verdict != "✓"]
        out.append("**Lost or silently wrong.**")
        if checked:
            out.append("- Wrong tables: " + ("; ".join(f"{r.id} ({WRONG_TABLES[r.id]}, {r.verdict})" for r in wrong)
                                             if wrong else f"none of the audit's cases{ids(checked)}") + ".")
        if "K" in by:
            lost = [r for r in by["K"] if r.verdict == "✗"]
            out.append("- Nothing in `results/` was lost in any fault run." if not lost else
                       f"- Fault runs that did not end identical or clean{ids(lost)} (above).")
        out.append("")
    return "\n".join(out)


WRONG_TABLES = {"R14": "`run --override` reused work done under another config",
                "R15": "a hand-run train evaluated under the workflow's config",
                "I10": "duplicated methods inflate n", "I15": "duplicated seeds inflate n",
                "I16": "duplicated seeds pass the 8-seed contract", "I27": "zero-width error bars",
                "I36": "an all-n/a table with rc 0", "R8": "after `--forcerun`, the changed core code never runs"}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", required=True, help="the repository whose HEAD commit is tested")
    parser.add_argument("--only", help="sections (I,H,K,R,V,P) and/or case ids (I10,K18), comma-separated")
    parser.add_argument("--json", help="also write the results as JSON here")
    parser.add_argument("--workdir", help="where the clones go (default: a new temporary folder, removed after)")
    parser.add_argument("--venv", help="the venv whose bin/ goes first on PATH (default: this Python's)")
    parser.add_argument("--keep", action="store_true", help="keep every clone (to look at after)")
    parser.add_argument("--reuse", action="store_true", help="reuse the reference runs an earlier --keep run of the "
                                                             "same commit left in --workdir (for a quick re-check)")
    args = parser.parse_args(argv)

    source = Path(args.repo).resolve()
    venv_bin = Path(args.venv).resolve() / "bin" if args.venv else Path(sys.executable).parent
    if not (venv_bin / "snakemake").exists():
        sys.exit(f"no snakemake in {venv_bin}: run with the project's venv python, or pass --venv")
    workdir = Path(args.workdir).resolve() if args.workdir else Path(tempfile.mkdtemp(prefix="hostile-"))
    if workdir == source or source in workdir.parents:
        sys.exit("--workdir must be outside the repository (the clones' parent folders are checked for escapes)")
    workdir.mkdir(parents=True, exist_ok=True)
    if args.reuse and not args.workdir:
        sys.exit("--reuse needs the --workdir of an earlier --keep run")
    lab = Lab(source, workdir, venv_bin, args.keep, args.reuse)
    cases = select(all_cases(), args.only)
    print(f"hostile: {len(cases)} cases of {AUDIT} on {source} @ {lab.commit[:12]}, in {workdir}", file=sys.stderr)

    started, results = time.monotonic(), []
    try:
        for case in cases:
            result = run_case(lab, case)
            results.append(result)
            print(f"{result.id:<4} {result.verdict:<7} {result.wall_s:7.1f} s {result.cpu_s:6.0f} cpu-s  "
                  f"{cell(result.observed, 150)}",
                  file=sys.stderr, flush=True)
    finally:
        if not args.keep:
            for folder in sorted(workdir.iterdir()) if workdir.exists() else []:
                lab.discard(folder)
            if not args.workdir:
                shutil.rmtree(workdir, ignore_errors=True)
    wall = time.monotonic() - started

    print(f"# Re-measurement of the 2026-12-02 reliability audit\n\nCommit {lab.commit} of {source}; "
          f"{len(results)} cases; wall time {wall / 60:.1f} min on {os.cpu_count()} cores "
          f"({children_cpu() / 60:.1f} CPU-min, load average at the end {os.getloadavg()[0]:.1f}), of which references "
          f"{lab.ref_total / 60:.1f} min ({', '.join(f'{k} {v:.0f} s' for k, v in lab.ref_walls.items()) or 'none'})."
          f" Shorthands: `DC` = `{DC}`, `S3` = `{S3}`.\n")
    print(tables(results))
    print(totals(results))
    if args.json:
        counts = Counter(r.verdict for r in results)
        Path(args.json).write_text(json.dumps({
            "audit": AUDIT, "repo": str(source), "commit": lab.commit, "wall_s": round(wall, 1),
            "cpu_s": round(children_cpu(), 1),
            "reference_walls_s": lab.ref_walls,
            "counts": dict(counts), "cases": [asdict(r) for r in results], "totals_markdown": totals(results)},
            indent=2, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
