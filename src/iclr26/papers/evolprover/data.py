"""The Lean corpora: tiny writers in the real layouts, the readers (one parser for both scales),
and the full-scale acquisition.

Layouts (tiny writes them, full downloads them, `read_problems` reads both):
    seeds            lean_workbook.json    Lean-Workbook rows {id, split, natural_language_statement, answer,
                                           tags, formal_statement (no header, `:= by sorry`), proof (a list
                                           of whole `theorem ... := by ...` texts), status}: the seed corpus
A JSON file is read as one JSON array or as JSON lines (read_records), whichever it is.
    minif2f          MiniF2F/Test/<name>.lean (one theorem per file, `:= by sorry`) and
                     MiniF2F/Test.lean (the imports), as yangky11/miniF2F-lean4
    formalmath_lite  FormalMATH_lite.json  rows {theorem_names, autoformalization (the Lean file: imports and
                                           the theorem with `:= by sorry`), refined_statement, source, ...}
                                           (SphereLab; the official FormalMATH-Bench code reads
                                           item['autoformalization'] and opens the file as JSON lines)
    ineq_comp        benchmark/<family>_<subset>.jsonl rows {name, formal_statement}, families amgm,
                     cauchy, misc, subsets seed, type1, type2, as haoyuzhao123/LeanIneqComp
Tiny statements are drawn by the seed generator (evol.py); a statement is a test statement iff the
hash of its statement falls in the test partition (evol.is_test); the evolutions drop outputs in that
partition, and stages.training_set drops any training problem whose prompt is a test prompt up to renaming
(stages.decontam_key) and every evolved problem descending from one it drops (what it does not screen: its
docstring).
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import textwrap
from dataclasses import replace
from pathlib import Path

import numpy as np

from iclr26.core.errors import DataError
from iclr26.core.io import read_jsonl, write_json, write_jsonl

from . import evol
from . import minilean as ml

INEQ = ("amgm", "cauchy", "misc")


is_test = evol.is_test


def draw(n: int, seed: int, families, test: bool, fraction: float) -> list[tuple]:
    """The first n seed-generator problems of one partition (train or test), in the generator's
    order (drawn lazily: no problem beyond the n-th of the partition is generated or checked)."""
    out = []
    for item in evol.seed_stream(seed, list(families)):
        if is_test(item[0], fraction) == test:
            out.append(item)
            if len(out) == n:
                break
    return out


def _write_lean(path: Path, st: ml.Statement) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(st.lean())


def write_tiny(dataset: str, spec: dict, out_dir: Path) -> dict:
    """The dataset's files at tiny scale (seeded generator, kernel-verified proofs)."""
    frac, seed = spec["test_fraction"], spec["data_seed"]
    if dataset == "seeds":
        rows = draw(spec["n_seeds"] + spec["n_reserve"], seed, spec["families"], False, frac)
        out = [{"id": f"lean_workbook_{i}", "natural_language_statement": f"({fam} family) prove the statement",
                "formal_statement": replace(st, name=f"lean_workbook_{i}").lean(), "proof": [proof],
                "status": "proved"} for i, (st, proof, fam) in enumerate(rows)]
        write_json(out_dir / spec["file"], out)
        return {"rows": len(out)}
    if dataset == "minif2f":
        rows = draw(spec["n_problems"], seed, spec["families"], True, frac)
        names = []
        for i, (st, _, fam) in enumerate(rows):
            name = f"mini_{fam}_{i}"
            _write_lean(out_dir / "MiniF2F" / "Test" / f"{name}.lean", replace(st, name=name))
            names.append(name)
        (out_dir / "MiniF2F" / "Test.lean").write_text("".join(f"import MiniF2F.Test.{n}\n" for n in names))
        return {"problems": len(names)}
    if dataset == "formalmath_lite":
        rows = draw(spec["n_seed_problems"], seed, spec["families"], True, frac)
        rng = np.random.default_rng(seed)
        out = []
        for i, (st, proof, _) in enumerate(rows):   # held-out seeds in other domains and difficulties
            dom = spec["domains"][i % len(spec["domains"])]
            for kind, item in (("domain", evol.domain_variant(st, proof, dom)),
                               ("difficulty", evol.difficulty_variant(st, proof, int(rng.choice([1, -1])), rng))):
                got = item and evol.verified(item[0], item[1], f"formalmath_{kind}_{i}")
                if got:
                    out.append({"theorem_names": got[0].name, spec["statement_field"]: got[0].lean()})
        write_json(out_dir / spec["file"], out)
        return {"problems": len(out)}
    if dataset == "ineq_comp":   # the real layout: benchmark/<family>_<subset>.jsonl rows {name, formal_statement}
        rows = draw(spec["n_seed_problems"], seed, INEQ, True, frac)
        files: dict = {}
        for i, (st, proof, fam) in enumerate(rows):
            type1 = evol.type_one(st, proof, spec.get("type1_fresh", "new"))
            for subset, item in (("seed", (st, proof)), ("type1", type1),
                                 ("type2", evol.type_two(st, proof))):
                got = item and evol.verified(item[0], item[1], f"{fam}_p{i}_{subset}")
                if got:
                    text = got[0].header_text() + " := by\n"
                    row = {"name": got[0].name, "formal_statement": text}
                    files.setdefault(f"{fam}_{subset}.jsonl", []).append(row)
        (out_dir / "benchmark").mkdir(parents=True, exist_ok=True)
        for fname, items in files.items():
            write_jsonl(out_dir / "benchmark" / fname, items)
        return {f: len(v) for f, v in sorted(files.items())}
    raise ValueError(f"unknown dataset {dataset!r}")


# ----------------------------------------------------------------------------- reading (both scales)
def read_records(path: Path) -> list[dict]:
    """The rows of a JSON file that is either one JSON array (or one object) or JSON lines: the hub's
    files come as either (FormalMATH's own reader opens its file with `jsonlines`; `datasets`' to_json
    writes JSON lines), and nothing in the file's name says which."""
    text = Path(path).read_text(encoding="utf-8")
    try:
        got = json.loads(text)
    except json.JSONDecodeError:   # JSON lines: one object per line
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    return got if isinstance(got, list) else [got]


_DECL = re.compile(r"^[ \t]*(?:@\[[^\]]*\][ \t]*)?(?:(?:private|protected|nonrec|noncomputable|partial|unsafe)[ \t]+)*"
                   r"(?:theorem|lemma|example)\b[ \t]*([^\s(:{\[]*)", re.M)
_BY = re.compile(r":=\s*by\b")


def tactic_block(proof: str, name: str | None = None) -> str | None:
    """A proof as the tactic block the prover writes after `:= by` (audit H2): Lean-Workbook stores a proof
    as the whole `theorem ... := by <tactics>` text (after any imports), so a proof that holds a declaration
    is cut after the main declaration's `:= by` (the one named `name`, else the last; modifiers such as
    `private` and attributes allowed) up to the next declaration; one that is a tactic block already is kept
    whole (its own `have ... := by` lines are not cut). The block is re-indented: its lines keep their
    indentation relative to each other, every line after the first two spaces in, as the prompt's
    `:= by\n  ` expects (audit 13e N4: a 4-space block no longer misparses). None for a declaration without
    `:= by` (a term-mode proof: no tactic block to train on), for an empty block, and for a block that uses
    a helper declared beside the main one (it would not compile alone). The same function prepares every
    seed, in or outside MiniLean's fragment, and the seeds lean-dojo traces (leandojo_trace)."""
    decls = list(_DECL.finditer(proof))
    if not decls:
        return _reindent(proof.split("\n"))
    main = next((d for d in decls if name is not None and d.group(1) == name), decls[-1])
    end = next((d.start() for d in decls if d.start() > main.start()), len(proof))
    m = _BY.search(proof, main.end(), end)
    if m is None:
        return None
    first, _, rest = proof[m.end():end].partition("\n")
    block = _reindent(rest.split("\n"), first)
    helpers = {d.group(1) for d in decls if d is not main and d.group(1)}
    if block is None or any(re.search(rf"(?<![\w.']){re.escape(h)}(?![\w'])", block) for h in helpers):
        return None
    return block


def _reindent(lines: list[str], first: str = "") -> str | None:
    """`first` (the rest of the `:= by` line) and the dedented `lines` as one block, every line after the
    first two spaces in."""
    body = [ln.rstrip() for ln in textwrap.dedent("\n".join(lines)).split("\n")]
    out = ([first.strip()] if first.strip() else []) + body
    while out and not out[0]:
        out.pop(0)
    while out and not out[-1]:
        out.pop()
    if not out:
        return None
    return out[0] + "".join("\n" + ("  " + ln if ln else "") for ln in out[1:])


def _lean_text(text: str) -> str:
    """A statement field's Lean source, without a ```lean / ```lean4 fence if one wraps it."""
    m = re.search(r"```lean4?\s*\n(.*?)(?:```|$)", text, re.S)
    return m.group(1) if m else text


def read_problems(dataset: str, spec: dict, raw: Path) -> list[dict]:
    """[{name, subset, lean, proof?}] from the dataset's files in its real layout."""
    rows = []
    if dataset == "seeds":
        for r in read_records(raw / spec["file"]):
            proofs = r.get("proof") or []
            proof = proofs[0] if isinstance(proofs, list) and proofs else proofs if isinstance(proofs, str) else None
            rows.append({"name": str(r["id"]), "subset": "seed", "lean": r["formal_statement"], "proof": proof})
    elif dataset == "minif2f":
        for path in sorted((raw / "MiniF2F" / "Test").glob("*.lean")):
            rows.append({"name": path.stem, "subset": "test", "lean": path.read_text()})
    elif dataset == "formalmath_lite":
        records = read_records(raw / spec["file"])
        if spec.get("rows") is not None and len(records) != spec["rows"]:   # audit 13e N5: the Lite set, not a copy
            raise DataError(f"{spec.get('hub_id', 'FormalMATH-Lite')}/{spec['file']} at {spec.get('revision')}: "
                            f"{len(records)} rows, the FormalMATH-Lite set has {spec['rows']} "
                            "(data.formalmath_lite.rows)")
        for i, r in enumerate(records):
            name = r.get("theorem_names") or f"formalmath_{i}"
            name = name[0] if isinstance(name, list) else name
            rows.append({"name": str(name), "subset": "test", "lean": _lean_text(r[spec["statement_field"]])})
    elif dataset == "ineq_comp":   # haoyuzhao123/LeanIneqComp benchmark/{amgm,cauchy,misc}_{seed,type1,type2}.jsonl
        for subset in ("seed", "type1", "type2"):
            for fam in INEQ:
                path = raw / "benchmark" / f"{fam}_{subset}.jsonl"
                for r in read_jsonl(path) if path.exists() else []:
                    rows.append({"name": str(r["name"]), "subset": subset, "lean": r["formal_statement"]})
    else:
        raise ValueError(dataset)
    return rows


def parse_rows(rows: list[dict]) -> list[dict]:
    """Each row with its parsed statement: the prover's prompt and whether MiniLean covers it. Every
    proof becomes its tactic block (tactic_block), whatever its fragment; MiniLean checks those inside it."""
    out = []
    for r in rows:
        try:
            st = ml.parse_theorem(r["lean"])
        except ml.Unsupported:
            continue
        item = {**r, "prompt": st.prompt(), "in_fragment": st.in_fragment, "statement": st.header_text()}
        if r.get("proof") is not None:
            proof = item["proof"] = tactic_block(r["proof"], r.get("name"))
            if st.in_fragment and proof is not None:
                item["verified"] = ml.check(st, proof)
        out.append(item)
    return out


# ----------------------------------------------------------------------------- full scale
def git_checkout(spec: dict, out_dir: Path, log=print) -> dict:
    """Clone spec.git at spec.commit (a 40-hex pin), check that the pinned folder's git tree id is
    spec.tree, and copy that folder's files (MiniF2F/Test/*.lean) into out_dir."""
    work = out_dir / ".clone"
    if work.exists():
        shutil.rmtree(work)
    run = lambda *a: subprocess.run(a, cwd=work, check=True, capture_output=True, text=True).stdout.strip()  # noqa: E731
    work.mkdir(parents=True)
    try:
        run("git", "init", "-q")
        run("git", "remote", "add", "origin", spec["git"])
        run("git", "fetch", "-q", "--depth", "1", "origin", spec["commit"])
        run("git", "checkout", "-q", "FETCH_HEAD")
        tree = run("git", "rev-parse", f"HEAD:{spec['folder']}")
    except subprocess.CalledProcessError as err:
        raise DataError(f"git {spec['git']} at {spec['commit']}: {err.stderr.strip().splitlines()[-1]}") from None
    if spec.get("tree") and tree != spec["tree"]:
        raise DataError(f"{spec['git']}: {spec['folder']} has tree {tree}, the config pins {spec['tree']}")
    dest = out_dir / spec["folder"]
    shutil.copytree(work / spec["folder"], dest, dirs_exist_ok=True)
    for extra in spec.get("files", []):
        (out_dir / extra).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(work / extra, out_dir / extra)
    if spec.get("lean_project"):   # the whole checkout is the Lake project proofs are checked in
        shutil.copytree(work, out_dir / "project", ignore=shutil.ignore_patterns(".git"), dirs_exist_ok=True)
    shutil.rmtree(work)
    files = sorted(dest.rglob("*.lean"))
    log(f"{spec['git']} @ {spec['commit'][:12]}: {len(files)} files under {spec['folder']}")
    return {"commit": spec["commit"], "tree": tree, "files": len(files)}


def hub_file(spec: dict, out_dir: Path) -> dict:
    """A hub dataset file at a pinned commit (spec: hub_id, file, revision, sha256 optional)."""
    from huggingface_hub import hf_hub_download

    from iclr26.core.acquire import check_content

    try:
        path = Path(hf_hub_download(spec["hub_id"], spec["file"], repo_type="dataset", revision=spec["revision"],
                                    endpoint=spec.get("endpoint")))
    except Exception as err:  # the hub client raises many types: one line naming the file
        raise DataError(f"cannot download {spec['hub_id']}/{spec['file']} at {spec['revision']}: "
                        f"{str(err).strip().splitlines()[0]}") from None
    dest = out_dir / spec["file"]
    shutil.copy2(path, dest)
    digest = check_content(dest, spec["hub_id"], spec.get("sha256"))
    return {"hub_id": spec["hub_id"], "revision": spec["revision"], "sha256": digest}


def acquire_full(dataset: str, spec: dict, out_dir: Path, log=print) -> dict:
    if spec["source"] == "git":
        return git_checkout(spec, out_dir, log)
    if spec["source"] == "hub":
        return hub_file(spec, out_dir)
    raise ValueError(f"data.{dataset}.source must be synthetic, git or hub, got {spec['source']!r}")
