"""Full scale: rows of multimodal-reasoning-lab/Zebra-CoT, named configs at a pinned commit.

The dataset is tens of GB (about 59 GB of parquet), so it is streamed: one parquet shard of a config
is downloaded (core.acquire.download, from the hub's `resolve/<commit>/` URL: a commit pins every
file's content) and checked against its sha256, its rows are read, and the shard is deleted before
the next, until the config's row quota is met. The shards and their sha256 come from `shards`
(entries {path, sha256}) or else from the hub's tree listing at the commit (`list_repo_tree`: an LFS
file's sha256 is its `lfs.oid`); a shard without a sha256 stops acquire.

The dataset ships only a `train` split; the held-out test split is the pipeline's own: a row goes
to test when the first 8 hex digits of sha256("<config>/<shard>/<row>") fall below
`test_fraction`, to validation (the learnability gate's rows) when they fall in the next
`test_fraction`, else to train (stable across runs and machines, independent of the quota), as the
paper's in-distribution split is not described. Validation takes up to `max_test_per_config` rows.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from urllib.parse import quote

from . import data


def is_test(config: str, shard: str, index: int, fraction: float) -> bool:
    digest = hashlib.sha256(f"{config}/{shard}/{index}".encode()).hexdigest()
    return int(digest[:8], 16) / 16**8 < fraction


def part_of(config: str, shard: str, index: int, fraction: float) -> str:
    """"test", "val" or "train" for one row (the same hash as is_test)."""
    if is_test(config, shard, index, fraction):
        return "test"
    return "val" if is_test(config, shard, index, 2 * fraction) else "train"


def shards_of(spec: dict, config: str, endpoint: str) -> list[dict]:
    """The config's parquet files at the pinned commit as {path, sha256}: from `shards` (entries
    {path: "<config>/<file>", sha256}), else listed by the hub API at the commit."""
    given = [dict(e) for e in spec.get("shards") or [] if str(e["path"]).startswith(f"{config}/")]
    if given:
        return given
    from huggingface_hub import HfApi

    files = HfApi(endpoint=endpoint).list_repo_tree(spec["hub_id"], path_in_repo=config, recursive=True,
                                                    revision=spec["revision"], repo_type="dataset")
    return sorted(({"path": f.path, "sha256": f.lfs.sha256 if getattr(f, "lfs", None) else None}
                   for f in files if f.path.endswith(".parquet") and hasattr(f, "size")), key=lambda e: e["path"])


def acquire(spec: dict, out_dir: Path, log=print) -> dict:
    from iclr26.core.acquire import download

    endpoint = (spec.get("endpoint") or os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")
    fraction, quota = float(spec["test_fraction"]), {"train": int(spec["max_train_per_config"]),
                                                     "test": int(spec["max_test_per_config"]),
                                                     "val": int(spec["max_test_per_config"])}
    kept: dict = {"train": [], "test": [], "val": []}
    counts = {}
    for config in spec["configs"]:
        mine = {"train": 0, "test": 0, "val": 0}
        listed = shards_of(spec, config, endpoint)
        if not listed:
            raise ValueError(f"zebra_cot: config folder {config!r} has no parquet files at revision "
                             f"{spec['revision']} (check data.counting.configs against the hub)")
        for entry in listed:
            if all(mine[p] >= quota[p] for p in mine):
                break
            shard = entry["path"]
            if not entry.get("sha256"):
                raise ValueError(f"zebra_cot: shard {shard!r} has no sha256 (not an LFS file in the hub listing, "
                                 "and none given in data.counting.shards)")
            url = f"{endpoint}/datasets/{spec['hub_id']}/resolve/{spec['revision']}/{quote(shard)}"
            local = download(url, Path(out_dir) / "shard.parquet", sha256=entry["sha256"])
            for index, row in enumerate(data.read_parquet(local)):
                part = part_of(config, shard, index, fraction)
                if mine[part] < quota[part]:
                    kept[part].append({"config": config, **row})
                    mine[part] += 1
            local.unlink()
            log(f"{config}: {shard} read; train {mine['train']}, test {mine['test']}, val {mine['val']}")
        if not (mine["train"] and mine["test"] and mine["val"]):
            raise ValueError(f"zebra_cot: config {config!r} gave no rows to a split: {mine}")
        counts[config] = mine
    for part, rows in kept.items():
        data.write_parquet(rows, Path(out_dir) / f"{part}.parquet")
    split = {"hub_id": spec["hub_id"], "revision": spec["revision"], "per_config": counts,
             "how": f"test = sha256(config/shard/row)[:8] < {fraction} of 16^8, validation below "
                    f"{2 * fraction}, train the rest"}
    print(f"zebra_cot split: {split}")
    return split
