import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """Run pipeline stages inside a fresh directory (they write data/, runs/, results/ there)."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _project_files():
    import subprocess

    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
                         cwd=REPO, capture_output=True, text=True, check=True).stdout
    return [f for f in out.split("\0") if f and (REPO / f).is_file()]


@pytest.fixture
def checkout(tmp_path):
    """A fresh clone of the working tree (tracked + new files, no data/runs/results), as its own
    git repo, so workflow tests never touch the real results."""
    import shutil
    import subprocess

    dest = tmp_path / "repo"
    for rel in _project_files():
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, target)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q"], cwd=dest, check=True)
    subprocess.run([*git, "add", "-A"], cwd=dest, check=True)
    subprocess.run([*git, "commit", "-qm", "snapshot"], cwd=dest, check=True)
    return dest


def venv_env():
    """Environment for subprocesses: this interpreter's bin first on PATH (snakemake, dvc, python)."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join((str(Path(sys.executable).parent), env["PATH"]))
    env.pop("PYTHONPATH", None)
    return env
