"""Atomic file writes and small JSON helpers.

Every artifact the pipeline produces goes through `atomic_write`: the bytes land in a temporary
file in the same directory and are renamed into place, so a killed job never leaves a
half-written output that a restart would mistake for a finished one.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def _file_mode() -> int:
    """The mode a plain open() would give a new file under this process's umask (0644 under 022)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


FILE_MODE = _file_mode()


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path`; rename it onto `path` only if the block succeeds.
    The file gets the user's umask (mkstemp alone would make it 0600)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.fchmod(fd, FILE_MODE)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def atomic_write(path: str | os.PathLike, data: str | bytes) -> Path:
    """Write text or bytes to `path` atomically (fsync, then rename)."""
    mode = "wb" if isinstance(data, bytes) else "w"
    with atomic_path(path) as tmp:
        with open(tmp, mode) as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    return Path(path)


def _json_default(obj: Any) -> Any:
    # numpy scalars and arrays, Paths, OmegaConf containers: convert without importing them eagerly
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    if type(obj).__module__.startswith("omegaconf"):
        from omegaconf import OmegaConf

        return OmegaConf.to_container(obj, resolve=True)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def _finite(obj: Any) -> Any:
    """Replace NaN/inf by None so the JSON stays standard (and readable by any tool)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def dumps_json(obj: Any) -> str:
    normalised = json.loads(json.dumps(obj, default=_json_default))
    return json.dumps(_finite(normalised), indent=2, sort_keys=True) + "\n"


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    return atomic_write(path, dumps_json(obj))


def read_json(path: str | os.PathLike) -> Any:
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON ({err.msg} at line {err.lineno})") from None


def write_jsonl(path: str | os.PathLike, rows) -> Path:
    """One JSON object per line (the row format of the hub's reasoning datasets), atomically."""
    return atomic_write(path, "".join(json.dumps(row) + "\n" for row in rows))


def read_jsonl(path: str | os.PathLike) -> list:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def sealed(text: str) -> str:
    """A cache entry: its text after one line holding the text's sha256, so that an entry edited by hand
    is seen (unsealed gives None) and made again rather than trusted."""
    return f"# sha256 {hashlib.sha256(text.encode()).hexdigest()}\n{text}"


def unsealed(entry: str) -> str | None:
    head, _, text = entry.partition("\n")
    return text if head == f"# sha256 {hashlib.sha256(text.encode()).hexdigest()}" else None


def sha256_file(path: str | os.PathLike) -> str:
    """The sha256 hex digest of a file, read in 1 MiB chunks (the one hashing helper of the project)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def save_arrays(path: str | os.PathLike, **arrays) -> Path:
    """Write named numpy arrays to one .npz file, atomically."""
    import numpy as np

    with atomic_path(path) as tmp:
        with open(tmp, "wb") as handle:  # a handle: np.savez would append .npz to a bare name
            np.savez(handle, **arrays)
    return Path(path)


def load_arrays(path: str | os.PathLike) -> dict:
    """Every array of an .npz file, loaded into memory (no pickled objects)."""
    import numpy as np

    with np.load(path, allow_pickle=False) as handle:
        return {name: handle[name] for name in handle.files}
