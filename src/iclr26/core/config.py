"""Configuration: the workflow's `config/config.yaml` and each job's Hydra-composed config.

Two layers, kept apart on purpose:
- the workflow config (scale, papers, seeds, overrides) chooses *what runs*; it is validated
  against `workflow/schemas/config.schema.yaml` before any job starts;
- the job config is composed by Hydra from `config/hydra/`: `job.yaml` + `paper/<slug>` +
  `scale/<scale>` + `paper_scale/<slug>/<scale>` + the user's overrides. It says *how* a job runs
  and is saved beside every output.
"""
from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[3]
HYDRA_DIR = REPO_ROOT / "config" / "hydra"
SCHEMA_PATH = REPO_ROOT / "workflow" / "schemas" / "config.schema.yaml"
SCALES = ("smoke", "tiny", "full")


from .errors import ConfigError  # noqa: E402  (re-exported: callers import it from here)


# ----------------------------------------------------------------------------- workflow config
def read_yaml_file(path: str | Path) -> Any:
    """A YAML file, or one ConfigError naming the file, the line and the problem."""
    path = Path(path)
    try:
        return yaml.safe_load(path.read_text())
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{path}{where}: not valid YAML ({err.problem or err.context})") from None
    except OSError as err:
        raise ConfigError(f"{path}: cannot be read ({err.strerror})") from None


def _describe(path: Sequence[Any]) -> str:
    return ".".join(str(p) for p in path) or "<config>"


def validate_workflow_config(config: dict, implemented: Iterable[str], schema_path=SCHEMA_PATH) -> dict:
    """Validate and fill defaults of the workflow config; raise ConfigError with one line."""
    import jsonschema

    schema = yaml.safe_load(Path(schema_path).read_text())
    implemented = list(implemented)
    config = _numbers_from_command_line(config)
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: (len(e.path), list(e.path)))
    if errors:
        err = errors[0]
        key = _describe(err.absolute_path)
        if err.validator == "required":
            missing = err.message.split("'")[1]
            raise ConfigError(f"config key '{missing}' is missing (required by {schema_path.name})")
        if err.validator == "enum":
            allowed = ", ".join(map(str, err.validator_value))
            raise ConfigError(f"config key '{key}' = {err.instance!r} is not allowed; allowed: {allowed}")
        if err.validator == "additionalProperties":
            allowed = ", ".join(sorted(err.schema.get("properties", {})))
            raise ConfigError(f"config has unknown key(s) at '{key}': {err.message}; allowed keys: {allowed}")
        top = schema["properties"].get(str(err.absolute_path[0]), {}) if err.absolute_path else {}
        allowed = top.get("description", "").strip()
        detail = f"; allowed: {allowed}" if allowed else f": {err.message}"
        raise ConfigError(f"config key '{key}' = {err.instance!r} is not valid{detail}")

    filled = dict(config)
    for name, spec in schema.get("properties", {}).items():
        if name not in filled and "default" in spec:
            filled[name] = spec["default"]
    papers = filled.get("papers") or implemented
    unknown = [p for p in papers if p not in implemented]
    if unknown:
        raise ConfigError(
            f"config key 'papers' names unknown paper {unknown[0]!r}; implemented: {', '.join(implemented)}"
        )
    filled["papers"] = list(papers)
    for item in filled.get("overrides") or []:
        head, sep, rest = item.partition(":")
        if sep and "=" not in head and head not in implemented:
            raise ConfigError(f"config key 'overrides' item {item!r} names unknown paper {head!r}; "
                              f"implemented: {', '.join(implemented)}")
    return filled


def _numbers_from_command_line(config: dict) -> dict:
    """`--config 'seeds=[0,1,2,3]'` reaches us as ['0', '1', '2', '3'] (Snakemake parses list items as
    strings): read integer-looking seeds as the integers the user wrote."""
    seeds = config.get("seeds")
    if isinstance(seeds, list) and all(isinstance(s, str) and s.strip().isdigit() for s in seeds):
        return {**config, "seeds": [int(s) for s in seeds]}
    return config


def split_overrides(overrides: Iterable[str], slug: str) -> list[str]:
    """Overrides for one paper: 'key=value' applies to every paper, 'slug:key=value' to one."""
    chosen = []
    for item in overrides:
        head, sep, rest = item.partition(":")
        if sep and "=" not in head:
            if head == slug:
                chosen.append(rest)
        else:
            chosen.append(item)
    return chosen


# ----------------------------------------------------------------------------- job config (Hydra)
COMPOSE_CACHE = REPO_ROOT / ".cache" / "compose"
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _compose_key(slug: str, scale: str, overrides: tuple[str, ...]) -> str:
    """Everything a composition depends on: the config tree's files, the request, Hydra's version."""
    from importlib.metadata import version

    digest = hashlib.sha256(json.dumps([slug, scale, list(overrides), version("hydra-core")]).encode())
    for path in sorted(HYDRA_DIR.rglob("*.yaml")):
        digest.update(str(path.relative_to(HYDRA_DIR)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:24]


@functools.lru_cache(maxsize=256)
def _compose(slug: str, scale: str, overrides: tuple[str, ...]) -> str:
    """The resolved config as YAML. Hydra takes ~1 s per composition, and every job composes the
    config Snakemake already composed when it built the DAG: the result is kept on disk under a key
    of every input file, so a job reuses it and an edited config file never hits a stale entry."""
    cached = COMPOSE_CACHE / f"{_compose_key(slug, scale, overrides)}.yaml"
    if cached.exists():
        return cached.read_text()
    text = _compose_with_hydra(slug, scale, overrides)
    try:
        from .io import atomic_write

        atomic_write(cached, text)
    except OSError:  # a read-only checkout still works, only slower
        pass
    return text


def _compose_with_hydra(slug: str, scale: str, overrides: tuple[str, ...]) -> str:
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    if scale not in SCALES:
        raise ConfigError(f"config key 'scale' = {scale!r} is not allowed; allowed: {', '.join(SCALES)}")
    with initialize_config_dir(config_dir=str(HYDRA_DIR), version_base="1.3", job_name=slug):
        cfg = None
        try:
            cfg = compose(config_name="job", overrides=[f"paper={slug}", f"scale={scale}", *overrides])
            OmegaConf.resolve(cfg)
        except (HydraException, OmegaConfBaseException) as err:
            if cfg is not None:  # a text interpolating a misspelled dataset: name the dataset, not the text
                _check_datasets(slug, OmegaConf.to_container(cfg, resolve=False).get("data"))
            first = str(err).strip().splitlines()[0]
            raise ConfigError(f"paper {slug} ({scale}): bad override or config: {first}") from None
    return OmegaConf.to_yaml(cfg)


def _check_datasets(slug: str, data) -> None:
    from .contract import check_datasets
    from .paper import get_paper

    check_datasets(get_paper(slug), data)


def compose_job_config(slug: str, scale: str, overrides: Sequence[str] = (), seeds=None):
    """The resolved job config of one paper at one scale, as a plain dict.

    `seeds` (from the workflow config) replaces the paper's own seed list when given.
    """
    from .contract import check_job_config
    from .paper import get_paper

    paper = get_paper(slug)
    extra = tuple(overrides)
    if seeds:
        extra += (f"seeds=[{','.join(str(int(s)) for s in seeds)}]",)
    cfg = yaml.load(_compose(slug, scale, extra), Loader=_YAML_LOADER)  # libyaml: 10x faster, same types
    if overrides:
        defaults = yaml.load(_compose(slug, scale, ()), Loader=_YAML_LOADER)
        check_override_types(slug, scale, overrides, defaults, cfg)
    check_job_config(paper, cfg)
    return cfg


def _type_name(value: Any) -> str:
    return {bool: "true/false", int: "an integer", float: "a number", str: "a string", list: "a list",
            dict: "a mapping"}.get(type(value), type(value).__name__)


def check_override_types(slug: str, scale: str, overrides: Sequence[str], defaults: dict, cfg: dict) -> None:
    """An override must keep the type of the value it replaces (an integer stays an integer, a number
    a number, a list a list): `train.total_steps=abc` is refused now, not by a traceback in train."""
    for item in overrides:
        key, _, _ = item.lstrip("+~").partition("=")
        old, new = defaults, cfg
        for part in key.split("."):
            old = old.get(part) if isinstance(old, dict) else None
            new = new.get(part) if isinstance(new, dict) else None
        if old is None or new is None or item.startswith(("+", "~")):
            continue
        fits = (isinstance(new, bool) == isinstance(old, bool)) and (
            isinstance(new, type(old)) or (isinstance(old, float) and isinstance(new, int)))
        if not fits:
            raise ConfigError(f"paper {slug} ({scale}): override '{item}' gives {_type_name(new)} where "
                              f"'{key}' is {_type_name(old)} (default {old!r})")


# not what the numbers depend on: how they are shown, scheduled (resources, cluster) or estimated (estimate)
PRESENTATION_KEYS = ("table", "claims", "reported", "resources", "deviations", "cluster", "estimate",
                     "run_methods")  # which methods a scale runs: scheduling, not a number of any job
# what every stage may read: who and where the job is, not how a method works
JOB_KEYS = ("slug", "scale", "seeds", "seed_batch", "threads", "device", "launch", "resources", "conda_env")
DATA_STAGES = ("acquire", "prepare")


class StageConfig(dict):
    """The part of a job config one stage may read. The data stages (acquire, prepare) see `data`,
    the job keys and the sections their paper declares in `data_reads`; so a training override
    does not rerun them, and reading any other section is an error, not a silently stale input."""

    def __init__(self, visible: dict, hidden: Iterable[str], where: str):
        super().__init__(visible)
        self._hidden, self._where = frozenset(hidden), where

    def _refuse(self, key):
        raise ConfigError(f"{self._where} reads config key '{key}', which it does not declare: add it to "
                          "the paper's data_reads (so that a change of it reruns this stage)")

    def __getitem__(self, key):
        if key in self._hidden:
            self._refuse(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        if key in self._hidden:
            self._refuse(key)
        return super().get(key, default)

    def __contains__(self, key):
        if key in self._hidden:
            self._refuse(key)
        return super().__contains__(key)


def stage_keys(stage: str, data_reads: Iterable[str]) -> tuple[str, ...] | None:
    """Top-level config keys a stage reads (None: all of them)."""
    return (*JOB_KEYS, "data", *data_reads) if stage in DATA_STAGES else None


def stage_config(cfg: dict, stage: str, data_reads: Iterable[str] = ()) -> dict:
    keys = stage_keys(stage, data_reads)
    if keys is None:
        return cfg
    visible = {k: v for k, v in cfg.items() if k in keys}
    return StageConfig(visible, [k for k in cfg if k not in keys], f"stage {stage} of paper {cfg.get('slug')}")


def stage_overrides(overrides: Iterable[str], stage: str, data_reads: Iterable[str] = ()) -> list[str]:
    """The overrides a stage's job is given: those of the keys it reads."""
    keys = stage_keys(stage, data_reads)
    if keys is None:
        return list(overrides)
    return [o for o in overrides if o.lstrip("+~").split("=", 1)[0].split(".")[0] in keys]


def results_config(cfg: dict) -> dict:
    """The part of a job config that the numbers depend on (not how they are shown or scheduled)."""
    return {k: v for k, v in cfg.items() if k not in PRESENTATION_KEYS}


def config_digest(cfg: Any) -> str:
    """A short stable hash of a config, for Snakemake params (a changed config reruns the job)."""
    return hashlib.sha256(json.dumps(cfg, sort_keys=True, default=str).encode()).hexdigest()[:16]


def retry_scaled(value: int, attempt: int, limit: int | None = None) -> int:
    """Memory and runtime of a retried job: doubled on each attempt (x1, x2, x4, ...), never above
    `limit` when one is given (runtime: the partition's time limit, `cluster.max_runtime_min`; a job
    asking for more than its partition allows is never scheduled)."""
    scaled = int(value) * 2 ** (int(attempt) - 1)
    return min(scaled, int(limit)) if limit else scaled


def job_resource(paper, cfg: dict, stage: str, key: str, attempt: int = 1):
    """One resource of one job, as the workflow asks Slurm for it: `resources.<stage>.<key>` of the
    job config; GPUs only on the paper's `gpu_stages` (a CPU-only stage never asks for one); memory
    and runtime doubled on each retry, runtime capped at the partition's limit; `partition`: the
    cluster's GPU partition for a job with GPUs, else its CPU partition (None: the cluster's default)."""
    cluster = cfg.get("cluster") or {}
    if key == "partition":
        gpus = job_resource(paper, cfg, stage, "gpus")
        return cluster.get("gpu_partition") if gpus > 0 else cluster.get("cpu_partition")
    if key == "gpus" and stage not in paper.gpu_stages:
        return 0
    value = cfg["resources"][stage][key]
    if key == "mem_mb":
        return retry_scaled(value, attempt)
    if key == "runtime":
        return retry_scaled(value, attempt, cluster.get("max_runtime_min"))
    return value


def workflow_jobs(paper, cfg: dict, methods: Sequence[str] | None = None) -> list[dict]:
    """Every job the workflow runs for one paper, in DAG order: {stage, dataset} for acquire and
    prepare, {stage, method, seeds} for train and evaluate (one per seed block; no train job for a
    method the paper declares `training_free`), then its tabulate. The rules and the preflight
    (core.preflight) both enumerate jobs here."""
    jobs = [{"stage": stage, "dataset": d} for d in paper.datasets for stage in ("acquire", "prepare")]
    for method in methods or cfg.get("run_methods") or paper.methods:
        for block in seed_blocks(cfg["seeds"], cfg.get("seed_batch", 1)):
            if method not in paper.training_free:
                jobs.append({"stage": "train", "method": method, "seeds": block})
            jobs.append({"stage": "evaluate", "method": method, "seeds": block})
    jobs.append({"stage": "tabulate"})
    return jobs


def seed_blocks(seeds: Sequence[int], batch: int) -> list[str]:
    """Group seeds into jobs. batch=1 gives one job per seed ('s3'); larger batches one job per
    block ('s0-7' for a contiguous block, 's1_4_9' otherwise), for papers that vectorise seeds."""
    seeds = [int(s) for s in seeds]
    blocks = [seeds[i : i + max(1, batch)] for i in range(0, len(seeds), max(1, batch))]
    names = []
    for block in blocks:
        if len(block) == 1:
            names.append(f"s{block[0]}")
        elif block == list(range(block[0], block[-1] + 1)):
            names.append(f"s{block[0]}-{block[-1]}")
        else:
            names.append("s" + "_".join(map(str, block)))
    return names


def parse_seed_block(name: str) -> list[int]:
    if not name.startswith("s"):
        raise ConfigError(f"seed block {name!r} must start with 's'")
    body = name[1:]
    if "-" in body:
        lo, hi = body.split("-")
        return list(range(int(lo), int(hi) + 1))
    return [int(s) for s in body.split("_")]
