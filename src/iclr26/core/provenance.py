"""Provenance stamped into every result: git commit, package versions, machine, time."""
from __future__ import annotations

import datetime as _dt
import functools
import platform
import subprocess
from importlib import metadata
from pathlib import Path

KEY_PACKAGES = (
    "torch", "transformers", "accelerate", "numpy", "scipy", "pandas", "gymnasium",
    "hydra-core", "omegaconf", "snakemake", "dvc",
)
REPO_ROOT = Path(__file__).resolve().parents[3]


@functools.lru_cache(maxsize=1)
def git_commit() -> str:
    """The commit of the checkout, with '+dirty' when its files differ from it: a tracked file
    changed, or a file git does not ignore added (a new module changes the code a job runs)."""
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=normal")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return commit + ("+dirty" if dirty else "")


@functools.lru_cache(maxsize=1)
def package_versions() -> dict[str, str]:
    versions = {}
    for name in KEY_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def kernels() -> dict[str, str | None]:
    """The CPU code paths the numeric libraries were pinned to (iclr26.PINNED_KERNELS)."""
    import os

    from iclr26 import NATIVE_KERNELS, PINNED_KERNELS

    return {**{name: os.environ.get(name) for name in PINNED_KERNELS}, "ICLR26_NATIVE_KERNELS": NATIVE_KERNELS}


def provenance(**extra) -> dict:
    return {
        "git_commit": git_commit(),
        "packages": package_versions(),
        "kernels": kernels(),
        "python": platform.python_version(),
        "machine": f"{platform.system()} {platform.machine()}",
        "created_utc": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        **extra,
    }
