"""The paper contract, checked when a job config is composed (before any job runs).

A paper's declaration (`Paper`) and its Hydra config must agree: the config's `data` holds exactly
the declared datasets; every table column and claim names a metric the paper declares its records
carry; every method a claim, a label or a reported row names is a declared method; a claim's (and its
precondition's) test is valid at the number of seeds the config gives (stats.MIN_N); every key of the
paper's own sections is one its schema names, with a value of its type and range (core.schema). A
mistake stops the DAG with one line naming the paper, the key and what is allowed.
"""
from __future__ import annotations

from .errors import ConfigError
from .paper import Paper
from .schema import check_paper_schema
from .stats import GATES, MIN_N, VALUE_REFUSED

KINDS = ("claim", "check")


def _one_of(paper: Paper, key: str, value, allowed) -> None:
    if value not in allowed:
        raise ConfigError(f"paper {paper.slug}: config key '{key}' = {value!r} is not allowed; "
                          f"allowed: {', '.join(map(str, allowed))}")


def check_job_config(paper: Paper, cfg: dict) -> None:
    check_datasets(paper, cfg.get("data"))
    # every key, type and range of the paper's own sections (papers/<slug>/config.schema.yaml): after
    # the dataset names (their message lists the declared datasets), before the table and the claims
    check_paper_schema(paper, cfg)
    _check_rest(paper, cfg)


def check_datasets(paper: Paper, data) -> None:
    """The config's `data` keys are exactly the declared datasets."""
    if not isinstance(data, dict):
        raise ConfigError(f"paper {paper.slug}: config key 'data' must map each dataset "
                          f"({', '.join(paper.datasets)}) to its spec")
    for name in data:
        _one_of(paper, f"data.{name}", name, paper.datasets)
    for name in paper.datasets:
        if name not in data:
            raise ConfigError(f"paper {paper.slug}: config key 'data.{name}' is missing (a declared dataset)")


SHARD_STAGES = ("prepare", "evaluate")  # stages a config may shard (`shards: {<stage>: N}`)


def check_shards(paper: Paper, shards) -> None:
    """`shards: {<stage>: N}` or `{<stage>: {<dataset (prepare) or method (evaluate)>: N}}`, N >= 1."""
    if shards is None:
        return
    if not isinstance(shards, dict):
        raise ConfigError(f"paper {paper.slug}: config key 'shards' must map a stage ({', '.join(SHARD_STAGES)}) "
                          "to its number of shard jobs")
    for stage, spec in shards.items():
        _one_of(paper, f"shards.{stage}", stage, SHARD_STAGES)
        items = paper.datasets if stage == "prepare" else paper.methods
        for item, n in (spec.items() if isinstance(spec, dict) else [(None, spec)]):
            key = f"shards.{stage}" + (f".{item}" if item is not None else "")
            if item is not None:
                _one_of(paper, key, item, items)
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise ConfigError(f"paper {paper.slug}: config key '{key}' = {n!r} is not allowed; allowed: a "
                                  "positive integer (the number of shard jobs)")


def _check_rest(paper: Paper, cfg: dict) -> None:
    check_shards(paper, cfg.get("shards"))
    for method in cfg.get("run_methods") or []:  # a scale that runs a subset of the declared methods
        _one_of(paper, "run_methods", method, paper.methods)
    for i, item in enumerate(cfg.get("deviations") or []):
        if not (isinstance(item, str) or (isinstance(item, dict) and isinstance(item.get("what"), str)
                                           and set(item) <= {"what", "why", "post_hoc"})):
            raise ConfigError(f"paper {paper.slug}: config key 'deviations[{i}]' must be a string or "
                              "{what, why, post_hoc}")

    table = cfg.get("table") or {}
    for s, section in enumerate(table.get("sections") or []):
        for c, column in enumerate(section.get("columns") or []):
            _one_of(paper, f"table.sections[{s}].columns[{c}].metric", column.get("metric"), paper.metrics)
    for method in table.get("method_labels") or {}:
        _one_of(paper, "table.method_labels", method, paper.methods)
    for method in (cfg.get("reported") or {}).get("rows") or {}:
        _one_of(paper, "reported.rows", method, paper.methods)

    seeds = len(cfg.get("seeds") or [])
    for i, claim in enumerate(cfg.get("claims") or []):
        where = f"claims[{i}] ({claim.get('id', '?')})"
        _one_of(paper, f"{where}.kind", claim.get("kind", "claim"), KINDS)
        _check_claim_spec(paper, cfg, where, claim, seeds)
        if claim.get("kind", "claim") == "claim" and claim.get("test") in GATES:
            raise ConfigError(f"paper {paper.slug}: claim {claim.get('id', where)!r}: test {claim['test']!r} is a "
                              f"gate (every seed passes), not inference: use it in a precondition or a claim of "
                              f"kind 'check'")
        pre = claim.get("precondition")
        if pre is not None:
            if not isinstance(pre, dict):
                raise ConfigError(f"paper {paper.slug}: config key '{where}.precondition' must be a mapping "
                                  f"shaped like a claim (metric, method, baseline or value, direction, test)")
            _check_claim_spec(paper, cfg, f"{where}.precondition", pre, seeds)


def _check_claim_spec(paper: Paper, cfg: dict, where: str, claim: dict, seeds: int) -> None:
    _one_of(paper, f"{where}.metric", claim.get("metric"), paper.metrics)
    _one_of(paper, f"{where}.method", claim.get("method"), paper.methods)
    if claim.get("baseline") is not None:
        _one_of(paper, f"{where}.baseline", claim["baseline"], paper.methods)
    test = claim.get("test")
    _one_of(paper, f"{where}.test", test, MIN_N)
    if claim.get("value") is not None and test in VALUE_REFUSED:
        raise ConfigError(f"paper {paper.slug}: config key '{where}.test' = {test!r} {VALUE_REFUSED[test]}")
    # a test is refused where it is not valid at the config's seed count; smoke scale (test-sized,
    # its numbers mean nothing) is not refused: its claims come out "untestable here" instead
    if test != "fit" and seeds < MIN_N[test] and cfg.get("scale") != "smoke":
        allowed = [t for t, n in MIN_N.items() if n <= seeds and t != "fit" and t not in GATES]
        raise ConfigError(f"paper {paper.slug}: claim {claim.get('id', where)!r}: test {test!r} is valid from "
                          f"{MIN_N[test]} seeds, the config gives {seeds}; allowed at {seeds} seeds: "
                          f"{', '.join(allowed) or 'none'} (or more seeds)")
