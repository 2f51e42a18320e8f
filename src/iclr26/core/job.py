"""One pipeline job: what a paper's stage function receives, and the code that runs it.

Paths (relative to the working directory, which is the repo root under Snakemake and DVC):
    data/<scale>/<paper>/raw/<dataset>/        acquire  -> files + manifest.json
    data/<scale>/<paper>/prepared/<dataset>/   prepare  -> files + manifest.json
    runs/<scale>/<paper>/<method>/<seeds>/     train    -> metrics.json (+ checkpoint.pt while running)
                                               evaluate -> eval.json
A stage function writes its files into `job.out_dir`; this module writes the manifest or metrics
file last and atomically, so its presence means the stage finished.

Shards (a stage too long for one job): with `shards: {<stage>: N}` in the job config (prepare,
evaluate; or `{<stage>: {<dataset or method>: N}}` for some of its jobs only) the workflow runs N
shard jobs of the stage (`python -m iclr26 <stage> ... --shard k/N`) before the ordinary one. A
shard job runs the stage function with `job.shard = (k, N)`: in each `job.units` call it computes
only the units dealt to shard k (shard_of: the call's keys sorted by the sha256 of the key, dealt
to the N shards in turn: stable across processes, balanced to within one unit), saved as always
into <out_dir>/<folder>/, which the shards share, and the shard job ends there: what follows the
call may need every unit. (A call whose units were all saved before it started returns as usual,
so a stage of several calls goes on to the first unfinished one.) A shard job writes no completion
file, only its marker <out_dir>/.shard-<k>-of-<N>.json (a dot file: not in the stage's manifest).
The ordinary job then finds the units done under the same config digest, computes any that no
shard did (those of a later call) and gathers: its outputs and manifest are those of an unsharded
run. Code before the call runs in every shard job: it must be cheap and write what it writes
atomically (core.io), the same bytes in every shard.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from . import faults
from .checkpoint import Checkpointer, release_sigterm
from .config import (
    PRESENTATION_KEYS,
    ConfigError,
    compose_job_config,
    config_digest,
    job_overrides,
    job_view,
    parse_seed_block,
    view_digest,
)
from .contract import SHARD_STAGES
from .distributed import is_main_process, rank, world_size
from .errors import DataError
from .io import atomic_write, dumps_json, read_json, sha256_file, write_json
from .lifecycle import watch_parent
from .paper import Paper, core_digest, get_paper
from .provenance import provenance
from .runtime import configure_torch_on_import


def data_dir(scale: str, slug: str, kind: str, dataset: str) -> Path:
    return Path("data") / scale / slug / kind / dataset


def run_dir(scale: str, slug: str, method: str, seeds: str) -> Path:
    return Path("runs") / scale / slug / method / seeds




class ShardDone(BaseException):
    """A shard job has done its share of a job.units call that was not finished when it started:
    the stage stops there (run_stage writes the shard's marker). A BaseException, so that no
    `except Exception` in a stage swallows it."""


def shard_of(keys: Iterable[str], n: int) -> dict[str, int]:
    """The shard (1..n) of every unit key: the keys sorted by the sha256 of the key (not Python's
    salted hash), dealt to the shards in turn. Every shard job computes the same answer from the
    same keys, whatever their order; each shard gets len(keys)/n units, rounded up or down."""
    order = sorted(dict.fromkeys(str(k) for k in keys), key=lambda k: hashlib.sha256(k.encode()).hexdigest())
    return {key: 1 + i % int(n) for i, key in enumerate(order)}


def parse_shard(text: str | None) -> tuple[int, int] | None:
    """'k/N' (1 <= k <= N) -> (k, N); None -> None; anything else: one ConfigError line."""
    if text is None:
        return None
    k, sep, n = str(text).partition("/")
    if not (sep and k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n)):
        raise ConfigError(f"--shard {text!r}: expected k/N with 1 <= k <= N (e.g. 1/4)")
    return int(k), int(n)


def shard_marker(out_dir: Path, k: int, n: int) -> Path:
    """Where shard k of N of a job says it is done: a dot file beside the job's outputs (not in
    its manifest); the workflow's rules name the same path (workflow/rules/common.smk)."""
    return Path(out_dir) / f".shard-{k}-of-{n}.json"


def shard_count(cfg: dict, stage: str, item: str | None) -> int:
    """How many shard jobs the config asks for one job of a stage (1: not sharded): `shards.<stage>`
    is N for every job of the stage, or {<dataset or method>: N} (others 1)."""
    spec = (cfg.get("shards") or {}).get(stage)
    if isinstance(spec, dict):
        spec = spec.get(item)
    return int(spec) if spec else 1


@dataclass
class Job:
    paper: Paper
    cfg: dict
    stage: str
    out_dir: Path
    dataset: str | None = None
    method: str | None = None
    seeds: list[int] = field(default_factory=list)
    shard: tuple[int, int] | None = None  # (k, N) in a shard job (see the module docstring)
    _last_log: float = 0.0
    _computed: int = 0  # units this job computed (a shard's marker says how many)

    @property
    def scale(self) -> str:
        return self.cfg["scale"]

    def raw_dir(self, dataset: str | None = None) -> Path:
        return data_dir(self.scale, self.paper.slug, "raw", dataset or self.dataset)

    def prepared_dir(self, dataset: str | None = None) -> Path:
        return data_dir(self.scale, self.paper.slug, "prepared", dataset or self.dataset)

    @property
    def config_digest(self) -> str:
        """What this job's results depend on: the config it reads (less presentation and the shard
        count) and the paper's code; the workflow reruns a job when it changes (core.config.view_digest).
        Its completion file records it, and `run_paper` reruns a job whose record differs."""
        return view_digest(self.cfg, self.paper.source_digest())

    @property
    def work_digest(self) -> str:
        """What saved work (units, checkpoints, the folder itself) is keyed by: the config digest and
        the shared code's (core_digest). Work done under another config or code is never reused, so
        `--forcerun` after an edit of src/iclr26/core recomputes everything under the new code."""
        return config_digest([self.config_digest, core_digest()])

    def units(self, keys: Iterable[str], work: Callable[[str], dict], folder: str = "units") -> dict[str, dict]:
        """Run `work(key)` for every unit of work not finished yet; return {key: result} in order.

        Each result (a small JSON-able dict) is saved atomically as <out_dir>/<folder>/<key>.json as
        soon as it is done, so a killed job restarts at the first unfinished unit. Work saves its own
        large outputs (arrays, weights) before it returns. A result saved under another config or
        code is redone, and the log says so. In a shard job (job.shard) only the shard's units are
        computed, and the job stops after this call unless every unit was saved before it."""
        keys = list(keys)
        owner = shard_of(keys, self.shard[1]) if self.shard else {}
        results, others, mine, reused = {}, [], 0, 0
        for key in keys:
            path = self.out_dir / folder / f"{key}.json"
            if path.exists():
                saved = read_json(path)
                if saved.get("config_digest") == self.work_digest:
                    results[key] = saved["result"]
                    reused += 1
                    continue
                self.log(f"{key}: the saved result was made with another config or code; redoing it")
            if self.shard and owner[str(key)] != self.shard[0]:
                others.append(key)
                continue
            results[key] = work(key)
            self._computed += 1
            mine += 1
            if self.is_main:
                write_json(path, {"config_digest": self.work_digest, "result": results[key]})
            faults.reached("unit")
        if reused and reused < len(keys):
            self.log(f"resumed: {reused} of the {len(keys)} units in {folder}/ were saved by an earlier run")
        if self.shard and (mine or others):
            share = sum(1 for key in keys if owner[str(key)] == self.shard[0])
            self.log(f"shard {self.shard[0]}/{self.shard[1]}: its {share} of the {len(keys)} units are saved "
                     f"({mine} by this run); the shard ends here (the gathering job runs after every shard)")
            raise ShardDone
        return results

    def checkpointer(self, every: int | None = None) -> Checkpointer:
        every = self.cfg.get("train", {}).get("checkpoint_every", 0) if every is None else every
        at_job_end(release_sigterm)  # SIGTERM's handling ends with the job (run_paper runs several in one process)
        return Checkpointer(self.out_dir, every, writer=is_main_process(),
                            config_digest=self.work_digest).handle_sigterm()

    @property
    def is_main(self) -> bool:
        """False in the extra processes of a data-parallel job: they compute, they do not write."""
        return is_main_process()

    def log(self, message: str, every_s: float = 0.0) -> None:
        """Progress line on stderr (Snakemake and Slurm keep it in the job log); rate-limited."""
        now = time.monotonic()
        if every_s and now - self._last_log < every_s:
            return
        self._last_log = now
        tag = "/".join(x for x in (self.paper.slug, self.stage, self.dataset, self.method) if x)
        if world_size() > 1:
            tag += f" rank {rank()}"
        print(f"[{tag}] {message}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- runner
def file_manifest(directory: Path, skip=("manifest.json",)) -> dict[str, dict]:
    files = {}
    for path in sorted(directory.rglob("*")):
        if path.is_file() and path.name not in skip and not path.name.startswith("."):
            files[str(path.relative_to(directory))] = {"sha256": sha256_file(path), "bytes": path.stat().st_size}
    return files


def _save_config(job: Job) -> None:
    plain = json.loads(dumps_json(dict(job.cfg)))  # the view's nested mappings as plain dicts
    atomic_write(job.out_dir / f"{job.stage}.config.yaml", yaml.safe_dump(plain, sort_keys=False))


_AT_JOB_END: list[Callable[[], None]] = []


def at_job_end(reset: Callable[[], None]) -> None:
    """Run `reset` when the current stage function returns or raises: process-wide state a stage
    turns on (a folder of saved generation batches) never leaks into the next job of this process
    (the tests run many jobs in one)."""
    _AT_JOB_END.append(reset)


def _end_job() -> None:
    while _AT_JOB_END:
        _AT_JOB_END.pop()()


SEED_BLOCK = re.compile(r"s[0-9]+(-[0-9]+|(_[0-9]+)*)")


def job_config(stage: str, slug: str, scale: str, overrides=(), seeds_override=None, dataset: str | None = None):
    """The config one job reads (core.config.job_view): composed from the overrides and seeds of the
    keys it reads only, as the workflow passes them, so the same job gets the same digest however it
    is started (Snakemake, `python -m iclr26 <stage>`, run_paper)."""
    paper = get_paper(slug)
    overrides = job_overrides(paper, overrides, stage, dataset)
    seeds = seeds_override if stage in paper.seed_list_stages else None
    return job_view(paper, compose_job_config(slug, scale, tuple(overrides), seeds), stage, dataset)


def _where(stage: str, scale: str, slug: str, dataset, method, seed_block) -> tuple[Path, Path]:
    """The job's folder and completion file; its names checked first, so a bad one creates nothing."""
    paper = get_paper(slug)
    if stage in ("acquire", "prepare"):
        if dataset not in paper.datasets:
            raise ConfigError(f"paper {slug}: unknown dataset {dataset!r}; datasets: {', '.join(paper.datasets)}")
        out_dir = data_dir(scale, slug, "raw" if stage == "acquire" else "prepared", dataset)
        return out_dir, out_dir / "manifest.json"
    if method not in paper.methods:
        raise ConfigError(f"paper {slug}: unknown method {method!r}; methods: {', '.join(paper.methods)}")
    if not SEED_BLOCK.fullmatch(str(seed_block)):
        raise ConfigError(f"--seeds {seed_block!r}: expected a seed block such as s0, s0-7 or s1_4_9")
    out_dir = run_dir(scale, slug, method, seed_block)
    return out_dir, out_dir / ("metrics.json" if stage == "train" else "eval.json")


FOLDER_DIGEST = ".work-digest"  # a dot file: in no manifest


def _clear_stale_folder(job: Job) -> None:
    """A prepare or train folder holding work made under another config or code (its FOLDER_DIGEST
    differs) is emptied before the job runs: units and checkpoints of another digest are never reused
    anyway, and files an earlier config wrote (another grid size) must not enter this job's manifest.
    The first job of a new digest empties it, under a lock, so that shard jobs starting together do
    not empty each other's work. Acquire folders are left as they are: they hold downloads and files
    placed by hand, which acquire reuses by their checksums."""
    if job.stage not in ("prepare", "train") or not job.is_main:
        return
    import fcntl

    marker = job.out_dir / FOLDER_DIGEST
    with open(job.out_dir / ".work-lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        previous = marker.read_text().strip() if marker.is_file() else None
        if previous == job.work_digest:
            return
        keep = {marker.name, ".work-lock"}
        stale = [p for p in job.out_dir.rglob("*") if p.is_file() and p.name not in keep]
        for path in stale:
            path.unlink()
        if stale:
            job.log(f"removed {len(stale)} file(s) made under another config or code: starting fresh")
        atomic_write(marker, job.work_digest + "\n")


def run_stage(
    stage: str,
    slug: str,
    scale: str,
    overrides=(),
    seeds_override=None,
    dataset: str | None = None,
    method: str | None = None,
    seed_block: str | None = None,
    shard: tuple[int, int] | None = None,
) -> Path:
    """Compose the config, run one stage of one paper, write its completion file; return its path.
    With `shard` (k, N): run shard k of N of the job and write only its marker (module docstring)."""
    if shard is not None and stage not in SHARD_STAGES:
        raise ConfigError(f"--shard: stage {stage} cannot be sharded; shardable stages: {', '.join(SHARD_STAGES)}")
    paper = get_paper(slug)
    out_dir, done = _where(stage, scale, slug, dataset, method, seed_block)
    seeds = parse_seed_block(seed_block) if seed_block else []
    cfg = job_config(stage, slug, scale, overrides, seeds_override, dataset)
    threads = int(os.environ.get("ICLR26_THREADS", cfg.get("threads", 1)))

    out_dir.mkdir(parents=True, exist_ok=True)
    job = Job(paper=paper, cfg=cfg, stage=stage, out_dir=out_dir, dataset=dataset, method=method, seeds=seeds,
              shard=shard)
    if shard is not None:
        done = shard_marker(out_dir, *shard)
    verify_inputs(job, overrides, seeds_override)
    _clear_stale_folder(job)
    _limit_threads(threads)
    watch_parent()  # a local job stops (and checkpoints) when its Snakemake is killed
    configure_torch_on_import(threads)  # now, or when the stage first imports torch
    faults.enter_stage(stage)
    stage_fn = paper.stage(stage)
    if job.is_main:
        _save_config(job)
    started, cpu_started = time.time(), cpu_seconds()
    job.log("start" if shard is None else f"start shard {shard[0]}/{shard[1]}")
    try:
        result = stage_fn(job) or {}
    except ShardDone:
        result = None
    finally:
        _end_job()
    if shard is None:
        faults.reached("done")
    elapsed = round(time.time() - started, 3)
    if not job.is_main:
        return done  # the main process writes the completion file
    meta = provenance(stage=stage, paper=slug, scale=scale, dataset=dataset, method=method, seeds=seeds,
                      wall_seconds=elapsed, cpu_seconds=round(cpu_seconds() - cpu_started, 3),
                      process_cpu_seconds=round(cpu_seconds(), 3), threads=threads, processes=world_size(),
                      config_digest=job.config_digest, work_digest=job.work_digest,
                      code={"paper": paper.source_digest(), "core": core_digest()})
    if shard is not None:  # no completion file: the ordinary job gathers the units
        write_json(done, {"shard": f"{shard[0]}/{shard[1]}", "units_computed": job._computed,
                          "ended_at_its_share": result is None, "config_digest": job.config_digest,
                          "provenance": meta})
    elif stage in ("acquire", "prepare"):
        write_completion(done, {"files": file_manifest(out_dir), "info": result, "provenance": meta, "config": cfg},
                         job.config_digest)
    elif stage == "train":  # what evaluate will read, checked there
        run_files = file_manifest(out_dir, skip=("metrics.json", "eval.json", "evaluate.config.yaml"))
        write_completion(done, {**result, "run_files": run_files, "provenance": meta, "config": cfg},
                         job.config_digest)
    else:
        write_completion(done, {**result, "provenance": meta, "config": cfg}, job.config_digest)
    job.log(f"done in {elapsed:.1f}s")
    return done


# ----------------------------------------------------------------------------- completion files
def _content_digest(payload: dict) -> str:
    return hashlib.sha256(dumps_json({k: v for k, v in payload.items() if k != "content_sha256"}).encode()).hexdigest()


def write_completion(path: Path, payload: dict, digest: str) -> Path:
    """A stage's completion file: its payload, the config digest it was made under and the sha256 of
    its own content, so that a reader sees a file edited after the job wrote it."""
    payload = {**payload, "config_digest": digest}
    return write_json(path, {**payload, "content_sha256": _content_digest(json.loads(dumps_json(payload)))})


def read_completion(done: Path, producer: str) -> dict:
    """A completion file, checked whole: readable JSON whose content matches its sha256; otherwise
    it is removed (so that rerunning the same command makes it again) and one DataError names it."""
    if not done.exists():
        raise DataError(f"{done} is missing: the {producer} job has not run (run the workflow, not this job alone)")
    try:
        payload = read_json(done)
    except ValueError:
        raise _discard(done, producer, f"{done} is unreadable") from None
    if not isinstance(payload, dict) or payload.get("content_sha256") != _content_digest(payload):
        raise _discard(done, producer, f"{done} was edited after the {producer} job wrote it (its content no longer "
                                       "matches its sha256)")
    return payload


def _comparable(cfg: dict) -> dict:
    cfg = {k: v for k, v in dict(cfg).items() if k not in PRESENTATION_KEYS and k not in ("shards", "threads")}
    return json.loads(dumps_json(cfg))


def config_mismatch(made: dict, mine: dict) -> str | None:
    """The first key on which the config an input was made under and this job's config disagree,
    over the keys both read (a data job reads only its dataset's entry); None when they agree."""
    made, mine = _comparable(made), _comparable(mine)
    for key in sorted(set(made) & set(mine)):
        if key == "data" and isinstance(made[key], dict) and isinstance(mine[key], dict):
            for name in sorted(set(made[key]) & set(mine[key])):
                if made[key][name] != mine[key][name]:
                    return f"data.{name}"
        elif made[key] != mine[key]:
            return _first_difference(key, made[key], mine[key])
    return None


def _first_difference(key: str, a, b) -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for sub in sorted(set(a) | set(b)):
            if a.get(sub) != b.get(sub):
                return _first_difference(f"{key}.{sub}", a.get(sub), b.get(sub))
    return key


def cpu_seconds() -> float:
    """User + system CPU seconds of this process (every thread) and of its finished children since it
    started: unlike wall time, what a job costs whatever else the machine runs (scripts/bench_workflow)."""
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _limit_threads(threads: int) -> None:
    # set before numpy/torch start their thread pools; one job per core is Snakemake's business
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(threads)


# ----------------------------------------------------------------------------- input checks
def _discard(done: Path, producer: str, why: str) -> DataError:
    """Remove the completion file of the job that made a bad input, and those of the jobs made from
    it, so that rerunning the same command re-creates that input and everything after it (Snakemake
    does not remake a missing intermediate file while the outputs downstream of it are present);
    return the one-line error. Only completion files go: the work in the folders stays."""
    downstream = [path for path in made_from(done) if path.exists()]
    for path in [done, *downstream]:
        path.unlink(missing_ok=True)
    also = f" and the {len(downstream)} completion file(s) made from it" if downstream else ""
    return DataError(f"{why}; removed {done}{also} so that the {producer} job runs again: "
                     "rerun the same command to re-create it")


def made_from(done: Path) -> list[Path]:
    """The completion files of the jobs downstream of a completion file, by the folder layout (module
    docstring): a raw manifest -> its prepared manifest -> every train and evaluate job of the paper
    -> the paper's results (only when they were tabulated at this scale)."""
    parts = Path(done).parts
    try:
        top = parts.index("data") if "data" in parts else parts.index("runs")
    except ValueError:
        return []
    root, parts = Path(*parts[:top]) if top else Path(), parts[top:]
    if parts[0] == "data" and len(parts) == 6:                   # data/<scale>/<paper>/<kind>/<dataset>/manifest.json
        _, scale, paper, kind, dataset, _ = parts
        runs = sorted((root / "runs" / scale / paper).glob("*/*/metrics.json")) + \
            sorted((root / "runs" / scale / paper).glob("*/*/eval.json"))
        prepared = [root / "data" / scale / paper / "prepared" / dataset / "manifest.json"] if kind == "raw" else []
        return [*prepared, *runs, *_results(root, scale, paper)]
    if parts[0] == "runs" and len(parts) == 6:                   # runs/<scale>/<paper>/<method>/<seeds>/<file>
        _, scale, paper, *_ = parts
        evals = [Path(done).parent / "eval.json"] if parts[-1] == "metrics.json" else []
        return [*evals, *_results(root, scale, paper)]
    return []


def _results(root: Path, scale: str, paper: str) -> list[Path]:
    claims = root / "results" / paper / "claims.json"
    try:
        return [claims] if read_json(claims).get("scale") == scale else []
    except (OSError, ValueError, AttributeError):
        return []


def verify_manifest(done: Path, producer: str, key: str = "files", cfg: dict | None = None) -> dict:
    """Every file a stage wrote is still there, whole and unchanged (the sha256 list in its
    completion file: `files` of a data manifest, `run_files` of a train job's metrics.json), and,
    given the reader's `cfg`, it was made under the config the reader reads."""
    payload = read_completion(done, producer)
    if cfg is not None:
        key_differs = config_mismatch(payload.get("config") or {}, cfg)
        if key_differs:
            raise _discard(done, producer, f"{done} was made under another config (config key '{key_differs}' "
                                           "differs from this job's)")
    try:
        files = payload[key]
    except (KeyError, TypeError):
        raise _discard(done, producer, f"{done} is unreadable (no '{key}')") from None
    for rel, meta in files.items():
        path = done.parent / rel
        if not path.is_file():
            raise _discard(done, producer, f"{path} is missing")
        if path.stat().st_size != meta["bytes"] or sha256_file(path) != meta["sha256"]:
            raise _discard(done, producer, f"{path} was changed after {producer} wrote it (sha256 differs "
                                           "from its manifest)")
    return payload


def verify_inputs(job: Job, overrides=(), seeds_override=None) -> None:
    """Check what a stage is about to read before it runs: the manifests of the data it reads and the
    train job's completion file, each whole, unchanged and made under the config this job reads; a
    bad input is one line naming the file and the job that makes it."""
    slug, scale = job.paper.slug, job.scale
    if job.stage == "prepare":
        verify_manifest(job.raw_dir() / "manifest.json", f"acquire {slug}/{job.dataset}", cfg=job.cfg)
    elif job.stage in ("train", "evaluate"):
        for dataset in job.paper.datasets:
            verify_manifest(data_dir(scale, slug, "prepared", dataset) / "manifest.json", f"prepare {slug}/{dataset}",
                            cfg=job.cfg)
    if job.stage == "evaluate" and job.method not in job.paper.training_free:  # no train job for those
        verify_manifest(job.out_dir / "metrics.json", f"train {slug}/{job.method}/{job.out_dir.name}", "run_files",
                        cfg=job.cfg)


def load_records(eval_files, cfg: dict | None = None) -> list[dict[str, Any]]:
    """The per-seed records of several eval.json files, each tagged with its method; each file
    checked whole and, given the reader's `cfg`, made under it."""
    records = []
    for path in eval_files:
        path = Path(path)
        payload = read_completion(path, "evaluate")
        if cfg is not None:
            key_differs = config_mismatch(payload.get("config") or {}, cfg)
            if key_differs:
                raise _discard(path, "evaluate", f"{path} was made under another config (config key "
                                                 f"'{key_differs}' differs from this run's)")
        method = payload["provenance"]["method"]
        for record in payload.get("records", []):
            records.append({"method": method, **record})
    return records


def completed(done: Path, cfg: dict, paper: Paper) -> bool:
    """True when a job's completion file is there, whole, and was made under `cfg` and the paper's
    code (its recorded config digest is this job's): only then may a rerun skip the job."""
    try:
        payload = read_json(done)
    except (FileNotFoundError, ValueError):
        return False
    return (isinstance(payload, dict) and payload.get("content_sha256") == _content_digest(payload)
            and payload.get("config_digest") == view_digest(cfg, paper.source_digest()))


def run_paper(slug: str, scale: str, overrides=(), seeds=None, methods=None) -> list[Path]:
    """Run every stage of one paper in this process, without Snakemake (tests, notebooks).

    Like a Snakemake rerun, a stage whose completion file exists and was made under the same config
    and paper code is not run again (so calling it after an interrupted run resumes it); a stage made
    under another config (other overrides or seeds) runs again. Returns the eval.json paths; same files, same layout as
    the workflow produces.
    """
    from .config import seed_blocks

    paper = get_paper(slug)
    cfg = compose_job_config(slug, scale, tuple(overrides), seeds)

    def once(stage, done: Path, **where) -> Path:
        view = job_config(stage, slug, scale, overrides, seeds, where.get("dataset"))
        return done if completed(done, view, paper) else run_stage(stage, slug, scale, overrides, seeds, **where)

    for dataset in paper.datasets:
        once("acquire", data_dir(scale, slug, "raw", dataset) / "manifest.json", dataset=dataset)
        once("prepare", data_dir(scale, slug, "prepared", dataset) / "manifest.json", dataset=dataset)
    evals = []
    for method in methods or cfg.get("run_methods") or paper.methods:
        for block in seed_blocks(cfg["seeds"], cfg.get("seed_batch", 1)):
            folder = run_dir(scale, slug, method, block)
            if method not in paper.training_free:
                once("train", folder / "metrics.json", method=method, seed_block=block)
            evals.append(once("evaluate", folder / "eval.json", method=method, seed_block=block))
    return evals
