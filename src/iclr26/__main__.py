"""Command line of the pipeline's jobs (the Snakemake rules call it; so can a user).

    python -m iclr26 acquire  --paper P --scale tiny --dataset D
    python -m iclr26 prepare  --paper P --scale tiny --dataset D
    python -m iclr26 train    --paper P --scale tiny --method M --seeds s0
    python -m iclr26 evaluate --paper P --scale tiny --method M --seeds s0
    python -m iclr26 prepare  ... --shard 2/8   # shard 2 of 8 of the job (its units only; core.job)
    python -m iclr26 tabulate --paper P --scale tiny --evals runs/.../eval.json ... --out results/P
    python -m iclr26 claims   --inputs results/*/claims.json --out results/claims.md
    python -m iclr26 report   --papers P1 P2 --out results/report.html
    python -m iclr26 config   --paper P --scale tiny        # print the resolved job config
    python -m iclr26 run      --paper P --scale tiny        # every stage of one paper here, no Snakemake
    python -m iclr26 preflight --scale full [--papers P ...]  # check every full-scale job before it runs
    python -m iclr26 stability --paper P --seeds 100-107   # the claims on another seed set, beside the own

Any `--override key=value` is a Hydra override of the job config. Errors print one line.
"""
from __future__ import annotations

import argparse
import errno
import sys


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m iclr26")
    sub = parser.add_subparsers(dest="command", required=True)

    def job_args(p, *, dataset=False, method=False, shard=False):
        p.add_argument("--paper", required=True)
        p.add_argument("--scale", default="tiny")
        p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE")
        p.add_argument("--seed-list", default=None, help="comma-separated seeds replacing the paper's own")
        if dataset:
            p.add_argument("--dataset", required=True)
        if method:
            p.add_argument("--method", required=True)
            p.add_argument("--seeds", required=True, help="seed block, e.g. s0 or s0-7")
        if shard:
            p.add_argument("--shard", default=None, metavar="K/N",
                           help="run shard K of N of this job: only its units of work, then a marker "
                                "(the job without --shard gathers them; config key shards)")

    helps = {"acquire": "fetch (full) or generate (tiny) one dataset of a paper, with a sha256 manifest",
             "prepare": "turn one acquired dataset into what training reads",
             "train": "train one method on one block of seeds (checkpoints, resumes)",
             "evaluate": "compute one method's records on one block of seeds"}
    for name in ("acquire", "prepare"):
        job_args(sub.add_parser(name, help=helps[name]), dataset=True, shard=name == "prepare")
    for name in ("train", "evaluate"):
        job_args(sub.add_parser(name, help=helps[name]), method=True, shard=name == "evaluate")
    tab = sub.add_parser("tabulate", help="a paper's table, claims, figures and records from its eval files")
    job_args(tab)
    tab.add_argument("--evals", nargs="+", required=True)
    tab.add_argument("--out", required=True)
    claims = sub.add_parser("claims", help="results/claims.md: every claim of every paper with its verdict")
    claims.add_argument("--inputs", nargs="+", required=True)
    claims.add_argument("--out", required=True)
    claims.add_argument("--metrics", help="also write every claim's numbers as JSON (DVC metrics)")
    claims.add_argument("--plot", help="also write one CSV row per claim (DVC plots)")
    claims.add_argument("--results", default=None,
                        help="also list every other paper found in this folder, marked as not rerun")
    report = sub.add_parser("report", help="results/report.html: one self-contained page of every paper")
    report.add_argument("--papers", nargs="+", required=True)
    report.add_argument("--results", default="results")
    report.add_argument("--out", required=True)
    show = sub.add_parser("config", help="print the resolved job config of a paper")
    job_args(show)
    run = sub.add_parser("run", help="run every stage of one paper in this process (no Snakemake), "
                                     "resuming finished stages, then tabulate into results/<paper>")
    job_args(run)
    pre = sub.add_parser("preflight", help="check every job of a scale before it runs (pins, GPUs, envs, memory, "
                                           "runtime) and print the plan; exit 1 on any problem")
    pre.add_argument("--scale", default="full")
    pre.add_argument("--papers", nargs="+", default=None, help="default: every implemented paper")
    pre.add_argument("--override", action="append", default=[], metavar="[SLUG:]KEY=VALUE")
    pre.add_argument("--seed-list", default=None, help="comma-separated seeds replacing the papers' own")
    stab = sub.add_parser("stability", help="rerun a paper's claims on another seed set (through Snakemake) and "
                                            "print both verdicts and intervals per claim; FLIPS = seed-set luck")
    stab.add_argument("--paper", required=True)
    stab.add_argument("--scale", default=None, help="default: config/config.yaml's (tiny)")
    stab.add_argument("--seeds", required=True, help="set B, e.g. 100-107 or 100,101,105 (disjoint from set A)")
    stab.add_argument("--against", default=None, help="set A (default: the paper's own seeds at this scale)")
    stab.add_argument("--cores", type=int, default=2, help="Snakemake --cores (default 2)")
    stab.add_argument("--profile", default=None, help="a Snakemake profile, e.g. slurm")
    stab.add_argument("-n", "--dry-run", action="store_true", help="list both sets' jobs; run and write nothing")
    stab.add_argument("--override", action="append", default=[], metavar="[SLUG:]KEY=VALUE",
                      help="default: config/config.yaml's overrides; given ones replace them")
    return parser


def main(argv=None) -> int:
    from iclr26.core.errors import PipelineError

    args = _parser().parse_args(argv)
    try:
        from iclr26.core.config import parse_seed_list

        seeds = parse_seed_list(getattr(args, "seed_list", None))
        if args.command in ("acquire", "prepare", "train", "evaluate"):
            from iclr26.core.job import parse_shard, run_stage

            run_stage(args.command, args.paper, args.scale, args.override, seeds,
                      dataset=getattr(args, "dataset", None), method=getattr(args, "method", None),
                      seed_block=getattr(args, "seeds", None), shard=parse_shard(getattr(args, "shard", None)))
        elif args.command == "tabulate":
            from iclr26.core.tabulate import tabulate_paper

            tabulate_paper(args.paper, args.scale, args.override, seeds, args.evals, args.out)
        elif args.command == "claims":
            from iclr26.core.claims import write_claims_summary

            write_claims_summary(args.inputs, args.out, args.metrics, args.plot, args.results)
        elif args.command == "report":
            from iclr26.core.report import write_report

            write_report(args.papers, args.results, args.out)
        elif args.command == "run":
            from iclr26.core.job import run_paper
            from iclr26.core.tabulate import tabulate_paper

            evals = run_paper(args.paper, args.scale, args.override, seeds)
            tabulate_paper(args.paper, args.scale, args.override, seeds, evals, f"results/{args.paper}")
        elif args.command == "stability":
            from iclr26.core.stability import parse_seeds, stability

            stability(args.paper, args.scale, args.override, parse_seeds(args.seeds),
                      parse_seeds(args.against, "--against") if args.against else None, args.cores, args.profile,
                      dry_run=args.dry_run)
        elif args.command == "preflight":
            from iclr26.core.preflight import run as preflight

            return preflight(args.scale, args.papers, args.override, seeds)
        elif args.command == "config":
            import yaml

            from iclr26.core.config import compose_job_config

            print(yaml.safe_dump(compose_job_config(args.paper, args.scale, tuple(args.override), seeds),
                                 sort_keys=False), end="")
    except (PipelineError, FileNotFoundError) as err:
        print(f"iclr26 {args.command}: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:
        if err.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
            raise
        # a full disk or a read-only folder: nothing was half-written (every output is written
        # atomically), so one line and a rerun once there is room
        print(f"iclr26 {args.command}: error: cannot write {err.filename or 'an output'}: {err.strerror} "
              "(nothing was half-written; free space and rerun the same command)", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
