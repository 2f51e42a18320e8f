"""Benchmark the user's main commands on a fresh copy of the working tree.

    .venv/bin/python scripts/bench_workflow.py [--scale tiny] [--papers p1 p2] [--cores 2]

Measures the wall time of `snakemake --cores N all` from nothing (and its CPU seconds, user + system
of every process: the cost that does not depend on what else the machine runs; bench one paper to
get its own) and of the no-op rerun right after, and per paper:
  - stage_s: seconds inside the stage functions (each job's provenance `wall_seconds`);
  - job_s:   seconds of the jobs as Snakemake measured them (the rules' `benchmark:` files):
             interpreter start, imports, config composition, the stage, writing its outputs;
  - overhead_s and overhead_share: job_s - stage_s, the cost of a job outside the paper's code;
  - job_cpu_s: the CPU seconds of those jobs' processes from their start (provenance
               `process_cpu_seconds`: imports and the stage, every thread): the cost on a shared machine,
               which wall seconds overstate under load and understate for a job of several threads;
and the fixed cost of one job (a stage that does nothing: `python -m iclr26 config`, median of 5).
Prints one JSON object. Run it on an otherwise idle machine: it times, it does not assert.
"""
from __future__ import annotations

import argparse
import csv
import json
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))


def copy_tree(dest: Path) -> None:
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=REPO,
                           capture_output=True, text=True, check=True).stdout.split("\0")
    for rel in filter(None, files):
        if (REPO / rel).is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, dest / rel)


def timed(cmd, cwd) -> float:
    return timed_cpu(cmd, cwd)[0]


def timed_cpu(cmd, cwd) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system of the command and every process under it)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return round(wall, 2), round(cpu, 1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scale", default="tiny")
    parser.add_argument("--papers", nargs="*", default=[])
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--keep", type=Path, help="run in this (new) directory and keep it (e.g. to compare records)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="iclr26-bench-") as tmp:
        work = args.keep or Path(tmp)
        if args.keep:
            args.keep.mkdir(parents=True)  # a new directory: never mix with an earlier run
        copy_tree(work)
        cmd = [sys.executable, "-m", "snakemake", "--cores", str(args.cores), "all", "--config",
               f"scale={args.scale}"] + ([f"papers=[{','.join(args.papers)}]"] if args.papers else [])
        first, first_cpu = timed_cpu(cmd, work)
        noop = timed(cmd, work)
        stage_s, job_s = stage_seconds(work), job_seconds(work)
        job_cpu_s = stage_seconds(work, "process_cpu_seconds")
        fixed = fixed_cost(work, args.scale)
    papers = {}
    for paper in sorted(stage_s):
        inside, total = sum(stage_s[paper].values()), sum(job_s[paper].values())
        papers[paper] = {"stage_s": {k: round(v, 1) for k, v in stage_s[paper].items()},
                         "stage_total_s": round(inside, 1), "job_total_s": round(total, 1),
                         "job_cpu_s": round(sum(job_cpu_s[paper].values()), 1),
                         "overhead_s": round(total - inside, 1),
                         "overhead_share": round((total - inside) / total, 3) if total else None}
    stage_total = round(sum(p["stage_total_s"] for p in papers.values()), 1)
    print(json.dumps({"command": " ".join(cmd[1:]), "first_run_s": first, "first_run_cpu_s": first_cpu,
                      "noop_rerun_s": noop,
                      "job_fixed_cost_s": fixed, "stage_total_s": stage_total, "papers": papers}, indent=2))


def stage_seconds(work: Path, key: str = "wall_seconds") -> dict:
    """Seconds inside the stage functions, per paper and stage (from every job's provenance; `key`
    process_cpu_seconds: the CPU seconds of each job's process)."""
    per_paper = defaultdict(lambda: defaultdict(float))
    done_files = [*work.glob("runs/*/*/*/*/metrics.json"), *work.glob("runs/*/*/*/*/eval.json"),
                  *work.glob("data/*/*/*/*/manifest.json")]
    for done in done_files:
        meta = json.loads(done.read_text()).get("provenance", {})
        if key in meta:
            per_paper[meta["paper"]][meta["stage"]] += meta[key]
    return per_paper


def job_seconds(work: Path, column: str = "s") -> dict:
    """Wall seconds of every job as Snakemake measured it: benchmarks/<scale>/<paper>/<stage>/*.tsv."""
    per_paper = defaultdict(lambda: defaultdict(float))
    for tsv in work.glob("benchmarks/*/*/*/*.tsv"):
        paper, stage = tsv.parts[-3], tsv.parts[-2]
        with open(tsv) as handle:
            per_paper[paper][stage] += float(next(csv.DictReader(handle, delimiter="\t"))[column])
    return per_paper


def fixed_cost(work: Path, scale: str) -> float:
    """A job that does no stage work: start the interpreter, import the runner, compose a config."""
    from iclr26.core.paper import all_papers

    paper = sorted(all_papers())[0]
    cmd = [sys.executable, "-m", "iclr26", "config", "--paper", paper, "--scale", scale]
    return statistics.median(timed(cmd, work) for _ in range(5))


if __name__ == "__main__":
    main()
