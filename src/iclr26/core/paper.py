"""A paper's declaration, and discovery of every paper folder under `iclr26.papers`.

A paper folder's `__init__.py` holds one `PAPER = Paper(...)`. It must stay cheap to import:
Snakemake imports every declaration when it builds the DAG, so the heavy stage code lives in
the module named by `stage_module` and is imported only inside a job.
"""
from __future__ import annotations

import functools
import hashlib
import importlib
import pkgutil
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from .errors import ConfigError

STAGES = ("acquire", "prepare", "train", "evaluate")


@dataclass(frozen=True)
class Paper:
    slug: str
    title: str
    methods: tuple[str, ...]          # the rows of the paper's table, in order
    datasets: tuple[str, ...]         # one acquire + prepare job each; the keys of the config's `data`
    metrics: tuple[str, ...]          # what its records carry: every table column and claim uses one
    stage_module: str                 # module with acquire/prepare/train/evaluate (+ figures)
    figures: tuple[str, ...] = ()     # the files its figures() writes into results/<slug>/ (declared outputs)
    arxiv: str | None = None
    openreview: str | None = None
    code: str | None = None           # official repository, where one exists
    gpu_stages: tuple[str, ...] = field(default=("train", "evaluate"))
    data_reads: tuple[str, ...] = ()  # config sections acquire/prepare read besides `data` and the job keys
    data_parallel: bool = False       # train() uses core.distributed: may run as several processes
    # methods whose train() does nothing (training-free baselines): the workflow queues no train job
    # for them and their evaluate reads no train output
    training_free: tuple[str, ...] = ()
    # stages that read the whole seed list (config key `seeds`), e.g. an acquire that draws every seed's
    # data: a change of the list reruns them. Every other job reads only its own block (job.seeds).
    seed_list_stages: tuple[str, ...] = ()

    def __post_init__(self):
        unknown = [m for m in self.training_free if m not in self.methods]
        if unknown:
            raise ValueError(f"paper {self.slug}: training_free names unknown method(s) {unknown}")
        unknown = [s for s in self.seed_list_stages if s not in STAGES]
        if unknown:
            raise ValueError(f"paper {self.slug}: seed_list_stages names unknown stage(s) {unknown}")

    def module(self) -> ModuleType:
        return importlib.import_module(self.stage_module)

    def stage(self, name: str):
        module = self.module()
        if not hasattr(module, name):
            raise AttributeError(f"paper {self.slug}: stage module {self.stage_module} has no {name}()")
        return getattr(module, name)

    @property
    def folder(self) -> Path:
        return Path(__file__).resolve().parents[1] / "papers" / self.slug

    def source_digest(self) -> str:
        """A hash of the paper's own code: a job's results depend on it (editing it reruns them)."""
        return _source_digest(self.slug, str(self.folder))


@functools.cache
def _source_digest(slug: str, folder: str) -> str:
    digest = hashlib.sha256()
    for path in sorted(Path(folder).rglob("*.py")):
        digest.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


@functools.cache
def core_digest() -> str:
    """A hash of the shared code every job runs (src/iclr26/core and the command line). It does not
    rerun jobs by itself (an edit there would rerun every paper: use --forcerun), but saved units of
    work and checkpoints are keyed by it, so a forced rerun recomputes under the new code."""
    package = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in [*sorted((package / "core").rglob("*.py")), package / "__main__.py", package / "__init__.py"]:
        digest.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


@functools.lru_cache(maxsize=1)
def all_papers() -> dict[str, Paper]:
    """Every paper folder that declares PAPER, keyed by slug, in slug order."""
    import iclr26.papers as package

    found = {}
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        paper = getattr(module, "PAPER", None)
        if isinstance(paper, Paper):
            if paper.slug != info.name:
                raise ValueError(f"paper folder {info.name} declares slug {paper.slug!r}")
            found[paper.slug] = paper
    return dict(sorted(found.items()))


def get_paper(slug: str) -> Paper:
    papers = all_papers()
    if slug not in papers:
        raise ConfigError(f"unknown paper {slug!r}; implemented: {', '.join(papers)}")
    return papers[slug]
