"""Full-scale data and model acquisition: resumable, retried, checksummed downloads, and
pretrained models by hub id or local directory.

Tiny scale never calls this module (its data are drawn from seeded generators), but the tests
exercise it offline: against a loopback HTTP server and a directory written by save_pretrained.

Models at full scale: `snapshot_model` (the acquire stage, on a node with internet) downloads a hub
model at a 40-hex commit into a shared cache with huggingface_hub.snapshot_download and checks its
config.json against the config's `model.arch`; `local_snapshot` (GPU stages) finds the same snapshot
with the hub offline and fails with one line naming what is missing.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
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
    md5: str | None = None,
) -> Path:
    """Download `url` to `dest`, resuming a partial `dest.part` with an HTTP Range request,
    retrying transient failures with exponential backoff, and checking the sha256 (and the md5,
    when given: for hosts such as Zenodo that publish md5 only; `download_pinned` then records the
    sha256 of what was downloaded).

    A file already at `dest` with the right checksum is kept (no network). A checksum mismatch
    deletes the partial file and raises DataError naming the URL and both digests.
    """
    dest = Path(dest)
    if dest.exists() and (sha256 is None or sha256_file(dest) == sha256) and (md5 is None or md5_file(dest) == md5):
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
    if md5 is not None:
        got = md5_file(part)
        if got != md5:
            part.unlink(missing_ok=True)
            raise DataError(f"download {url}: md5 mismatch (expected {md5}, got {got})")
    os.replace(part, dest)
    return dest


def md5_file(path: str | os.PathLike) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def download_pinned(spec: dict, dest: str | os.PathLike, **kwargs) -> dict:
    """Download a config source `{url, sha256 | md5}` to `dest` (core.acquire.download); returns
    {url, file, sha256} with the sha256 of what was downloaded, whichever digest pinned it, so the
    manifest holds a sha256 even for an md5-pinned file. A source pinned by neither: DataError."""
    if not (spec.get("sha256") or spec.get("md5")):
        raise DataError(f"{spec.get('url')}: no sha256 or md5 pin in the config")
    path = download(spec["url"], dest, spec.get("sha256"), md5=spec.get("md5"), **kwargs)
    return {"url": spec["url"], "file": path.name, "sha256": sha256_file(path)}


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


COMMIT = re.compile(r"[0-9a-f]{40}")
# model.arch key -> config.json key (the preflight's memory estimate reads model.arch)
ARCH_KEYS = ("hidden_size", "num_hidden_layers", "intermediate_size", "vocab_size", "num_attention_heads",
             "num_key_value_heads")


def git_blob_sha1(path: str | os.PathLike) -> str:
    """The git object id of a file's content (sha1 of "blob <size>\\0" + content): a content pin
    that a repository's tree states for every file, whether or not anyone published its sha256."""
    path = Path(path)
    digest = hashlib.sha1(f"blob {path.stat().st_size}\0".encode())
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def check_content(path: Path, what: str, sha256: str | None = None, git_blob: str | None = None) -> str:
    """The file's sha256; DataError (one line) when it differs from a pinned sha256 or git blob id."""
    digest = sha256_file(path)
    if sha256 and digest != sha256:
        raise DataError(f"{what}: {path.name} has sha256 {digest}, the config pins {sha256}")
    if git_blob and (blob := git_blob_sha1(path)) != git_blob:
        raise DataError(f"{what}: {path.name} has git blob id {blob}, the config pins {git_blob}")
    return digest


def hub_cache(spec: dict) -> str | None:
    """The shared hub cache of a model spec (model.cache_dir), created if missing."""
    cache = spec.get("cache_dir")
    if cache:
        Path(cache).mkdir(parents=True, exist_ok=True)
        return str(cache)
    return None


def _require_commit(spec: dict) -> str:
    revision = spec.get("revision")
    if not (isinstance(revision, str) and COMMIT.fullmatch(revision)):
        raise DataError(f"model {spec['source']}: revision must be a 40-hex commit, got {revision!r}")
    return revision


def _patterns(spec: dict) -> dict:
    """model.allow_patterns: only the files a pipeline loads (e.g. ["*.json", "*.safetensors", "*.txt"]),
    not a repository's TF/Flax/ONNX copies; the offline lookup then checks only those files."""
    patterns = spec.get("allow_patterns")
    return {"allow_patterns": list(patterns)} if patterns else {}


def snapshot_model(spec: dict, **hub_kwargs) -> dict:
    """Download model.source at model.revision (a commit) into model.cache_dir (only the files that
    match model.allow_patterns, when given); check config.json against model.arch. Returns the
    provenance {source, revision, path, files, bytes}."""
    from huggingface_hub import snapshot_download

    revision = _require_commit(spec)
    if spec.get("endpoint"):   # a hub mirror (model.endpoint), else the client's (HF_ENDPOINT)
        hub_kwargs.setdefault("endpoint", spec["endpoint"])
    try:
        path = Path(snapshot_download(spec["source"], revision=revision, cache_dir=hub_cache(spec),
                                      **_patterns(spec), **hub_kwargs))
    except Exception as err:  # the hub client raises many types; one line naming the model
        raise DataError(f"cannot download model {spec['source']} at {revision}: "
                        f"{str(err).strip().splitlines()[0]}") from None
    check_arch(spec, path)
    files = sorted(p for p in path.rglob("*") if p.is_file())
    return {"source": spec["source"], "revision": revision, "path": str(path), "files": len(files),
            "bytes": sum(p.stat().st_size for p in files)}


def local_snapshot(spec: dict) -> Path:
    """The snapshot folder of model.source at model.revision in model.cache_dir, with the hub
    offline (GPU nodes have no internet): DataError naming the missing file if it is not there."""
    from huggingface_hub import snapshot_download

    revision = _require_commit(spec)
    where = spec.get("cache_dir") or "the default hub cache"
    try:
        path = Path(snapshot_download(spec["source"], revision=revision, cache_dir=hub_cache(spec),
                                      local_files_only=True, **_patterns(spec)))
    except Exception as err:  # no snapshot, or one whose cached file list names files it lacks
        missing = re.search(r"missing \(([^)]*)\)", str(err))
        what = f"{missing.group(1)} (of the snapshot) is" if missing else "the snapshot is"
        raise DataError(f"model {spec['source']} at {revision}: {what} not in {where} "
                        f"(run the acquire stage on a node with internet first)") from None
    if not (path / "config.json").is_file():
        raise DataError(f"model {spec['source']} at {revision}: config.json is not in {path}")
    if not any(path.glob("*.safetensors")) and not any(path.glob("*.bin")):
        raise DataError(f"model {spec['source']} at {revision}: no weight file (*.safetensors) in {path}")
    return path


def model_path(spec: dict) -> str:
    """Where a model spec's files are: model.source itself when it is a local directory, else its
    pinned snapshot in the hub cache (offline)."""
    return spec["source"] if Path(spec["source"]).exists() else str(local_snapshot(spec))


def check_arch(spec: dict, path: Path) -> None:
    """model.arch (what the preflight's memory estimate assumed) must match the model's config.json."""
    arch = spec.get("arch") or {}
    config_file = Path(path) / "config.json"
    if not arch:
        return
    if not config_file.is_file():
        raise DataError(f"model {spec['source']}: no config.json in {path}")
    config = json.loads(config_file.read_text())
    wrong = [f"{k} {arch[k]} != {config.get(k)}" for k in ARCH_KEYS if k in arch and arch[k] != config.get(k)]
    if wrong:
        raise DataError(f"model {spec['source']}: model.arch differs from its config.json ({'; '.join(wrong)})")


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
