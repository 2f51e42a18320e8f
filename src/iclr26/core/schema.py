"""Each paper's job-config schema, checked when a config is composed (before any job runs).

`src/iclr26/papers/<slug>/config.schema.yaml` (JSON Schema 2020-12, in YAML) names every key of the
paper's own sections (`data`, `train`, `eval`, `model`, ...), their types and the ranges and choices
its code accepts; it extends the shared `core/job.schema.yaml` (seeds, seed_batch, threads, device,
launch, conda_env, and the presentation sections that core.contract and core.preflight check). A
misspelled key in a paper's yaml or an override, a missing key or a value out of range is refused
with one line naming the paper, the key and what is allowed, instead of a KeyError inside a job or a
silently ignored setting. scripts/paper_schemas.py drafts the schemas from the composed configs and
keeps them in step with them (`--check`).

The check runs on the composed dict (core.contract.check_job_config), after the composition cache:
a schema edit takes effect at once, with no cache key to change.
"""
from __future__ import annotations

import difflib
import functools
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import yaml

from .errors import ConfigError

PAPERS_DIR = Path(__file__).resolve().parents[1] / "papers"
JOB_SCHEMA_PATH = Path(__file__).with_name("job.schema.yaml")
JOB_SCHEMA_ID = "urn:iclr26:job.schema"  # the $ref every paper's schema starts from
SCHEMA_NAME = "config.schema.yaml"
SCHEMA_CACHE = Path(__file__).resolve().parents[3] / ".cache" / "schema"  # beside config's .cache/compose
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def schema_path(slug: str) -> Path:
    return PAPERS_DIR / slug / SCHEMA_NAME


def read_schema(path: Path) -> dict:
    """A schema file, parsed. YAML costs ~20 ms a schema (the DAG build reads all 19), JSON ~0.2: the
    parsed schema is kept under .cache/schema by the sha256 of the file's text, so an edit is never
    served stale, and a read-only checkout only parses every time."""
    from .io import atomic_write, sealed, unsealed

    text = path.read_bytes()
    cached = SCHEMA_CACHE / f"{hashlib.sha256(text).hexdigest()[:24]}.json"
    try:
        entry = unsealed(cached.read_text())  # None: edited by hand, parsed again
        if entry is not None:
            return json.loads(entry)
    except (OSError, ValueError):
        pass
    schema = yaml.load(text, Loader=_LOADER)
    try:
        atomic_write(cached, sealed(json.dumps(schema)))
    except OSError:
        pass
    return schema


@functools.cache
def _validator_class():
    import jsonschema

    # JSON Schema counts 2.0 as an integer; a count written 2.0 (or an override giving a float where the
    # code takes an int) is a mistake here, so "integer" means a Python int, never a bool or a float
    checker = jsonschema.Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda _checker, value: isinstance(value, int) and not isinstance(value, bool))
    return jsonschema.validators.extend(jsonschema.Draft202012Validator, type_checker=checker)


@functools.cache
def job_schema() -> dict:
    return read_schema(JOB_SCHEMA_PATH)


@functools.cache
def paper_validator(slug: str):
    """The compiled validator of one paper's schema (cached: the workflow composes each paper once per
    scale, every job once more; building one from the parsed schema costs a few milliseconds)."""
    from referencing import Registry
    from referencing.jsonschema import DRAFT202012

    path = schema_path(slug)
    if not path.exists():
        raise ConfigError(f"paper {slug}: no config schema at {path.relative_to(PAPERS_DIR.parents[2])}: "
                          "draft it with `python scripts/paper_schemas.py`")
    registry = Registry().with_resource(JOB_SCHEMA_ID, DRAFT202012.create_resource(job_schema()))
    return _validator_class()(read_schema(path), registry=registry)


def known_keys(slug: str) -> list[str]:
    """Every dotted key the paper's schema names (for the did-you-mean of an unknown key)."""
    keys: list[str] = []

    def walk(node: dict, prefix: str) -> None:
        for name, sub in (node.get("properties") or {}).items():
            keys.append(prefix + name)
            if isinstance(sub, dict):
                walk(sub, prefix + name + ".")
                if isinstance(sub.get("items"), dict):
                    walk(sub["items"], prefix + name + "[].")

    walk(job_schema(), "")
    walk(paper_validator(slug).schema, "")
    return keys


def check_paper_schema(paper, cfg: dict) -> None:
    """Raise ConfigError, one line, at the first key of `cfg` that the paper's schema refuses."""
    validator = paper_validator(paper.slug)
    # (an unevaluatedProperties error that names only known keys echoes another error: a shared key whose
    # value failed the $ref'd job schema leaves no annotation behind; that other error is the one to name)
    errors = [e for e in validator.iter_errors(cfg)
              if e.validator not in _UNKNOWN or _unknown_keys(e, paper.slug)]
    if not errors:
        return
    where = f"paper {paper.slug} ({cfg.get('scale', '?')}): "
    more = f" (and {len(errors) - 1} more problem{'s' * (len(errors) > 2)})" if len(errors) > 1 else ""
    raise ConfigError(where + _describe(paper.slug, _first(errors), cfg) + more)


# an unknown key first (a misspelling shows as an unknown key and a missing one: name the typo), then a
# missing key, then a wrong value; shallow keys before deep ones
_UNKNOWN = ("additionalProperties", "unevaluatedProperties")
_ORDER = {"additionalProperties": 0, "unevaluatedProperties": 0, "required": 1, "type": 2}


def _first(errors):
    return min(errors, key=lambda e: (_ORDER.get(e.validator, 3), len(e.absolute_path), list(map(str, e.path))))


def _dotted(path) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _generic(dotted: str) -> str:
    """data.lara.files[0].sha265 -> data.lara.files[].sha265, as known_keys spells a list item's key."""
    return re.sub(r"\[\d+\]", "[]", dotted)


def _unknown_keys(err, slug: str) -> list[str]:
    props = set(err.schema.get("properties") or {})
    if err.validator == "unevaluatedProperties" and not err.absolute_path:  # the top: this paper's + the shared keys
        props |= set(job_schema().get("properties") or {})
    return [k for k in err.instance if k not in props]


def _describe(slug: str, err, cfg: dict) -> str:
    key = _dotted(err.absolute_path)
    if err.validator in _UNKNOWN:
        unknown = _unknown_keys(err, slug)
        bad = f"{key}.{unknown[0]}" if key else unknown[0]
        close = _did_you_mean(_generic(bad), known_keys(slug))
        if close:
            hint = f" (did you mean '{close}'?)"
            if _missing(cfg, close):
                hint += f"; '{close}' is missing"
        else:
            allowed = sorted(err.schema.get("properties") or {}) if key else []
            hint = f"; allowed here: {', '.join(allowed)}" if allowed else ""
        return f"config key '{bad}' is not a key of this paper{hint}"
    if err.validator == "required":
        missing = err.message.split("'")[1]
        return f"config key '{key + '.' if key else ''}{missing}' is missing"
    value = repr(err.instance)
    value = value if len(value) <= 60 else value[:57] + "..."
    rule = _rule(err)
    description = err.schema.get("description") if isinstance(err.schema, dict) else None
    if description and err.validator != "type":
        rule += f"; {' '.join(str(description).split())}"
    return f"config key '{key}' = {value} is not allowed: {rule}"


def _did_you_mean(bad: str, known: list[str]) -> str | None:
    """The key `bad` was likely meant to be: a sibling of a similar name (train.refnie -> train.refine),
    else a key of a very similar name elsewhere (train.samples -> eval.path_kl.samples)."""
    parent, _, leaf = bad.rpartition(".")
    siblings = {k.rpartition(".")[2]: k for k in known if k.rpartition(".")[0] == parent}
    close = difflib.get_close_matches(leaf, list(siblings), n=1, cutoff=0.6)
    if close:
        return siblings[close[0]]
    elsewhere = {}
    for k in known:
        elsewhere.setdefault(k.rpartition(".")[2], k)
    close = difflib.get_close_matches(leaf, list(elsewhere), n=1, cutoff=0.8)
    return elsewhere[close[0]] if close else None


def _missing(cfg: dict, dotted: str) -> bool:
    node: Any = cfg
    for part in dotted.split("."):
        if part.endswith("[]"):
            return False  # inside a list: not one key to name
        if not isinstance(node, dict) or part not in node:
            return True
        node = node[part]
    return False


_TYPE_WORDS = {"integer": "an integer", "number": "a number", "string": "a string", "boolean": "true/false",
               "array": "a list", "object": "a mapping", "null": "null"}


def _rule(err) -> str:
    v = err.validator_value
    if err.validator == "type":
        types = v if isinstance(v, list) else [v]
        return "expected " + " or ".join(_TYPE_WORDS.get(t, t) for t in types)
    if err.validator == "enum":
        return "one of " + ", ".join(map(str, v))
    if err.validator == "const":
        return f"only {v!r}"
    words = {"minimum": "minimum {}", "maximum": "maximum {}", "exclusiveMinimum": "must be > {}",
             "exclusiveMaximum": "must be < {}", "minItems": "at least {} item(s)", "maxItems": "at most {} item(s)",
             "pattern": "must match {}", "uniqueItems": "the items must be distinct",
             "minLength": "at least {} character(s)", "multipleOf": "a multiple of {}"}
    if err.validator in words:
        return words[err.validator].format(v)
    return err.message
