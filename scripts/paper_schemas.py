"""Draft and update each paper's config schema (src/iclr26/papers/<slug>/config.schema.yaml).

    python scripts/paper_schemas.py [--paper SLUG ...]    write the drafts (merged with the files)
    python scripts/paper_schemas.py --check               exit 1 if a schema is out of date

The draft comes from the paper's composed job configs at smoke, tiny and full: every key any scale
has (the union), `required` where every scale has it, the type of its values (an integer key takes
integers only, a number key integers too, a key some scale sets to null is nullable),
`additionalProperties: false` on every mapping. The shared keys (core/job.schema.yaml) are not
drafted: the schema extends that one.

A draft is MERGED with the existing file, so that what was written by hand survives:
- every keyword other than type/properties/required/additionalProperties/items (enum, minimum,
  maximum, description, $ref, ...) is kept where the key still exists;
- a hand-written type is kept while it accepts every scale's value (e.g. widened to [integer, "null"]);
- a key the schema has but does not require stays optional (one the code reads with a default); a
  new key that every scale has becomes required;
- the keys of a mapping (the items of a list) that no scale gives to redraft them from are kept as
  written (e.g. an optional LoRA spec that every scale sets to null);
- a mapping written `additionalProperties: true` (an array `items: true`) stays loose, nothing is
  drafted under it; so does a map written `additionalProperties: {<schema of every value>}`;
- a key no scale has any more is dropped, unless its schema says `x-optional: true`: a key the code
  reads when it is given, which no scale sets (e.g. a pinned sha256 of a download).
`--check` fails when the merge would change a file (a key added to a yaml and not to its schema) or
when a composed config does not pass its schema (e.g. a value outside a hand-written enum).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from iclr26.core.config import SCALES, ConfigError, _compose  # noqa: E402  (_compose: before any check)
from iclr26.core.paper import all_papers  # noqa: E402
from iclr26.core.schema import (  # noqa: E402
    JOB_SCHEMA_ID,
    check_paper_schema,
    job_schema,
    read_schema,
    schema_path,
)

GENERATED = ("type", "properties", "required", "additionalProperties", "items")  # redrafted on every run
KEY_ORDER = ("$schema", "$ref", "x-optional", "type", "const", "enum", "minimum", "exclusiveMinimum", "maximum",
             "exclusiveMaximum", "minItems", "maxItems", "uniqueItems", "pattern", "description", "$comment",
             "required", "unevaluatedProperties", "additionalProperties", "properties", "items")  # then $defs

HEADER = """\
# The job config of paper {slug}, checked by core/schema.py when the config is composed: its own
# keys, their types, ranges and choices. Drafted from the composed configs of smoke, tiny and full by
# scripts/paper_schemas.py, then tightened by hand (enum, minimum, ..., description): rerun the script
# after adding or removing a config key; it keeps what was written by hand. Why a constraint holds goes
# in its `description` (comments do not survive a rerun), which the error message quotes.
"""


def composed(slug: str) -> dict[str, dict]:
    """The paper's config at each scale, composed without the schema check (this drafts the schema)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return {scale: yaml.load(_compose(slug, scale, ()), Loader=loader) for scale in SCALES}


# in this order: bool before int (a bool is an int in Python)
JSON_TYPES = ((type(None), "null"), (bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"),
              (list, "array"), (dict, "object"))


def json_type(value) -> str:
    for kind, name in JSON_TYPES:
        if isinstance(value, kind):
            return name
    raise TypeError(f"no JSON type for {value!r}")


def _accepts(declared, kinds: set[str]) -> bool:
    declared = set(declared if isinstance(declared, list) else [declared])
    return all(k in declared or (k == "integer" and "number" in declared) for k in kinds)


def _type_of(kinds: set[str]):
    if {"integer", "number"} <= kinds:
        kinds = kinds - {"integer"}
    ordered = sorted(kinds - {"null"}) + (["null"] if "null" in kinds else [])
    return ordered[0] if len(ordered) == 1 else ordered


def draft(values: list, old: dict | None) -> dict:
    """The schema of one key from its values at the scales that have it, merged with `old`."""
    old = old or {}
    if old.get("additionalProperties") is True or old.get("items") is True:
        return old  # loosened by hand: nothing drafted below
    if isinstance(old.get("additionalProperties"), dict):
        return old  # a map whose values share one hand-written schema (e.g. file name -> sha256): its keys are free
    kinds = {json_type(v) for v in values}
    # what no scale's value can redraft stays as written: the keys of a mapping every scale sets to null
    # (e.g. an optional LoRA spec), the items of a list no scale fills
    kept = ("properties", "required", "additionalProperties") if "object" not in kinds else ()
    kept += ("items",) if not any(isinstance(v, list) and v for v in values) else ()
    node = {k: v for k, v in old.items() if k not in GENERATED or k in kept}
    node["type"] = old["type"] if "type" in old and _accepts(old["type"], kinds) else _type_of(kinds)
    dicts = [v for v in values if isinstance(v, dict)]
    if dicts:
        keys = list(dict.fromkeys(k for d in dicts for k in d))  # the yaml's order
        props = old.get("properties") or {}
        node["properties"] = {k: draft([d[k] for d in dicts if k in d], props.get(k)) for k in keys}
        node["properties"] |= {k: v for k, v in props.items() if k not in keys and _optional(v)}
        # required: where every scale has it, unless the schema already has the key as optional (one the
        # code reads with a default, dropped from `required` by hand); a new key every scale has is required
        node["required"] = [k for k in keys if all(k in d for d in dicts)
                            and not (k in props and k not in (old.get("required") or []))]
        node["additionalProperties"] = False
    items = [item for v in values if isinstance(v, list) for item in v]
    if items:
        node["items"] = draft(items, old.get("items") if isinstance(old.get("items"), dict) else None)
    return _ordered(node)


def _optional(node) -> bool:
    return isinstance(node, dict) and node.get("x-optional") is True


def _ordered(node: dict) -> dict:
    rank = {k: i for i, k in enumerate(KEY_ORDER)}
    out = dict(sorted(node.items(), key=lambda kv: rank.get(kv[0], len(rank))))
    if out.get("required") == []:
        del out["required"]
    return out


def paper_schema(slug: str, configs: dict[str, dict], old: dict | None) -> dict:
    """The whole schema of one paper: the shared job schema by $ref, then every other top-level key."""
    old = old or {}
    shared = set(job_schema()["properties"]) - {"data", "train", "eval"}
    top = [cfg for cfg in configs.values()]
    keys = [k for k in dict.fromkeys(k for cfg in top for k in cfg) if k not in shared]
    props = old.get("properties") or {}
    properties = {"slug": {"const": slug}}  # the paper's own name: `slug=<other>` is refused
    properties |= {k: draft([cfg[k] for cfg in top if k in cfg], props.get(k)) for k in keys}
    properties |= {k: v for k, v in props.items() if k not in properties and _optional(v)}
    schema = {k: v for k, v in old.items() if k not in (*GENERATED, "unevaluatedProperties", "$ref", "$schema")}
    schema |= {"$schema": "https://json-schema.org/draft/2020-12/schema", "$ref": JOB_SCHEMA_ID,
               "required": [k for k in keys if all(k in cfg for cfg in top)],
               "unevaluatedProperties": False, "properties": properties}
    return _ordered(schema)


# ----------------------------------------------------------------------------- writing it readably
class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data):  # a constraint used twice is written twice, not as a YAML anchor
        return True


def _represent(dumper, node: dict):
    flow = yaml.dump(node, Dumper=_Dumper.__base__, default_flow_style=True, width=10**9, allow_unicode=True,
                     sort_keys=False).strip()
    nested = any(isinstance(v, dict) and ("properties" in v or "items" in v) for v in node.values())
    return dumper.represent_mapping("tag:yaml.org,2002:map", node, flow_style=not nested and len(flow) <= 100)


def _represent_list(dumper, items: list):
    return dumper.represent_sequence("tag:yaml.org,2002:seq", items, flow_style=True)


_Dumper.add_representer(dict, _represent)
_Dumper.add_representer(list, _represent_list)


def dump(slug: str, schema: dict) -> str:
    body = yaml.dump(schema, Dumper=_Dumper, sort_keys=False, width=110, allow_unicode=True)
    return HEADER.format(slug=slug) + body


# ----------------------------------------------------------------------------- check / write
def _differences(old, new, path="") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for k in dict.fromkeys([*old, *new]):
            where = f"{path}.{k}" if path else k
            if k not in new:
                out.append(f"{where}: in the schema, not drafted (no scale has it any more?)")
            elif k not in old:
                out.append(f"{where}: drafted from the configs, not in the schema")
            else:
                out += _differences(old[k], new[k], where)
        return out
    return [] if old == new else [f"{path}: schema {old!r}, drafted {new!r}"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a schema is out of date; write nothing")
    parser.add_argument("--paper", action="append", help="only this paper (repeatable)")
    args = parser.parse_args(argv)
    papers = all_papers()
    stale = 0
    for slug in args.paper or list(papers):
        path = schema_path(slug)
        old = read_schema(path) if path.exists() else None
        configs = composed(slug)
        new = paper_schema(slug, configs, old)
        if args.check:
            problems = _differences(old, new) if old is not None else ["no schema file"]
            if not problems:
                for cfg in configs.values():
                    try:
                        check_paper_schema(papers[slug], cfg)
                    except ConfigError as err:  # report every paper, then fail
                        problems.append(str(err))
            for line in problems[:8]:
                print(f"{slug}: {line}")
            stale += bool(problems)
        elif not path.exists() or dump(slug, new) != path.read_text():  # new keys, or a hand edit to lay out
            path.write_text(dump(slug, new))
            print(f"wrote {path}")
    if args.check and stale:
        print(f"{stale} paper schema(s) out of date: run `python scripts/paper_schemas.py` and review the diff")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
