"""Benchmark the user's main commands on a fresh copy of the working tree.

    .venv/bin/python scripts/bench_workflow.py [--scale tiny] [--papers p1 p2] [--cores 2]

Measures the wall time of `snakemake --cores N all` from nothing, of the no-op rerun right after,
and each job's own wall time (from its provenance), and prints one JSON object. Run it on an
otherwise idle machine: it times, it does not assert.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def copy_tree(dest: Path) -> None:
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=REPO,
                           capture_output=True, text=True, check=True).stdout.split("\0")
    for rel in filter(None, files):
        if (REPO / rel).is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, dest / rel)


def timed(cmd, cwd) -> float:
    started = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return round(time.perf_counter() - started, 2)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scale", default="tiny")
    parser.add_argument("--papers", nargs="*", default=[])
    parser.add_argument("--cores", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="iclr26-bench-") as tmp:
        work = Path(tmp)
        copy_tree(work)
        cmd = [sys.executable, "-m", "snakemake", "--cores", str(args.cores), "all", "--config",
               f"scale={args.scale}"] + ([f"papers=[{','.join(args.papers)}]"] if args.papers else [])
        first = timed(cmd, work)
        noop = timed(cmd, work)
        per_paper = defaultdict(lambda: defaultdict(float))
        for done in [*work.glob("runs/*/*/*/*/metrics.json"), *work.glob("runs/*/*/*/*/eval.json")]:
            meta = json.loads(done.read_text()).get("provenance", {})
            if "wall_seconds" in meta:
                per_paper[meta["paper"]][meta["stage"]] += meta["wall_seconds"]
        for done in work.glob("data/*/*/*/*/manifest.json"):
            meta = json.loads(done.read_text())["provenance"]
            per_paper[meta["paper"]][meta["stage"]] += meta["wall_seconds"]
    print(json.dumps({"command": " ".join(cmd[1:]), "first_run_s": first, "noop_rerun_s": noop,
                      "stage_seconds_in_jobs": {p: {k: round(v, 1) for k, v in s.items()}
                                                for p, s in sorted(per_paper.items())}}, indent=2))


if __name__ == "__main__":
    main()
