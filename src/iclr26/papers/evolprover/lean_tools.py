"""The real Lean 4 toolchain at full scale: installing elan and the pinned toolchain, building the
benchmark's Lake project (Mathlib from its cache), and checking whole proofs with `lake env lean`.

Install (the acquire stage of the MiniF2F dataset, on a CPU node with internet; `install`):
    1. elan: the release tarball `elan-<target>.tar.gz` (url + sha256 pinned in `lean.elan`),
       unpacked; its `elan-init -y --no-modify-path --default-toolchain none` installs elan into
       ELAN_HOME (no toolchain is downloaded by elan itself).
    2. the toolchain: the Lean release archive (url + sha256 pinned in `lean.toolchain_archive`,
       `lean-<version>-linux.tar.zst` or `.zip`) unpacked into
       ELAN_HOME/toolchains/<origin with / as -->---<version>, elan's own layout, so `lake` and
       `lean` (elan's proxies) resolve the project's lean-toolchain file to it offline.
    3. the toolchain named by the corpus's own `lean-toolchain` file (read after the pinned git
       checkout) must equal `lean.toolchain`: one toolchain per benchmark project, never a guess.
    4. `lake exe cache get` (Mathlib's prebuilt .olean files at the manifest's Mathlib commit),
       then `lake build` of the project (its `lake-manifest.json` pins every dependency commit).
Check (the evaluate stage at full scale; `check_problems`): for each problem one Lean file with the
benchmark's header and every distinct sampled proof as its own theorem `<name>_p<i>`, each followed
by `#print axioms <name>_p<i>`; `lake env lean --json <file>` in the project, a pool of processes
(one per CPU). Lean reports one JSON object per line (severity error | warning | information, pos,
data). A proof passes iff its theorem's lines carry no error and no "declaration uses sorry"
warning AND its `#print axioms` line answers with the axioms it depends on, none of them sorryAx:
a theorem Lean never elaborated (a sample that broke the file's later syntax) has no such answer
and fails. One file per problem loads Mathlib once for all its samples.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tarfile
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from iclr26.core.errors import ConfigError, DataError

TOOLCHAIN = re.compile(r"^leanprover/lean4:v\d+\.\d+\.\d+(-rc\d+)?$")
HEX64 = re.compile(r"^[0-9a-f]{64}$")
# text no sampled proof may contain: it would end the file, change the rules, or add an axiom
BANNED = ("sorry", "admit", "axiom", "#exit", "/-", "-/", "import", "set_option", "macro", "elab",
          "macro_rules", "elab_rules", "syntax", "notation", "infix", "infixl", "infixr", "prefix", "postfix",
          "attribute", "run_cmd", "@[implemented_by", "@[extern", "unsafe", "opaque")
# the words of BANNED match as whole Lean tokens (audit 13d L7: `importance`, `h_axiom_free` or `elabor` are
# names, not commands); the symbols match anywhere. Whole-token matching no longer catches `macro_rules` or
# `elab_rules` through `macro` / `elab`, so they and the other commands that change the syntax or the
# attributes (all Lean keywords, never names) are listed themselves (audit 13e N6)
_BANNED_RE = re.compile("|".join(
    rf"(?<![\w.'!?]){re.escape(b)}(?![\w'!?])" if b.isidentifier() else re.escape(b) for b in BANNED))


def banned(text: str) -> bool:
    """The text has something of BANNED (a word as a whole token, a symbol anywhere)."""
    return _BANNED_RE.search(text) is not None


# ----------------------------------------------------------------------------- pins (static)
def toolchain_dir_name(toolchain: str) -> str:
    """elan's folder name of a toolchain: leanprover/lean4:v4.24.0 -> leanprover--lean4---v4.24.0."""
    if not TOOLCHAIN.match(toolchain):
        raise ConfigError(f"lean.toolchain must be a pinned release like leanprover/lean4:v4.24.0, got {toolchain!r}")
    origin, version = toolchain.split(":")
    return origin.replace("/", "--") + "---" + version


def pin_problems(lean: dict) -> list[str]:
    """What the preflight reports about the `lean:` section (no network): a toolchain that is a
    channel (stable, nightly) or not a release tag, a download without a 64-hex sha256, an archive
    URL that is not that toolchain's release."""
    problems = []
    toolchain = str(lean.get("toolchain", ""))
    if not TOOLCHAIN.match(toolchain):
        problems.append(f"lean.toolchain {toolchain!r} is not a pinned release (leanprover/lean4:vX.Y.Z)")
    for key in ("elan", "toolchain_archive"):
        spec = lean.get(key) or {}
        if not spec.get("url") or not HEX64.match(str(spec.get("sha256", ""))):
            problems.append(f"lean.{key} needs a url and a 64-hex sha256")
    archive = str((lean.get("toolchain_archive") or {}).get("url", ""))
    version = toolchain.split(":v", 1)[-1]
    if TOOLCHAIN.match(toolchain) and f"lean-{version}-" not in archive.rsplit("/", 1)[-1]:
        problems.append(f"lean.toolchain_archive {archive!r} is not the release archive of {toolchain}")
    return problems


# ----------------------------------------------------------------------------- install
def _unpack(archive: Path, dest: Path, strip_top: bool) -> None:
    """Unpack a .tar.gz / .tar.zst / .zip into dest (dropping the archive's single top folder when
    strip_top), keeping the executable bits (zip stores them in external_attr)."""
    tmp = dest.with_name(dest.name + ".unpack")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    name = archive.name
    if name.endswith(".zip"):
        with zipfile.ZipFile(archive) as z:
            for info in z.infolist():
                path = Path(z.extract(info, tmp))
                mode = info.external_attr >> 16
                if mode and not info.is_dir():
                    path.chmod(mode & 0o777)
    elif name.endswith(".tar.zst"):   # Python's tarfile reads no zstd (before 3.14): GNU tar + zstd
        subprocess.run(["tar", "--zstd", "-xf", str(archive), "-C", str(tmp)], check=True, capture_output=True)
    elif name.endswith((".tar.gz", ".tgz", ".tar")):
        with tarfile.open(archive) as t:
            t.extractall(tmp, filter="tar")
    else:
        raise DataError(f"{archive}: unknown archive type")
    top = list(tmp.iterdir())
    src = top[0] if strip_top and len(top) == 1 and top[0].is_dir() else tmp
    if dest.exists():
        shutil.rmtree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(src), str(dest))
    shutil.rmtree(tmp, ignore_errors=True)


def environ(home: Path) -> dict:
    """The environment of every Lean command: ELAN_HOME and its bin first on PATH."""
    env = dict(os.environ)
    env["ELAN_HOME"] = str(home)
    env["PATH"] = f"{home / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return env


def install(lean: dict, home: Path, downloads: Path, log=print) -> dict:
    """elan and the pinned toolchain into `home` (ELAN_HOME), every download checked by sha256."""
    from iclr26.core.acquire import download

    problems = pin_problems(lean)
    if problems:
        raise ConfigError("; ".join(problems))
    home, downloads = Path(home), Path(downloads)
    elan = lean["elan"]
    tarball = download(elan["url"], downloads / elan["url"].rsplit("/", 1)[-1], elan["sha256"])
    unpacked = downloads / "elan"
    _unpack(tarball, unpacked, strip_top=False)
    init = unpacked / "elan-init"
    if not init.exists():
        raise DataError(f"{elan['url']}: no elan-init in the archive")
    init.chmod(0o755)
    subprocess.run([str(init), "-y", "--no-modify-path", "--default-toolchain", "none"], env=environ(home),
                   check=True, capture_output=True, text=True)
    log(f"elan installed into {home}")
    archive = lean["toolchain_archive"]
    path = download(archive["url"], downloads / archive["url"].rsplit("/", 1)[-1], archive["sha256"])
    dest = home / "toolchains" / toolchain_dir_name(lean["toolchain"])
    _unpack(path, dest, strip_top=True)
    for tool in ("lean", "lake"):
        if not (dest / "bin" / tool).exists():
            raise DataError(f"{archive['url']}: no bin/{tool} in the toolchain archive")
    log(f"{lean['toolchain']} unpacked into {dest}")
    return {"elan_sha256": elan["sha256"], "toolchain": lean["toolchain"], "archive_sha256": archive["sha256"],
            "toolchain_dir": str(dest.relative_to(home))}


def project_toolchain(project: Path, lean: dict) -> str:
    """The project's lean-toolchain file, which must name the pinned toolchain."""
    text = (Path(project) / "lean-toolchain").read_text().strip()
    if text != lean["toolchain"]:
        raise DataError(f"{project}/lean-toolchain names {text!r}, the config pins {lean['toolchain']!r} "
                        "(lean.toolchain must be the benchmark project's own)")
    return text


def build_commands() -> list[list[str]]:
    """Mathlib's prebuilt cache at the manifest's commit, then the project (run in the project)."""
    return [["lake", "exe", "cache", "get"], ["lake", "build"]]


def build_project(project: Path, home: Path, log=print, runner=subprocess.run) -> None:
    for cmd in build_commands():
        log(f"{' '.join(cmd)} in {project}")
        done = runner(cmd, cwd=str(project), env=environ(home), capture_output=True, text=True)
        if done.returncode != 0:
            tail = (done.stderr or done.stdout or "").strip().splitlines()[-1:] or ["(no output)"]
            raise DataError(f"{' '.join(cmd)} failed in {project}: {tail[0]}")


# ----------------------------------------------------------------------------- checking
def check_command(file: Path) -> list[str]:
    """`lake env lean --json <file>`, run in the benchmark's project (Mathlib on LEAN_PATH)."""
    return ["lake", "env", "lean", "--json", str(file)]


def proof_file(header: str, statement: str, proofs: list[str], name: str) -> tuple[str, list[dict]]:
    """One Lean file: the header, then for each proof the statement (its theorem renamed
    `<name>_p<i>`) with that tactic block, then `#print axioms <name>_p<i>`. Returns the text and,
    per proof, {name, first, last, axioms_line} (1-based lines). `statement` is the theorem text up
    to `:= by` (its proof, e.g. `sorry`, is dropped)."""
    cut = statement.rfind(":= by")
    if cut < 0:
        raise DataError(f"{name}: the statement has no ':= by'")
    head = statement[:cut].rstrip()
    m = re.search(r"\b(theorem|lemma)\s+(\S+)", head)
    if not m:
        raise DataError(f"{name}: no theorem in the statement")
    lines = header.rstrip("\n").split("\n") + [""]
    spans = []
    for i, proof in enumerate(proofs):
        thm = f"{name}_p{i}"
        text = head[:m.start(2)] + thm + head[m.end(2):] + " := by\n  " + "\n  ".join(proof.strip().splitlines())
        first = len(lines) + 1
        lines += text.split("\n")
        last = len(lines)
        lines.append(f"#print axioms {thm}")
        spans.append({"name": thm, "first": first, "last": last, "axioms_line": len(lines)})
        lines.append("")
    return "\n".join(lines) + "\n", spans


def parse_messages(stdout: str) -> list[dict]:
    """Lean's `--json` output: one JSON object per line; other lines (a crash note such as
    'Stack overflow detected. Aborting.') are skipped, and the missing answers then fail the proofs."""
    out = []
    for line in stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                msg = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(msg, dict) and "severity" in msg:
                out.append(msg)
    return out


SORRY = re.compile(r"declaration uses ['`]sorry['`]")
AXIOMS = re.compile(r"^'(?P<name>[^']+)' (depends on axioms: \[(?P<axioms>[^\]]*)\]|does not depend on any axioms)")


def verdicts(messages: list[dict], spans: list[dict], proofs: list[str] | None = None) -> list[bool]:
    """Per proof: passes iff no error or sorry warning on its lines, its `#print axioms` answered
    and the answer lists no sorryAx, and its text has nothing of BANNED."""
    printed = {}
    bad_lines = set()
    for msg in messages:
        line = int((msg.get("pos") or {}).get("line", 0))
        sev, data = msg.get("severity"), str(msg.get("data", ""))
        if sev == "error" or (sev == "warning" and SORRY.search(data)):
            bad_lines.add(line)
        m = AXIOMS.match(data) if sev in ("information", "info") else None
        if m:
            axioms = [a.strip() for a in (m.group("axioms") or "").split(",") if a.strip()]
            printed[m.group("name")] = (line, axioms)
    out = []
    for i, span in enumerate(spans):
        text_ok = proofs is None or not banned(proofs[i])
        clean = not any(span["first"] <= ln <= span["axioms_line"] for ln in bad_lines)
        ans = printed.get(span["name"])
        answered = ans is not None and ans[0] == span["axioms_line"] and "sorryAx" not in ans[1]
        out.append(bool(text_ok and clean and answered))
    return out


def check_problems(problems: list[dict], project: Path, home: Path, work: Path, header: str, workers: int = 1,
                   timeout: float = 600.0, runner=subprocess.run) -> list[list[bool]]:
    """problems: [{name, lean (the statement file), proofs: [tactic blocks]}] -> per problem, per
    proof, whether Lean accepts it. Distinct proofs are checked once; a file that times out or
    crashes fails the proofs Lean did not answer for."""
    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)

    def one(item):
        distinct = sorted(set(p.strip() for p in item["proofs"]))
        if not distinct:
            return []
        text, spans = proof_file(header, _statement(item["lean"]), distinct, _safe(item["name"]))
        path = work / f"{_safe(item['name'])}.lean"
        path.write_text(text)
        try:
            done = runner(check_command(path), cwd=str(project), env=environ(home), capture_output=True,
                          text=True, timeout=timeout)
            stdout = done.stdout or ""
        except subprocess.TimeoutExpired as err:
            stdout = err.stdout.decode() if isinstance(err.stdout, bytes) else (err.stdout or "")
        ok = dict(zip(distinct, verdicts(parse_messages(stdout), spans, distinct)))
        return [ok.get(p.strip(), False) for p in item["proofs"]]

    with ThreadPoolExecutor(max_workers=max(1, int(workers))) as pool:
        return list(pool.map(one, problems))


def _statement(lean: str) -> str:
    """The theorem text of a benchmark file (header lines dropped; they are the file's own header)."""
    from .lean_repl import strip_header

    return strip_header(lean)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", name)


# ----------------------------------------------------------------------------- the acquire step
SELF_CHECK = [("theorem evolprover_self_check (a b : ℝ) : 2 * a * b ≤ a ^ 2 + b ^ 2 := by sorry",
               ["nlinarith [sq_nonneg (a - b)]", "nlinarith [sq_nonneg (a + b)]"], [True, False])]


def setup(lean: dict, project: Path, log=print, runner=subprocess.run) -> dict:
    """On the acquire node: elan + the pinned toolchain into lean.home, the project's lean-toolchain
    checked against the pin, Mathlib's cache fetched, then a self-check that Lean accepts a true
    proof and rejects a false one in this project (so a broken install fails here, not as pass@k 0)."""
    home = Path(lean["home"])
    info = install(lean, home, home / "downloads", log)
    info["project_toolchain"] = project_toolchain(project, lean)
    build_project(project, home, log, runner)
    for statement, proofs, want in SELF_CHECK:
        got = check_problems([{"name": "self_check", "lean": statement, "proofs": proofs}], project, home,
                             home / "self_check", lean["header"], runner=runner)[0]
        if got != want:
            raise DataError(f"Lean self-check in {project}: expected {want} for a true and a false proof, got {got}")
    log("Lean self-check passed (a true proof accepted, a false one rejected)")
    return info


def main(argv=None) -> int:
    """`python -m iclr26.papers.evolprover.lean_tools --proofs P.jsonl --project DIR --home DIR --out O.jsonl`:
    the verifier on its own (rows {name, lean, proofs}; writes {name, correct: [bool]})."""
    import argparse

    from iclr26.core.io import read_jsonl, write_jsonl

    from .minilean import HEADER

    ap = argparse.ArgumentParser()
    ap.add_argument("--proofs", required=True)
    ap.add_argument("--project", required=True)
    ap.add_argument("--home", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--timeout", type=float, default=600.0)
    args = ap.parse_args(argv)
    rows = read_jsonl(Path(args.proofs))
    got = check_problems(rows, Path(args.project), Path(args.home), Path(args.out).with_suffix(".work"), HEADER,
                         args.workers, args.timeout)
    write_jsonl(Path(args.out), [{"name": r["name"], "correct": c} for r, c in zip(rows, got)])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
