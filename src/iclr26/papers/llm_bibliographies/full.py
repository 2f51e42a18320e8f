"""Full-scale acquire: SciSciNet v1 tables from figshare and the companion's GPT-4o reference
lists from Zenodo, downloaded with core.acquire (resumable, retried).

The figshare file ids are the ones public SciSciNet download scripts use (ndownloader/files/<id>);
the Zenodo file names are the ones the companion's notebooks read (../data/<name>). Neither the
ids nor any checksum could be verified from here (no network), and neither host publishes a
sha256: a file's `sha256` is checked where the config pins one, otherwise the digest of what was
downloaded is recorded in the manifest (trust on first use) and printed as unverified.
The tables are large (PaperReferences ~30 GB unzipped): prepare streams them in chunks and keeps
only the columns and rows it needs (corpus.stream_rows).
"""
from __future__ import annotations

from pathlib import Path

from iclr26.core.acquire import download
from iclr26.core.io import sha256_file


def acquire(out: Path, spec: dict, log) -> dict:
    files = {}
    for item in spec["files"]:
        if "figshare_file" in item:
            url = spec["figshare_url"].format(id=item["figshare_file"])
        else:
            url = spec["zenodo_url"].format(record=spec["zenodo_record"], name=item["zenodo_file"])
        dest = out / item["name"]
        log(f"downloading {item['name']} from {url}")
        name = item["name"]
        download(url, dest, item.get("sha256"),
                 progress=lambda done, total, name=name: log(f"{name}: {done} of {total} bytes", every_s=60))
        digest = item.get("sha256") or sha256_file(dest)
        files[item["name"]] = {"url": url, "sha256": digest, "bytes": dest.stat().st_size,
                               "verified": bool(item.get("sha256"))}
        if not item.get("sha256"):
            log(f"UNVERIFIED {item['name']}: no pinned sha256; downloaded file has sha256 {digest}")
    return {"files": files}
