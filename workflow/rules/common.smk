# Shared helpers of the rules: config validation, job configs (Hydra), targets, resources.
import functools
import os
import shlex
import sys
from pathlib import Path

SRC = str(Path(workflow.basedir) / "src")
sys.path.insert(0, SRC)

from iclr26.core.config import (  # noqa: E402
    ConfigError,
    compose_job_config,
    config_digest,
    default_job_config,
    effective_overrides,
    job_overrides,
    job_resource,
    job_view,
    split_overrides,
    tabulate_digest,
    validate_workflow_config,
    view_digest,
    workflow_jobs,
)
from iclr26.core.job import data_dir, run_dir, shard_count, shard_marker  # noqa: E402
from iclr26.core.lifecycle import export_job_environment, release_stale_locks  # noqa: E402
from iclr26.core.paper import all_papers  # noqa: E402

# a Snakemake killed with -9 leaves its lock: remove it when no live Snakemake works here
release_stale_locks(Path.cwd())
# jobs import the package from this checkout, run this interpreter, and stop when we are gone
export_job_environment(SRC)

try:
    config.update(validate_workflow_config(config, all_papers()))
except ConfigError as err:
    sys.stderr.write(f"iclr26 config error: {err}\n")
    sys.exit(1)

SCALE = config["scale"]
PAPERS = config["papers"]
PAPER_DECL = all_papers()
TABLE_FILES = ["table.md", "table.csv", "table.tex", "claims.json"]
# everything tabulate writes besides the paper's figures
RESULT_FILES = [*TABLE_FILES, "records.csv", "config.yaml", "provenance.json"]


def config_error(err):
    sys.stderr.write(f"iclr26 config error: {err}\n")
    sys.exit(1)


@functools.cache
def overrides(paper):
    """The paper's overrides that change its config (one restating a default is dropped: it reruns nothing)."""
    try:
        return tuple(effective_overrides(paper, SCALE, split_overrides(config["overrides"], paper)))
    except ConfigError as err:
        config_error(err)


@functools.cache
def seed_list(paper):
    """The workflow's seeds when they are not the paper's own (None: the paper's own list)."""
    seeds = config["seeds"]
    if seeds is None or list(seeds) == list(default_job_config(paper, SCALE)["seeds"]):
        return None
    return tuple(seeds)


@functools.cache  # the DAG asks for it in every job's params and resources: compose once
def job_config(paper):
    try:
        return compose_job_config(paper, SCALE, overrides(paper), seed_list(paper))
    except ConfigError as err:
        config_error(err)


def methods(paper):
    # the command line's methods.<paper>, else the scale's `run_methods` (a scale may run a subset), else all
    chosen = config["methods"].get(paper) or job_config(paper).get("run_methods") or list(PAPER_DECL[paper].methods)
    unknown = [m for m in chosen if m not in PAPER_DECL[paper].methods]
    if unknown:
        config_error(
            f"config key 'methods.{paper}' names unknown method {unknown[0]!r}; "
            f"allowed: {', '.join(PAPER_DECL[paper].methods)}"
        )
    if len(set(chosen)) != len(chosen):
        twice = next(m for m in chosen if chosen.count(m) > 1)
        config_error(
            f"config key 'methods.{paper}' lists method {twice!r} twice: each method runs once "
            "(its records would be counted twice)"
        )
    return chosen


for _paper in PAPERS:  # fail on a bad override or method now, before any job runs
    job_config(_paper)
    methods(_paper)


@functools.cache
def digest(paper, stage, dataset=None):
    """Params that make Snakemake rerun a job when the config it reads or the paper's code changes:
    the digest of the job's view of the config (core.config.job_view: a data job reads its own
    dataset's entry; no job reads the seed list unless its paper declares it), as the job records it.
    (Changes to shared code under src/iclr26/core rerun nothing by themselves: use --forcerun.)"""
    view = job_view(PAPER_DECL[paper], job_config(paper), stage, dataset)
    return view_digest(view, PAPER_DECL[paper].source_digest())


def cli_args(paper, stage=None, dataset=None):
    """The workflow's overrides (those of the keys the job reads) and seeds (for a job that reads the
    seed list, when they are not the paper's own), passed on to the job's own Hydra composition. An
    unchanged job gets the same command line, so Snakemake reruns nothing for it."""
    decl = PAPER_DECL[paper]
    chosen = job_overrides(decl, overrides(paper), stage, dataset) if stage else overrides(paper)
    args = [f"--override={o}" for o in chosen]
    if seed_list(paper) and (stage is None or stage in decl.seed_list_stages):
        args.append("--seed-list=" + ",".join(map(str, seed_list(paper))))
    return " ".join(shlex.quote(a) for a in args)


def conda_env(wildcards):
    return f"../../envs/{job_config(wildcards.paper).get('conda_env', 'pipeline')}.yaml"


def resource(stage, key):
    """A resource of a stage's job (core.config.job_resource): GPUs only on the paper's GPU stages;
    memory and runtime double with each retry, runtime capped at the partition's limit
    (cluster.max_runtime_min); the partition from cluster.gpu_partition / cpu_partition."""

    def get(wildcards, attempt):
        return job_resource(PAPER_DECL[wildcards.paper], job_config(wildcards.paper), stage, key, attempt)

    return get


def partition(stage):
    """slurm_partition: the job config's cluster.gpu_partition for a job with GPUs, else
    cluster.cpu_partition; empty (the cluster's default partition) when that is null."""

    def get(wildcards):
        return resource(stage, "partition")(wildcards, 1) or ""

    return get


def stage_resources(stage):
    return dict(
        mem_mb=resource(stage, "mem_mb"),
        runtime=resource(stage, "runtime"),
        gpu=resource(stage, "gpus"),
        cpus_per_task=resource(stage, "cpus"),
        slurm_partition=partition(stage),
    )


def source_of(paper, dataset):
    """Where a dataset (and the paper's pretrained model, if any) comes from, for the job log."""
    cfg = job_config(paper)
    spec = cfg["data"][dataset] or {}
    parts = spec["splits"].values() if isinstance(spec, dict) and "splits" in spec else [spec]
    where = "; ".join(
        next(
            (f"{k}={part[k]}" for k in ("url", "hub_id", "source") if isinstance(part, dict) and part.get(k)),
            "generated from config",
        )
        for part in parts
    )
    model = (cfg.get("model") or {}).get("source")
    return where + (f"; model {model}" if model else "")


def launcher(wildcards):
    """How a train job starts: `python -m`, or `accelerate launch -m` with one process per GPU
    (or `launch.processes` CPU processes, gloo) for papers whose training is data parallel."""
    paper = wildcards.paper
    cfg = job_config(paper)
    gpus = resource("train", "gpus")(wildcards, 1)
    processes = gpus if gpus > 1 else int(cfg["launch"]["processes"])
    if processes <= 1 or not PAPER_DECL[paper].data_parallel:
        return "python -m"
    port = 20000 + int(config_digest([paper, wildcards.method, wildcards.seeds]), 16) % 20000
    return (
        f"accelerate launch --multi_gpu --num_processes {processes} --num_machines 1"
        f" --main_process_port {port} --mixed_precision {cfg['launch']['mixed_precision']}"
        " --dynamo_backend no -m"
    )


def result_files(paper):
    """Every file the paper's tabulate writes: rule all asks for each, so a deleted one is made again."""
    return [f"results/{paper}/{name}" for name in (*RESULT_FILES, *PAPER_DECL[paper].figures)]


def prepared(wildcards):
    return [
        f"data/{wildcards.scale}/{wildcards.paper}/prepared/{d}/manifest.json"
        for d in PAPER_DECL[wildcards.paper].datasets
    ]


def eval_files(paper):
    """The paper's evaluate jobs (core.config.workflow_jobs: the enumeration the preflight checks)."""
    return [
        f"runs/{SCALE}/{paper}/{job['method']}/{job['seeds']}/eval.json"
        for job in workflow_jobs(PAPER_DECL[paper], job_config(paper), methods(paper))
        if job["stage"] == "evaluate"
    ]


def shard_markers(stage):
    """The markers of the shard jobs of one job (`shards.<stage>` of the job config; core.job): the
    ordinary job waits for all of them, then gathers the units they saved. None when not sharded."""

    def get(wildcards):
        item = wildcards.dataset if stage == "prepare" else wildcards.method
        n = shard_count(job_config(wildcards.paper), stage, item)
        if n <= 1:
            return []
        if stage == "prepare":
            folder = data_dir(wildcards.scale, wildcards.paper, "prepared", wildcards.dataset)
        else:
            folder = run_dir(wildcards.scale, wildcards.paper, wildcards.method, wildcards.seeds)
        return [str(shard_marker(folder, k, n)) for k in range(1, n + 1)]

    return get


def train_output(wildcards):
    """What an evaluate job reads from its train job: nothing for a training-free method (the
    workflow queues no train job for it)."""
    if wildcards.method in PAPER_DECL[wildcards.paper].training_free:
        return []
    return f"runs/{wildcards.scale}/{wildcards.paper}/{wildcards.method}/{wildcards.seeds}/metrics.json"


wildcard_constraints:
    scale="smoke|tiny|full",
    paper="|".join(PAPER_DECL),
    seeds=r"s[0-9][0-9_-]*",
    k=r"[0-9]+",
    n=r"[0-9]+",
