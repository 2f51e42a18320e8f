"""The paper contract, checked when a job config is composed (before any job runs).

A paper's declaration (`Paper`) and its Hydra config must agree: the config's `data` holds exactly
the declared datasets; every table column and claim names a metric the paper declares its records
carry; every method a claim, a label or a reported row names is a declared method; a claim's (and its
precondition's) test is valid at the number of seeds the config gives (stats.MIN_N); a precondition tests
the setup (a baseline, a control, the base model or the data), never the claim's own method; no t test
reads a 0/1 indicator (`indicators`: the `every_seed` gate says "on every seed"); a tolerance claim's
metric declares its range (`metric_range`: its headroom is checked); a `margin` is a positive number with
its reason, on a claim a margin can apply to (or `no_margin` says why there is none, never both); every key of the
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

    _check_ranges(paper, cfg)
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
            _check_setup_only(paper, claim, pre, where)
        _check_margin(paper, claim, where)


def _check_ranges(paper: Paper, cfg: dict) -> None:
    """`metric_range: {metric: [floor, ceiling]}` (null: unbounded) and `indicators: [metric, ...]` (0 or 1
    per seed): what the ceiling, floor and headroom guards of core.claims read."""
    ranges = cfg.get("metric_range") or {}
    if not isinstance(ranges, dict):
        raise ConfigError(f"paper {paper.slug}: config key 'metric_range' must map a metric to [floor, ceiling]")
    for metric, bounds in ranges.items():
        _one_of(paper, f"metric_range.{metric}", metric, paper.metrics)
        ok = isinstance(bounds, (list, tuple)) and len(bounds) == 2 and all(
            b is None or (isinstance(b, (int, float)) and not isinstance(b, bool)) for b in bounds)
        if not ok or (None not in bounds and not bounds[0] < bounds[1]):
            raise ConfigError(f"paper {paper.slug}: config key 'metric_range.{metric}' = {bounds!r} is not allowed; "
                              "allowed: [floor, ceiling] with floor < ceiling (null for an unbounded side)")
    for metric in cfg.get("indicators") or []:
        _one_of(paper, "indicators", metric, paper.metrics)


T_TESTS = ("t", "paired_t", "welch_t")


def _check_claim_spec(paper: Paper, cfg: dict, where: str, claim: dict, seeds: int) -> None:
    _one_of(paper, f"{where}.metric", claim.get("metric"), paper.metrics)
    if claim.get("metric") in (cfg.get("indicators") or []) and claim.get("test") in T_TESTS:
        raise ConfigError(f"paper {paper.slug}: config key '{where}.test' = {claim['test']!r} is not allowed on "
                          f"{claim['metric']!r}, a 0/1 indicator per seed: a t interval of 0s and 1s is not a "
                          f"95% interval; say 'on every seed' with the gate every_seed")
    if claim.get("direction") == "within" and claim.get("metric") not in (cfg.get("indicators") or []) \
            and claim.get("metric") not in (cfg.get("metric_range") or {}):
        raise ConfigError(f"paper {paper.slug}: {where} is a tolerance claim on {claim.get('metric')!r}, whose range "
                          f"is not declared: add metric_range: {{{claim.get('metric')}: [floor, ceiling]}} (null "
                          f"for an unbounded side), so its headroom can be checked")
    _one_of(paper, f"{where}.method", claim.get("method"), paper.methods)
    if claim.get("baseline") is not None:
        _one_of(paper, f"{where}.baseline", claim["baseline"], paper.methods)
    test = claim.get("test")
    _one_of(paper, f"{where}.test", test, MIN_N)
    if claim.get("value") is not None and test in VALUE_REFUSED:
        raise ConfigError(f"paper {paper.slug}: config key '{where}.test' = {test!r} {VALUE_REFUSED[test]}")
    if where.endswith(".precondition") and claim.get("margin") is not None:
        raise ConfigError(f"paper {paper.slug}: config key '{where}.margin': a precondition has no margin")
    # a test is refused where it is not valid at the config's seed count; smoke scale (test-sized,
    # its numbers mean nothing) is not refused: its claims come out "untestable here" instead
    if test != "fit" and seeds < MIN_N[test] and cfg.get("scale") != "smoke":
        allowed = [t for t, n in MIN_N.items() if n <= seeds and t != "fit" and t not in GATES]
        raise ConfigError(f"paper {paper.slug}: claim {claim.get('id', where)!r}: test {test!r} is valid from "
                          f"{MIN_N[test]} seeds, the config gives {seeds}; allowed at {seeds} seeds: "
                          f"{', '.join(allowed) or 'none'} (or more seeds)")


def _check_setup_only(paper: Paper, claim: dict, pre: dict, where: str) -> None:
    """A precondition gates on the setup, never on the outcome of the method under test: a gate on the
    method's own result censors the verdict in one direction (it lets through only the seeds where the
    method worked). Some facts of the setup are recorded on the method's rows (the test set's make-up,
    a control probe, the hardware a timing ran on): such a precondition names why in `setup:`, which
    is printed with it."""
    own = claim.get("method")
    setup = pre.get("setup")
    if setup is not None and not (isinstance(setup, str) and setup.strip()):
        raise ConfigError(f"paper {paper.slug}: config key '{where}.precondition.setup' must say in words why the "
                          "metric is a fact of the setup")
    if own in (pre.get("method"), pre.get("baseline")) and not setup:
        raise ConfigError(f"paper {paper.slug}: claim {claim.get('id', where)!r}: its precondition reads the "
                          f"claim's own method {own!r}; a precondition tests the setup (a baseline, a control, "
                          f"the base model or the data), never the method under test (a fact of the setup that "
                          f"the records file under that method, e.g. the test set's make-up, says so in "
                          f"precondition.setup)")


MARGIN_REFUSED = {"fit": "a fit has only its own 95% interval", "every_seed": "a gate is not inference"}


def _check_margin(paper: Paper, claim: dict, where: str) -> None:
    """`margin: {value: <the smallest effect that would matter, in the metric's units>, why: <its reason>}`,
    or `no_margin: <why the claim has none>` (e.g. the paper reports no number for the gain); not both."""
    reason = claim.get("no_margin")
    if reason is not None and not (isinstance(reason, str) and reason.strip()):
        raise ConfigError(f"paper {paper.slug}: config key '{where}.no_margin' = {reason!r} is not allowed; allowed: "
                          "a sentence saying why the claim has no margin")
    margin = claim.get("margin")
    if margin is None:
        return
    key = f"paper {paper.slug}: config key '{where}.margin'"
    value = margin.get("value") if isinstance(margin, dict) else None
    if not (isinstance(margin, dict) and set(margin) == {"value", "why"} and isinstance(value, (int, float))
            and not isinstance(value, bool) and value > 0 and isinstance(margin["why"], str) and margin["why"].strip()):
        raise ConfigError(f"{key} = {margin!r} is not allowed; allowed: {{value: <a positive number, the smallest "
                          f"effect that would matter>, why: <its reason>}}")
    if claim.get("direction") == "within":
        raise ConfigError(f"{key}: a tolerance claim already says what difference matters (its tolerance)")
    if claim.get("test") in MARGIN_REFUSED:
        raise ConfigError(f"{key}: test {claim['test']!r} cannot show no effect ({MARGIN_REFUSED[claim['test']]})")
    if reason is not None:
        raise ConfigError(f"{key}: the claim also says it has none (no_margin: {reason!r}); give one of the two")
