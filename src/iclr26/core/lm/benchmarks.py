"""Full-scale problem sets: fetch a hub dataset file or a URL, map its columns to the row schema
{problem, answer} the tiny generator also writes, and save `<split>.jsonl`, so every later stage
reads the same files at both scales.

A split's spec (data.<dataset>.splits.<split> in a paper config):
    hub_id: <dataset repo id or a local directory>   revision: <commit>   file: <path in the repo>
  or
    url: <https URL>   sha256: <hex digest>          # core.acquire.download checks it
    git_blob: <40-hex git object id>                 # a content pin where no sha256 is published
    fields: {problem: <column>, answer: <column>}    # default problem / answer
    limit: <rows>   sample_seed: <int>               # optional seeded subset
The sha256 of the file actually read is returned for the provenance, and checked when the spec
pins one (and its git blob id when the spec pins that).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..acquire import check_content, download
from ..errors import DataError
from ..io import write_jsonl


def fetch_splits(splits: dict, out_dir) -> dict:
    """Write out_dir/<split>.jsonl for every split; returns per-split provenance."""
    out_dir = Path(out_dir)
    info = {}
    for split, spec in splits.items():
        path = locate(spec, out_dir / "files" / split)
        digest = check_content(path, split, spec.get("sha256"), spec.get("git_blob"))
        rows = select(read_rows(path, spec.get("fields") or {}), spec.get("limit"), spec.get("sample_seed", 0))
        write_jsonl(out_dir / f"{split}.jsonl", rows)
        info[split] = {"source": spec.get("hub_id") or spec.get("url"), "revision": spec.get("revision"),
                       "file": spec.get("file"), "sha256": digest, "rows": len(rows)}
    return info


def locate(spec: dict, dest: Path) -> Path:
    """The local path of the split's file: a URL download, a local directory, or a hub snapshot."""
    if spec.get("url"):
        return download(spec["url"], dest / Path(spec["url"]).name, spec.get("sha256"))
    hub_id, name = spec.get("hub_id"), spec.get("file")
    if not hub_id or not name:
        raise DataError(f"a split needs url, or hub_id and file; got {sorted(spec)}")
    local = Path(hub_id)
    if local.is_dir():
        path = local / name
    else:
        from huggingface_hub import hf_hub_download

        try:
            path = Path(hf_hub_download(hub_id, name, repo_type="dataset", revision=spec.get("revision"),
                                        local_dir=dest))
        except Exception as err:  # hub client errors have many types; one line naming the dataset
            raise DataError(f"cannot fetch {name} of dataset {hub_id} (revision {spec.get('revision')}): "
                            f"{str(err).strip().splitlines()[0]}") from None
    if not path.is_file():
        raise DataError(f"dataset file {path} does not exist")
    return path


def read_rows(path: Path, fields: dict) -> list[dict]:
    """Rows of a .jsonl, .json (a list of objects) or .parquet file as {problem, answer} (+ the rest)."""
    if path.suffix == ".parquet":
        import pandas as pd

        records = pd.read_parquet(path).to_dict("records")
    elif path.suffix == ".jsonl":
        records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    elif path.suffix == ".json":
        records = json.loads(path.read_text(encoding="utf-8"))
    else:
        raise DataError(f"{path.name}: expected .jsonl, .json or .parquet")
    problem, answer = fields.get("problem", "problem"), fields.get("answer", "answer")
    if not records or problem not in records[0] or answer not in records[0]:
        have = sorted(records[0]) if records else []
        raise DataError(f"{path.name}: needs columns {problem!r} and {answer!r}, has {have}")
    return [{"problem": str(r[problem]), "answer": str(r[answer]),
             **{k: v for k, v in r.items() if k not in (problem, answer) and _plain(v)}} for r in records]


def _plain(value) -> bool:
    return isinstance(value, (str, int, float, bool)) or value is None


def select(rows: list[dict], limit, seed: int) -> list[dict]:
    if not limit or limit >= len(rows):
        return rows
    keep = np.sort(np.random.default_rng(seed).choice(len(rows), size=int(limit), replace=False))
    return [rows[i] for i in keep]
