"""Figures from jobs: pyplot on the file-only Agg backend, and atomic saves."""
from __future__ import annotations

import os
from pathlib import Path


def pyplot():
    """matplotlib.pyplot on the Agg backend (jobs run without a display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig, path, dpi: int = 120) -> Path:
    """Write `fig` to `path` through a temporary file and a rename (no half-written figure after a
    kill), then close it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp")
    fig.savefig(tmp, format=path.suffix.lstrip(".") or "png", dpi=dpi)
    os.replace(tmp, path)
    pyplot().close(fig)
    return path
