"""Ragged lists of arrays (one per query, of varying length) stored as flat arrays plus offsets."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from iclr26.core.io import load_arrays, save_arrays


def save_flat(path: Path, **lists) -> None:
    """Lists of 1-D (or [k, n]) arrays, ragged in their last axis -> flat arrays + offsets."""
    arrays = {}
    for name, items in lists.items():
        lengths = [np.shape(x)[-1] for x in items]
        arrays[name] = np.concatenate([np.asarray(x) for x in items], -1) if items else np.zeros(0)
        arrays[f"{name}_offsets"] = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    save_arrays(path, **arrays)


def load_flat(path: Path) -> dict[str, list[np.ndarray]]:
    raw = load_arrays(path)
    out = {}
    for name in [k for k in raw if not k.endswith("_offsets")]:
        off, flat = raw[f"{name}_offsets"], raw[name]
        out[name] = [flat[..., off[i]:off[i + 1]] for i in range(len(off) - 1)]
    return out
