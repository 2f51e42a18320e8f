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
import os
import re
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
class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a key given twice in one mapping is an error: by default the
    last value wins silently (`scale: smoke` then `scale: tiny` ran a tiny plan)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    "while reading a mapping", node.start_mark, f"key {key!r} is given twice", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


def read_yaml_file(path: str | Path) -> Any:
    """A YAML file, or one ConfigError naming the file, the line and the problem (a key given twice
    in one mapping is a problem)."""
    path = Path(path)
    try:
        return yaml.load(path.read_text(), Loader=_UniqueKeyLoader)
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
    if not isinstance(config, dict):
        raise ConfigError("the workflow config (config/config.yaml and --config) is not a mapping of keys: "
                          f"it needs at least 'scale' ({', '.join(SCALES)})")
    config = _numbers_from_command_line(config)
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: (len(e.path), list(e.path)))
    if errors:
        err = errors[0]
        if err.validator in ("oneOf", "anyOf") and err.context:  # e.g. seeds: null or a list; say what is wrong
            branches = [e for e in err.context if not (e.validator == "type" and e.validator_value == "null")]
            err = jsonschema.exceptions.best_match(branches or err.context)
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
        if err.validator == "uniqueItems":
            raise ConfigError(f"config key '{key}' = {err.instance!r} lists an item twice: each seed, paper or "
                              "method runs once (a repeated seed would be counted as an independent one)")
        if err.validator == "maximum":
            raise ConfigError(f"config key '{key}' = {err.instance!r} is too large; allowed: at most "
                              f"{err.validator_value} (seeds are 31-bit integers)")
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
    for paper in filled.get("methods") or {}:
        if paper not in implemented:
            raise ConfigError(f"config key 'methods.{paper}' names unknown paper {paper!r}; "
                              f"implemented: {', '.join(implemented)}")
    for item in filled.get("overrides") or []:
        head, sep, rest = item.partition(":")
        if sep and "=" not in head and head not in implemented:
            raise ConfigError(f"config key 'overrides' item {item!r} names unknown paper {head!r}; "
                              f"implemented: {', '.join(implemented)}")
        check_override_key(rest if sep and "=" not in head else item)
    return filled


# who a job is, set by the composition itself (paper/<slug>.yaml, scale/<scale>.yaml): an override of
# them would make a smoke job read tiny data or one paper's job call itself another
IDENTITY_KEYS = ("slug", "scale")


def check_override_key(item: str) -> None:
    key = item.lstrip("+~").partition("=")[0].strip()
    if key in IDENTITY_KEYS:
        raise ConfigError(f"override {item!r}: '{key}' is who the job is, not a setting (choose the paper with "
                          "'papers' and the scale with 'scale')")


def _numbers_from_command_line(config: dict) -> dict:
    """`--config 'seeds=[0,1,2,3]'` reaches us as ['0', '1', '2', '3'] (Snakemake parses list items as
    strings): read integer-looking seeds as the integers the user wrote."""
    seeds = config.get("seeds")
    if isinstance(seeds, str) and seeds.strip().lower() in ("null", "none", "~", ""):
        return {**config, "seeds": None}  # what the schema allows: `--config seeds=null` keeps each paper's
    if isinstance(seeds, list) and all(isinstance(s, str) and s.strip().isdigit() for s in seeds):
        return {**config, "seeds": [int(s) for s in seeds]}
    return config


MAX_SEED = 2**31 - 1  # every RNG the papers seed (numpy, torch, Python's, gymnasium's) takes a 31-bit seed


def check_seed_list(seeds, where: str) -> list[int]:
    """A list of distinct non-negative integer seeds, each at most MAX_SEED; else one ConfigError."""
    if not isinstance(seeds, list) or not seeds:
        raise ConfigError(f"{where}: seeds must be a non-empty list of integers, got {seeds!r}")
    for seed in seeds:
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
            raise ConfigError(f"{where}: seed {seed!r} is not allowed; allowed: integers from 0 to {MAX_SEED}")
    if len(set(seeds)) != len(seeds):
        twice = next(s for s in seeds if seeds.count(s) > 1)
        raise ConfigError(f"{where}: seed {twice} is listed twice; each seed runs once (a repeated seed would "
                          "be counted as an independent one)")
    return seeds


def parse_seed_list(text: str | None) -> list[int] | None:
    """`--seed-list 0,1,2` -> [0, 1, 2]; None -> None; anything else: one ConfigError."""
    if text is None:
        return None
    parts = [p.strip() for p in str(text).split(",")]
    if not all(p.isdigit() for p in parts):
        raise ConfigError(f"--seed-list {text!r}: expected comma-separated non-negative integers, e.g. 0,1,2")
    return check_seed_list([int(p) for p in parts], "--seed-list")


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


_ENV_READ = re.compile(r"\$\{oc\.env:([A-Za-z_][A-Za-z0-9_]*)")


def _compose_key(slug: str, scale: str, overrides: tuple[str, ...]) -> str:
    """Everything a composition depends on: the config tree's files, the request, Hydra's version and
    the value of every environment variable the tree reads (`${oc.env:NAME,default}`)."""
    from importlib.metadata import version

    digest = hashlib.sha256(json.dumps([slug, scale, list(overrides), version("hydra-core")]).encode())
    names = set()
    for path in sorted(HYDRA_DIR.rglob("*.yaml")):
        text = path.read_bytes()
        names.update(_ENV_READ.findall(text.decode(errors="replace")))
        digest.update(str(path.relative_to(HYDRA_DIR)).encode() + b"\0" + text + b"\0")
    digest.update(json.dumps({name: os.environ.get(name) for name in sorted(names)}).encode())
    return digest.hexdigest()[:24]


@functools.lru_cache(maxsize=256)
def _compose(slug: str, scale: str, overrides: tuple[str, ...]) -> str:
    """The resolved config as YAML. Hydra takes ~1 s per composition, and every job composes the
    config Snakemake already composed when it built the DAG: the result is kept on disk under a key
    of every input (core._compose_key), so a job reuses it and an edited config file or environment
    variable never hits a stale entry; an entry whose text no longer matches its checksum (edited by
    hand) is composed again."""
    cached = COMPOSE_CACHE / f"{_compose_key(slug, scale, overrides)}.yaml"
    from .io import atomic_write, sealed, unsealed

    if cached.exists():
        text = unsealed(cached.read_text())
        if text is not None:
            return text
    text = _compose_with_hydra(slug, scale, overrides)
    try:
        atomic_write(cached, sealed(text))
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
    for item in overrides:
        check_override_key(item)
    extra = tuple(overrides)
    if seeds:
        extra += (f"seeds=[{','.join(str(int(s)) for s in check_seed_list(list(seeds), 'seeds'))}]",)
    cfg = yaml.load(_compose(slug, scale, extra), Loader=_YAML_LOADER)  # libyaml: 10x faster, same types
    if overrides:
        defaults = yaml.load(_compose(slug, scale, ()), Loader=_YAML_LOADER)
        check_override_types(slug, scale, overrides, defaults, cfg)
    if (cfg.get("slug"), cfg.get("scale")) != (slug, scale):  # who the job is comes from the composition only
        raise ConfigError(f"paper {slug} ({scale}): the composed config says slug {cfg.get('slug')!r}, scale "
                          f"{cfg.get('scale')!r}: a config file or override sets who the job is")
    check_seed_list(cfg.get("seeds"), f"paper {slug} ({scale}): config key 'seeds'")
    check_job_config(paper, cfg)
    return cfg


def default_job_config(slug: str, scale: str) -> dict:
    """The paper's job config with no override and its own seeds (what an override is compared with)."""
    return yaml.load(_compose(slug, scale, ()), Loader=_YAML_LOADER)


def _lookup(cfg: dict, key: str):
    node = cfg
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


_MISSING = object()


def effective_overrides(slug: str, scale: str, overrides: Sequence[str]) -> list[str]:
    """The overrides that change the paper's config: one that sets a key to the value it has anyway
    is dropped, so that writing a default out on the command line reruns nothing (the jobs' command
    lines, which Snakemake compares, stay the same). Additions and deletions are kept."""
    if not overrides:
        return []
    defaults, cfg = default_job_config(slug, scale), compose_job_config(slug, scale, tuple(overrides))
    kept = []
    for item in overrides:
        key = item.partition("=")[0]
        if item.startswith(("+", "~")) or _lookup(defaults, key) is _MISSING or \
                _lookup(defaults, key) != _lookup(cfg, key):
            kept.append(item)
    return kept


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
                     "run_methods",   # which methods a scale runs: scheduling, not a number of any job
                     "metric_range", "indicators")   # how claims are judged (core.claims), not a number
SCHEDULING_KEYS = ("resources", "cluster", "estimate", "shards", "run_methods")
# what every stage may read: who and where the job is, not how a method works. The seed list is not
# one of them: a job reads its own block (job.seeds) unless its paper declares that the stage reads
# the whole list (Paper.seed_list_stages), so adding a seed reruns only the new seed's jobs
JOB_KEYS = ("slug", "scale", "seed_batch", "threads", "device", "launch", "resources", "conda_env")
DATA_STAGES = ("acquire", "prepare")


class StageConfig(dict):
    """The part of a job config one stage may read. The data stages (acquire, prepare) see their own
    dataset's `data` entry, the job keys and the sections their paper declares in `data_reads` (all of
    `data` when it names "data"); so a training override or another dataset's change does not rerun
    them. No stage sees `seeds` unless the paper declares it in `seed_list_stages`. Reading a hidden
    key is an error naming the declaration to add, not a silently stale input."""

    def __init__(self, visible: dict, hidden: Iterable[str], where: str, remedy: dict[str, str] | None = None):
        super().__init__(visible)
        self._hidden, self._where, self._remedy = frozenset(hidden), where, remedy or {}

    def _refuse(self, key):
        remedy = self._remedy.get(key, "add it to the paper's data_reads (so that a change of it reruns this stage)")
        raise ConfigError(f"{self._where} reads config key '{key}', which it does not declare: {remedy}")

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


_SEEDS_REMEDY = ("use job.seeds (the job's own seed block), or add the stage to the paper's seed_list_stages "
                 "(then a change of the seed list reruns it)")


def stage_keys(stage: str, data_reads: Iterable[str], reads_seed_list: bool = True) -> tuple[str, ...] | None:
    """Top-level config keys a stage reads (None: all of them)."""
    seeds = ("seeds",) if reads_seed_list else ()
    return (*JOB_KEYS, *seeds, "data", *data_reads) if stage in DATA_STAGES else None


def stage_config(cfg: dict, stage: str, data_reads: Iterable[str] = (), dataset: str | None = None,
                 reads_seed_list: bool = True) -> dict:
    """The view of `cfg` one job of `stage` reads (StageConfig); `dataset`: a data stage's dataset."""
    keys = stage_keys(stage, data_reads, reads_seed_list)
    where = f"stage {stage} of paper {cfg.get('slug')}"
    hidden = [] if reads_seed_list or "seeds" not in cfg else ["seeds"]
    if keys is None:
        if not hidden:
            return cfg
        return StageConfig({k: v for k, v in cfg.items() if k not in hidden}, hidden, where,
                           {"seeds": _SEEDS_REMEDY})
    visible = {k: v for k, v in cfg.items() if k in keys}
    if dataset is not None and "data" not in data_reads and isinstance(cfg.get("data"), dict):
        others = [d for d in cfg["data"] if d != dataset]
        visible["data"] = StageConfig({dataset: cfg["data"][dataset]}, others, f"{where} (dataset {dataset})",
                                      {d: "add 'data' to the paper's data_reads (then a change of any dataset "
                                          "reruns every data job)" for d in others})
    return StageConfig(visible, [k for k in cfg if k not in keys], where, {"seeds": _SEEDS_REMEDY})


def stage_overrides(overrides: Iterable[str], stage: str, data_reads: Iterable[str] = (), dataset: str | None = None,
                    reads_seed_list: bool = True) -> list[str]:
    """The overrides a stage's job is given: those of the keys it reads (a data job: its own dataset's)."""
    keys = stage_keys(stage, data_reads, reads_seed_list)
    chosen = []
    for item in overrides:
        path = item.lstrip("+~").split("=", 1)[0].split(".")
        if keys is not None and path[0] not in keys:
            continue
        if keys is None and path[0] == "seeds" and not reads_seed_list:
            continue
        if dataset is not None and path[0] == "data" and "data" not in data_reads and len(path) > 1 \
                and path[1] != dataset:
            continue
        chosen.append(item)
    return chosen


def job_view(paper, cfg: dict, stage: str, dataset: str | None = None) -> dict:
    """What one job of a paper's stage reads of the composed config (stage_config, with the paper's
    declarations): the workflow's rerun digest and the job's own digest are both computed from it."""
    return stage_config(cfg, stage, paper.data_reads, dataset, stage in paper.seed_list_stages)


def job_overrides(paper, overrides: Iterable[str], stage: str, dataset: str | None = None) -> list[str]:
    return stage_overrides(overrides, stage, paper.data_reads, dataset, stage in paper.seed_list_stages)


def view_digest(view: dict, paper_code: str) -> str:
    """The digest of what a job's numbers depend on: the config it reads (less presentation and
    scheduling, less the shard count: units saved by shard jobs serve any count) and the paper's code."""
    cfg = {k: v for k, v in results_config(dict(view)).items() if k != "shards"}
    if isinstance(cfg.get("data"), StageConfig):
        cfg["data"] = dict(cfg["data"])
    return config_digest({"config": cfg, "code": paper_code})


def tabulate_digest(cfg: dict, paper_code: str) -> str:
    """The digest of what tabulate's outputs depend on: the whole config less scheduling. Unlike a
    job's view (view_digest) it keeps the presentation, the claims and their ranges: a changed table
    title or claim reruns tabulate (and nothing upstream)."""
    kept = {k: v for k, v in cfg.items() if k not in SCHEDULING_KEYS}
    return config_digest({"config": kept, "code": paper_code})


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
    """'s3' -> [3], 's0-7' -> [0..7], 's1_4_9' -> [1, 4, 9]; anything else: one ConfigError."""
    body = str(name)[1:] if str(name).startswith("s") else None
    if body is None or not re.fullmatch(r"[0-9]+(-[0-9]+|(_[0-9]+)*)", body):
        raise ConfigError(f"seed block {name!r}: expected s<seed>, s<first>-<last> or s<a>_<b>_..., e.g. s0 or s0-7")
    if "-" in body:
        lo, hi = (int(x) for x in body.split("-"))
        seeds = list(range(lo, hi + 1))
    else:
        seeds = [int(s) for s in body.split("_")]
    return check_seed_list(seeds, f"seed block {name!r}")
