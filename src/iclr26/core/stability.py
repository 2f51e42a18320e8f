"""Is a verdict stable? A paper's claims on two disjoint seed sets, side by side.

    python -m iclr26 stability --paper P --seeds 100-107 [--scale tiny] [--cores 2]

Set A is the paper's own seeds at that scale (or `--against`), set B the given ones; the scale, the
paper's methods and the overrides are config/config.yaml's (what `snakemake all` runs) unless given. Each set's
evaluate jobs run through Snakemake (the jobs of `snakemake all --config 'papers=[P]' 'seeds=[...]'`;
finished ones are not redone), and each set's claims are checked by `core.claims.check_claims` on its
records, exactly as tabulate checks them. Per claim it prints both verdicts, both 95% intervals,
whether they overlap, and FLIPS where the verdicts differ and at least one is decided (not
inconclusive, not untestable here): such a verdict is seed-set luck.

Nothing of results/P is rewritten: set B's claims and the comparison go to
results/P/stability/seeds-<B>/{claims.json,stability.json,stability.md}, removed first so that a failed
run leaves nothing stale. Run folders are keyed by seed block, so set B's run beside set A's in runs/;
a paper whose acquire or prepare read the seed list (`seed_list_stages`) would remake its data for
set B, so set B of such a paper runs in its own Snakemake folder, stability/<scale>/P/seeds-<B>/.
"""
from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

from .claims import INCONCLUSIVE, UNTESTABLE
from .config import MAX_SEED, REPO_ROOT, check_seed_list, seed_blocks
from .errors import ConfigError, PipelineError

UNDECIDED = (INCONCLUSIVE, UNTESTABLE)
MAX_SET = 10_000  # seeds in one set (each seed block is a job)
OUTPUTS = ("claims.json", "stability.json", "stability.md")
OWN = " (the paper's own)"


def parse_seeds(text: str, where: str = "--seeds") -> list[int]:
    """'100-107' -> [100..107], '100,101,105' -> [100, 101, 105], mixed '0-3,9' too; else one ConfigError."""
    seeds: list[int] = []
    for item in str(text).split(","):
        found = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", item)
        if not found:
            raise ConfigError(f"{where} {text!r}: expected seeds such as 100-107 or 100,101,105")
        lo, hi = int(found[1]), int(found[2] or found[1])
        if hi > MAX_SEED:
            raise ConfigError(f"{where}: seed {hi} is not allowed; allowed: integers from 0 to {MAX_SEED}")
        if hi < lo:
            raise ConfigError(f"{where} {text!r}: the range {item.strip()} runs backwards (write {hi}-{lo})")
        if len(seeds) + hi - lo + 1 > MAX_SET:
            raise ConfigError(f"{where} {text!r}: more than {MAX_SET} seeds in one set")
        seeds.extend(range(lo, hi + 1))
    return check_seed_list(seeds, where)


def seed_label(seeds) -> str:
    """[100..107] -> 'seeds-100-107', [1, 4, 9] -> 'seeds-1_4_9' (the run folders' block names)."""
    return "seeds-" + seed_blocks(list(seeds), len(seeds))[0][1:]


# ----------------------------------------------------------------------------- the comparison
def _num(x) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def _side(claim: dict | None) -> dict:
    if claim is None:
        return {"verdict": None}
    est = claim.get("estimate") or {}
    side = {"verdict": claim.get("verdict"), **{k: _num(est.get(k)) for k in ("value", "lo", "hi")},
            "n": est.get("n")}
    return {**side, "reason": claim["reason"]} if claim.get("reason") else side


def overlap(a: dict, b: dict) -> bool | None:
    """Whether the intervals [lo, hi] of two sides share a point; None when either lacks one."""
    if None in (a.get("lo"), a.get("hi"), b.get("lo"), b.get("hi")):
        return None
    return a["lo"] <= b["hi"] and b["lo"] <= a["hi"]


def flips(a: str | None, b: str | None) -> bool:
    """A decided verdict on one set and a different verdict on the other (verdicts are opaque strings)."""
    return a is not None and b is not None and a != b and (a not in UNDECIDED or b not in UNDECIDED)


def compare_claims(claims_a: list[dict], claims_b: list[dict]) -> list[dict]:
    """One row per claim id (counted claims first, then checks; each in set A's order, then claims only
    set B has): both sides' verdict and effect [lo, hi], whether the intervals overlap, whether it flips."""
    by_a, by_b = {c["id"]: c for c in claims_a}, {c["id"]: c for c in claims_b}
    rows = []
    for cid in [*by_a, *(i for i in by_b if i not in by_a)]:
        first = by_a.get(cid) or by_b[cid]
        a, b = _side(by_a.get(cid)), _side(by_b.get(cid))
        row = {"id": cid, "kind": first.get("kind", "claim"), "claim": first.get("claim", ""),
               "test": first.get("test"), "a": a, "b": b, "overlap": overlap(a, b),
               "flips": flips(a["verdict"], b["verdict"])}
        rows.append({**row, "note": first["note"]} if first.get("note") else row)   # what the project knows
    return sorted(rows, key=lambda r: r["kind"] == "check")


def summary(rows: list[dict]) -> dict:
    counted = [r for r in rows if r["kind"] != "check"]
    return {"claims": len(counted), "flips": [r["id"] for r in counted if r["flips"]],
            "same_verdict": sum(r["a"]["verdict"] == r["b"]["verdict"] for r in counted),
            "intervals_overlap": sum(r["overlap"] is True for r in counted),
            "checks_flip": [r["id"] for r in rows if r["kind"] == "check" and r["flips"]]}


def _fmt(x) -> str:
    return "n/a" if x is None else f"{x:.3g}"


def effect_text(side: dict) -> str:
    if side["verdict"] is None:
        return "absent"
    return f"{_fmt(side.get('value'))} [{_fmt(side.get('lo'))}, {_fmt(side.get('hi'))}]"


def status(row: dict) -> str:
    if row["flips"]:
        return "FLIPS (seed-set luck)"
    if None in (row["a"]["verdict"], row["b"]["verdict"]):
        return "only on " + ("B" if row["a"]["verdict"] is None else "A")
    return "same" if row["a"]["verdict"] == row["b"]["verdict"] else "differs, both undecided"


def _overlap_text(row: dict) -> str:
    return {True: "yes", False: "NO", None: "n/a"}[row["overlap"]]


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def summary_line(rows: list[dict]) -> str:
    s = summary(rows)
    flipped = f" ({', '.join(s['flips'])}): seed-set luck" if s["flips"] else ""
    line = (f"{_count(s['claims'], 'counted claim')}: {s['same_verdict']} with the same verdict on both sets, "
            f"{_count(len(s['flips']), 'flip')}{flipped}; intervals overlap on {s['intervals_overlap']} "
            f"of {s['claims']}.")
    return line + (f" Checks that flip: {', '.join(s['checks_flip'])}." if s["checks_flip"] else "")


def render_text(rows: list[dict], label_a: str, label_b: str) -> str:
    """The terminal table: claim, both verdicts with effect [95% CI], overlap, FLIPS."""
    head = ["claim", f"A {label_a}", "effect [95% CI]", f"B {label_b}", "effect [95% CI]", "overlap", ""]
    table = [head]
    for kind in ("claim", "check"):
        part = [r for r in rows if (r["kind"] == "check") == (kind == "check")]
        if kind == "check" and part:
            table.append(["-- checks (not counted) --"])
        table += [[r["id"], r["a"]["verdict"] or "-", effect_text(r["a"]), r["b"]["verdict"] or "-",
                   effect_text(r["b"]), _overlap_text(r), "FLIPS" if r["flips"] else ""] for r in part]
    widths = [max(len(line[i]) for line in table if len(line) > 1) for i in range(len(head))]
    text = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip() if len(line) > 1 else line[0]
            for line in table]
    notes = [f"  {r['id']}: {r['note']}" for r in rows if r["flips"] and r.get("note")]
    known = ["What the project knows of these claims:", *notes] if notes else []
    return "\n".join([*text, "", summary_line(rows), *known])


HOW_TO_READ = (
    "How to read it: each claim is checked on two disjoint seed sets, A and B, with the same test. "
    "Intervals that overlap mean the two sets measure a compatible effect; intervals that do not overlap "
    "mean the effect itself moves with the seeds drawn. **FLIPS** marks a claim whose verdict is decided "
    "(neither inconclusive nor untestable here) on one set and different on the other: that verdict is "
    "seed-set luck, not a finding, whatever its interval on either set says. 'differs, both undecided' "
    "(inconclusive on one, untestable here on the other) is not a flip."
)


def render_markdown(payload: dict) -> str:
    rows, a, b = payload["rows"], payload["seeds_a"], payload["seeds_b"]
    cell = lambda s: str(s).replace("|", "\\|").replace("\n", " ")  # noqa: E731

    def verdict(side: dict) -> str:
        if side["verdict"] is None:
            return "absent"
        return f"**{side['verdict']}**" + (f": {side['reason']}" if side.get("reason") else "")

    def table(part: list[dict]) -> list[str]:
        out = ["| claim | test | A: verdict | A: effect [95% CI] (n) | B: verdict | B: effect [95% CI] (n) "
               "| overlap | stable? |", "|---|---|---|---|---|---|---|---|"]
        for r in part:
            note = f" *({cell(r['note'])})*" if r.get("note") else ""
            out.append(f"| {cell(r['id'])}: {cell(r['claim'])}{note} | {r['test']} | {cell(verdict(r['a']))} | "
                       f"{effect_text(r['a'])} ({r['a'].get('n', '-')}) | {cell(verdict(r['b']))} | "
                       f"{effect_text(r['b'])} ({r['b'].get('n', '-')}) | {_overlap_text(r)} | {status(r)} |")
        return out

    meta = payload["provenance"]
    lines = [f"# Stability of the claims of {payload['paper']} ({payload['scale']} scale)", "",
             f"Set A: {len(a)} seeds ({', '.join(map(str, a))}){OWN if payload['a_is_own'] else ''}. "
             f"Set B: {len(b)} seeds ({', '.join(map(str, b))}). "
             f"Git {meta['git_commit'][:12]}, made {meta['created_utc']}.", "",
             HOW_TO_READ, "", summary_line(rows), "", *table([r for r in rows if r["kind"] != "check"]), ""]
    checks = [r for r in rows if r["kind"] == "check"]
    if checks:
        lines += ["## Checks and probes (not counted)", "", *table(checks), ""]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- running the two sets
def snakemake_command(workdir: Path, scale: str, slug: str, seeds, overrides, methods, targets,
                      cores: int, profile: str | None) -> list[str]:
    """The workflow's own jobs for `targets` (eval.json files), under exactly this workflow config."""
    config = {"scale": scale, "papers": json.dumps([slug]), "seeds": "null" if seeds is None else json.dumps(seeds),
              "overrides": json.dumps(list(overrides)), "methods": json.dumps({slug: list(methods)})}
    return [sys.executable, "-m", "snakemake", "--snakefile", str(REPO_ROOT / "Snakefile"),
            "--directory", str(workdir), "--configfile", str(REPO_ROOT / "config" / "config.yaml"),
            "--cores", str(cores), *(["--profile", profile] if profile else []),
            "--config", *(f"{k}={v}" for k, v in config.items()), "--", *map(str, targets)]


def workdir_for(paper, scale: str, seeds, own: bool) -> Path:
    """Where a seed set's jobs run: here (run folders are keyed by seed block, so sets coexist), unless
    the paper's acquire or prepare read the seed list: their data would be remade for another set, so
    a set not the paper's own runs in its own folder, stability/<scale>/<paper>/seeds-<set>/."""
    if own or not {"acquire", "prepare"} & set(paper.seed_list_stages):
        return Path(".")
    return Path("stability") / scale / paper.slug / seed_label(seeds)


def workflow_config() -> dict:
    """config/config.yaml, validated: the scale, methods and overrides `snakemake all` runs with, so that
    set A's jobs are the ones the paper's results were made from (nothing of them is redone)."""
    from .config import read_yaml_file, validate_workflow_config
    from .paper import all_papers

    return validate_workflow_config(read_yaml_file(REPO_ROOT / "config" / "config.yaml"), all_papers())


def run_set(slug: str, scale: str, overrides, methods, seeds, cores: int, profile: str | None, dry_run: bool = False):
    """Run one seed set's evaluate jobs (Snakemake redoes only unfinished or changed ones) and check the
    claims on its records. Returns (config, claims, eval files); with `dry_run`, Snakemake only lists the
    jobs (-n) and None is returned."""
    import pandas as pd

    from .claims import check_claims
    from .config import compose_job_config, default_job_config, effective_overrides, split_overrides, workflow_jobs
    from .job import load_records, run_dir
    from .paper import get_paper

    paper = get_paper(slug)
    own = list(seeds) == list(default_job_config(slug, scale)["seeds"])
    cfg = compose_job_config(slug, scale, tuple(effective_overrides(slug, scale, split_overrides(overrides, slug))),
                             None if own else list(seeds))
    methods = list(methods or cfg.get("run_methods") or paper.methods)
    targets = [run_dir(scale, slug, job["method"], job["seeds"]) / "eval.json"
               for job in workflow_jobs(paper, cfg, methods) if job["stage"] == "evaluate"]
    workdir = workdir_for(paper, scale, seeds, own)
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"iclr26 stability: {slug} {seed_label(seeds)}: its evaluate jobs, through Snakemake in {workdir.resolve()}",
          file=sys.stderr, flush=True)
    command = snakemake_command(workdir, scale, slug, None if own else list(seeds), overrides, methods, targets,
                                cores, profile)
    done = subprocess.run([*command[:3], "-n", *command[3:]] if dry_run else command, stdout=sys.stderr)
    if dry_run and not done.returncode:
        return None
    if done.returncode:
        raise PipelineError(f"snakemake stopped (exit {done.returncode}) on the jobs of {slug} {seed_label(seeds)}; "
                            "its messages are above; the same command resumes it")
    evals = [workdir / t for t in targets]
    records = pd.DataFrame(load_records(evals, cfg))
    if records.empty:
        raise PipelineError(f"paper {slug}: the evaluate jobs of {seed_label(seeds)} produced no records")
    return cfg, check_claims(cfg.get("claims") or [], records, cfg), evals


def stability(slug: str, scale: str | None, overrides, seeds_b, seeds_a=None, cores: int = 2,
              profile: str | None = None, results: str = "results", dry_run: bool = False) -> Path | None:
    """Both sets' claims side by side: printed, and written beside set B's claims. Returns the JSON path.
    `scale` None and `overrides` empty: config/config.yaml's (overrides given replace its list, as
    `snakemake --config overrides=[...]` does). `dry_run`: list both sets' jobs, run and write nothing."""
    from .config import default_job_config, view_digest
    from .io import atomic_write, write_json
    from .paper import core_digest, get_paper
    from .provenance import provenance

    if cores < 1:
        raise ConfigError(f"--cores {cores}: at least 1")
    paper = get_paper(slug)
    workflow = workflow_config()
    scale, overrides = scale or workflow["scale"], list(overrides) or list(workflow["overrides"])
    methods = (workflow.get("methods") or {}).get(slug)
    own = default_job_config(slug, scale)["seeds"]
    seeds_a = list(seeds_a or own)
    shared = sorted(set(seeds_a) & set(seeds_b))
    if shared:
        raise ConfigError(f"--seeds: seed(s) {', '.join(map(str, shared))} are also in set A "
                          f"({seed_label(seeds_a)}): a stability check needs two disjoint seed sets")
    a_is_own = seeds_a == list(own)
    name = seed_label(seeds_b) + ("" if a_is_own else f"-vs-{seed_label(seeds_a)[len('seeds-'):]}")
    out = Path(results) / slug / "stability" / name
    if dry_run:
        for seeds in (seeds_a, seeds_b):
            run_set(slug, scale, overrides, methods, seeds, cores, profile, dry_run=True)
        return None
    for old in OUTPUTS:   # a failed run must leave no earlier comparison that looks like this one
        (out / old).unlink(missing_ok=True)

    cfg_a, claims_a, evals_a = run_set(slug, scale, overrides, methods, seeds_a, cores, profile)
    cfg_b, claims_b, evals_b = run_set(slug, scale, overrides, methods, seeds_b, cores, profile)
    rows = compare_claims(claims_a, claims_b)
    meta = provenance(stage="stability", paper=slug, scale=scale, inputs=[str(p) for p in [*evals_a, *evals_b]],
                      overrides=list(overrides), methods=methods,
                      config_digest={"a": view_digest(cfg_a, paper.source_digest()),
                                     "b": view_digest(cfg_b, paper.source_digest())},
                      code={"paper": paper.source_digest(), "core": core_digest()})
    write_json(out / "claims.json", {"paper": slug, "title": paper.title, "scale": scale, "seeds": cfg_b["seeds"],
                                     "claims": claims_b, "provenance": meta})
    payload = {"paper": slug, "title": paper.title, "scale": scale, "seeds_a": cfg_a["seeds"],
               "seeds_b": cfg_b["seeds"], "a_is_own": a_is_own, "rows": rows, "summary": summary(rows),
               "provenance": meta}
    atomic_write(out / "stability.md", render_markdown(payload))
    path = write_json(out / "stability.json", payload)
    told = f"; overrides {' '.join(overrides)}" if overrides else ""
    print(f"{slug} ({scale} scale): set A = {seed_label(seeds_a)}{OWN if a_is_own else ''}, "
          f"set B = {seed_label(seeds_b)}{told}\n")
    print(render_text(rows, seed_label(seeds_a)[len("seeds-"):], seed_label(seeds_b)[len("seeds-"):]))
    print(f"\nwrote {out / 'stability.md'}, stability.json and set B's claims.json")
    return path
