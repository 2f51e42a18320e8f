"""The paper contract, for every discovered paper (a new paper folder is covered the moment it
exists), at smoke scale:

- the config composes at every scale and agrees with the declaration (core.contract);
- every stage runs; the records carry every metric the paper declares (so every table column and
  claim has its numbers);
- a second run with the same seeds, killed at its first unit boundary or checkpoint of training
  and restarted, gives records identical to the first run (same seed -> same numbers, and resume
  loses or changes nothing);
- tabulate renders the table, claims and figures.

Budget: <= 20 s per paper (two smoke runs). Per-paper test files keep only their method's unit
tests and the offline full-scale path.
"""
from __future__ import annotations

import pandas as pd
import pytest

from iclr26.core import faults
from iclr26.core.config import SCALES, compose_job_config
from iclr26.core.job import load_records, run_paper
from iclr26.core.paper import all_papers

PAPERS = sorted(all_papers())


def _records(evals) -> pd.DataFrame:
    return pd.DataFrame(load_records(evals))  # in the order of run_paper's jobs: the same every run


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("slug", PAPERS)
def test_config_composes_and_agrees_with_declaration(slug, scale):
    cfg = compose_job_config(slug, scale)  # raises ConfigError on any disagreement
    assert cfg["scale"] == scale and cfg["slug"] == slug and cfg["seeds"]


@pytest.mark.parametrize("slug", PAPERS)
def test_paper_contract(slug, tmp_path, monkeypatch):
    paper = all_papers()[slug]

    (tmp_path / "first").mkdir()
    monkeypatch.chdir(tmp_path / "first")
    first = _records(run_paper(slug, "smoke"))
    missing = [m for m in paper.metrics if m not in first.columns]
    assert not missing, f"{slug}: records lack declared metrics {missing}"
    assert set(first["method"]) == set(paper.methods)
    assert first[list(paper.metrics)].notna().any().all(), f"{slug}: a declared metric is never recorded"

    from iclr26.core.tabulate import tabulate_paper

    evals = sorted(tmp_path.joinpath("first").glob("runs/smoke/*/*/*/eval.json"))
    claims = tabulate_paper(slug, "smoke", (), None, evals, tmp_path / "first" / "results" / slug)
    table = (claims.parent / "table.md").read_text()
    assert paper.title in table and all((claims.parent / f).stat().st_size for f in ("table.csv", "table.tex"))

    (tmp_path / "second").mkdir()
    monkeypatch.chdir(tmp_path / "second")
    with faults.armed("train", "any", after=1) as fault, pytest.raises(faults.InjectedFault):
        run_paper(slug, "smoke")
    assert fault.seen == 1, f"{slug}: training reached no unit boundary or checkpoint"
    second = _records(run_paper(slug, "smoke"))
    pd.testing.assert_frame_equal(first, second, check_exact=True)
