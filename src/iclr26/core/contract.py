"""The paper contract, checked when a job config is composed (before any job runs).

A paper's declaration (`Paper`) and its Hydra config must agree: the config's `data` holds exactly
the declared datasets; every table column and claim names a metric the paper declares its records
carry; every method a claim, a label or a reported row names is a declared method. A mistake stops
the DAG with one line naming the paper, the key and what is allowed.
"""
from __future__ import annotations

from .errors import ConfigError
from .paper import Paper


def _one_of(paper: Paper, key: str, value, allowed) -> None:
    if value not in allowed:
        raise ConfigError(f"paper {paper.slug}: config key '{key}' = {value!r} is not allowed; "
                          f"allowed: {', '.join(map(str, allowed))}")


def check_job_config(paper: Paper, cfg: dict) -> None:
    data = cfg.get("data")
    if not isinstance(data, dict):
        raise ConfigError(f"paper {paper.slug}: config key 'data' must map each dataset "
                          f"({', '.join(paper.datasets)}) to its spec")
    for name in data:
        _one_of(paper, f"data.{name}", name, paper.datasets)
    for name in paper.datasets:
        if name not in data:
            raise ConfigError(f"paper {paper.slug}: config key 'data.{name}' is missing (a declared dataset)")

    table = cfg.get("table") or {}
    for s, section in enumerate(table.get("sections") or []):
        for c, column in enumerate(section.get("columns") or []):
            _one_of(paper, f"table.sections[{s}].columns[{c}].metric", column.get("metric"), paper.metrics)
    for method in table.get("method_labels") or {}:
        _one_of(paper, "table.method_labels", method, paper.methods)
    for method in (cfg.get("reported") or {}).get("rows") or {}:
        _one_of(paper, "reported.rows", method, paper.methods)

    for i, claim in enumerate(cfg.get("claims") or []):
        where = f"claims[{i}] ({claim.get('id', '?')})"
        _one_of(paper, f"{where}.metric", claim.get("metric"), paper.metrics)
        _one_of(paper, f"{where}.method", claim.get("method"), paper.methods)
        if claim.get("baseline") is not None:
            _one_of(paper, f"{where}.baseline", claim["baseline"], paper.methods)
