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
