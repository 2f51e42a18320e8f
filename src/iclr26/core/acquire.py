"""Full-scale data and model acquisition: resumable, retried, checksummed downloads, and
pretrained models by hub id or local directory.

Tiny scale never calls this module (its data are drawn from seeded generators), but the tests
exercise it offline: against a loopback HTTP server and a directory written by save_pretrained.
"""
from __future__ import annotations

import os
import time
import urllib.error
import urllib.request
from pathlib import Path

from .errors import DataError
from .io import sha256_file

CHUNK = 1 << 20


def download(
    url: str,
    dest: str | os.PathLike,
    sha256: str | None,
    retries: int = 4,
    timeout: float = 60.0,
    backoff: float = 1.0,
    progress=None,
) -> Path:
    """Download `url` to `dest`, resuming a partial `dest.part` with an HTTP Range request,
    retrying transient failures with exponential backoff, and checking the sha256.

    A file already at `dest` with the right checksum is kept (no network). A checksum mismatch
    deletes the partial file and raises DataError naming the URL and both digests.
    """
    dest = Path(dest)
    if dest.exists() and (sha256 is None or sha256_file(dest) == sha256):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    last_error: Exception | None = None
    for attempt in range(retries + 1):
        try:
            _fetch(url, part, timeout, progress)
            break
        except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as err:
            if isinstance(err, urllib.error.HTTPError) and 400 <= err.code < 500 and err.code != 416:
                raise DataError(f"download {url}: HTTP {err.code} {err.reason}") from None
            last_error = err
            if attempt < retries:
                time.sleep(backoff * 2**attempt)
    else:
        raise DataError(f"download {url}: failed after {retries + 1} attempts ({last_error})")
    if sha256 is not None:
        got = sha256_file(part)
        if got != sha256:
            part.unlink(missing_ok=True)
            raise DataError(f"download {url}: sha256 mismatch (expected {sha256}, got {got})")
    os.replace(part, dest)
    return dest


def _fetch(url: str, part: Path, timeout: float, progress) -> None:
    have = part.stat().st_size if part.exists() else 0
    request = urllib.request.Request(url, headers={"Range": f"bytes={have}-"} if have else {})
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as err:
        if err.code == 416 and have:  # the partial file is already complete
            return
        raise
    with response:
        resumed = response.status == 206
        total = response.headers.get("Content-Length")
        total = int(total) + (have if resumed else 0) if total else None
        with open(part, "ab" if resumed else "wb") as handle:
            done = have if resumed else 0
            while chunk := response.read(CHUNK):
                handle.write(chunk)
                done += len(chunk)
                if progress:
                    progress(done, total)
        if total is not None and done < total:
            raise ConnectionError(f"connection closed at {done} of {total} bytes")


def from_pretrained(cls, model_id: str, revision: str | None = None, **kwargs):
    """Load a pretrained model or tokenizer by hub id or local directory.

    A local directory (one written by `save_pretrained`) is loaded as is; a hub id goes through
    the hub client, which honours HF_HUB_OFFLINE and HF_HOME on a cluster without internet.
    """
    source = Path(model_id)
    if source.exists():
        if not (source / "config.json").exists() and not any(source.glob("tokenizer*")):
            raise DataError(f"model directory {source} has no config.json or tokenizer files")
        return cls.from_pretrained(str(source), **kwargs)
    try:
        return cls.from_pretrained(model_id, revision=revision, **kwargs)
    except OSError as err:
        first = str(err).strip().splitlines()[0]
        raise DataError(f"cannot load {model_id!r} (revision {revision}): {first}") from None
