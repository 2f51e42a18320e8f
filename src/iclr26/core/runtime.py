"""The job's compute runtime: torch set-up and device choice, done once here for every paper.

Jobs that never import torch must not pay for it (the import takes ~2 s), and papers import it
lazily, inside their stage functions. So `configure_torch_on_import` does not import torch: it
configures torch now if it is already imported, or right after the first `import torch` of the
job otherwise (an import hook). No paper module sets torch threads or denormal handling itself.
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import sys

from .errors import ConfigError

_threads = 1


def _configure(torch) -> None:
    torch.set_num_threads(max(1, _threads))  # one job per core: Snakemake runs jobs side by side
    torch.set_flush_denormal(True)  # denormals slow small-std inits ~10x on CPU


class _ConfigureAfterImport(importlib.abc.MetaPathFinder):
    """Finds `torch` through the normal finders, then runs `_configure` right after it executes."""

    def find_spec(self, fullname, path, target=None):
        if fullname != "torch":
            return None
        sys.meta_path.remove(self)  # one shot; the real finders do the finding
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_configure(module):
            exec_module(module)
            _configure(module)

        spec.loader.exec_module = exec_then_configure
        return spec


def configure_torch_on_import(threads: int) -> None:
    """Threads = the job's cpus, no denormals: now if torch is loaded, else at its first import."""
    global _threads
    _threads = int(threads)
    if "torch" in sys.modules:
        _configure(sys.modules["torch"])
    elif not any(isinstance(f, _ConfigureAfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _ConfigureAfterImport())


def pick_device(wanted: str | None) -> str:
    """The configured device ("cpu", "cuda", "cuda:1"); asking for CUDA where torch sees no GPU is
    a config error, not a silent week on the CPU."""
    wanted = wanted or "cpu"
    if wanted.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise ConfigError(f"device={wanted} but torch sees no GPU here (override device=cpu to run on the CPU)")
    return wanted
