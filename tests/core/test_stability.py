"""core.stability: seed-set parsing, the claim-by-claim comparison and its tables, on hand-made claims."""
import math

import pytest

from iclr26.__main__ import main
from iclr26.core.config import MAX_SEED
from iclr26.core.errors import ConfigError
from iclr26.core.paper import get_paper
from iclr26.core.stability import (
    compare_claims,
    parse_seeds,
    render_markdown,
    render_text,
    seed_label,
    stability,
    status,
    summary,
    workdir_for,
)


def claim(cid, verdict, value, lo, hi, kind="claim", n=8, **extra):
    return {"id": cid, "claim": f"the claim {cid}", "kind": kind, "test": "paired_t", "verdict": verdict,
            "estimate": {"value": value, "lo": lo, "hi": hi, "n": n, "how": "t"}, **extra}


@pytest.mark.parametrize("text,seeds", [("100-107", list(range(100, 108))), ("100,101,105", [100, 101, 105]),
                                        ("0-2, 9", [0, 1, 2, 9]), ("7", [7])])
def test_seed_sets_parse_as_ranges_and_lists(text, seeds):
    assert parse_seeds(text) == seeds


@pytest.mark.parametrize("text,needle", [("a-b", "expected seeds such as"), ("7-3", "runs backwards"),
                                         ("1,2,1", "listed twice"), (f"0-{MAX_SEED + 1}", "not allowed"),
                                         ("", "expected seeds such as"), ("0-20000", "more than")])
def test_bad_seed_sets_are_one_line_errors(text, needle):
    with pytest.raises(ConfigError, match=needle) as err:
        parse_seeds(text)
    assert "\n" not in str(err.value)


def test_seed_labels_follow_the_run_folders_block_names():
    assert seed_label(range(100, 108)) == "seeds-100-107"
    assert seed_label([1, 4, 9]) == "seeds-1_4_9"


def test_the_comparison_marks_flips_overlaps_and_orders_claims_before_checks():
    a = [claim("check1", "holds", 1.0, 0.5, 1.5, kind="check"), claim("same", "holds", 1.0, 0.2, 1.8),
         claim("luck", "holds", 0.6, 0.1, 1.1), claim("moves", "holds", 2.0, 1.5, 2.5),
         claim("undecided", "inconclusive", 0.0, -1.0, 1.0), claim("nan", "inconclusive", 0.0, math.nan, 1.0),
         claim("opaque", "not reproduced", -1.0, -2.0, -0.5)]
    b = [claim("check1", "not reproduced", -1.0, -2.0, -0.5, kind="check"), claim("same", "holds", 1.2, 0.3, 2.1),
         claim("luck", "inconclusive", 0.2, -0.3, 0.7), claim("moves", "not reproduced", -2.0, -2.5, -1.5),
         claim("undecided", "untestable here", 0.1, -0.9, 1.1, reason="precondition not met"),
         claim("nan", "inconclusive", 0.0, -1.0, 1.0), claim("opaque", "not reproduced (no effect)", 0.0, -0.1, 0.1),
         claim("new", "holds", 1.0, 0.5, 1.5)]
    rows = {r["id"]: r for r in compare_claims(a, b)}
    assert [r["id"] for r in compare_claims(a, b)] == ["same", "luck", "moves", "undecided", "nan", "opaque", "new",
                                                       "check1"]
    assert (rows["same"]["flips"], rows["same"]["overlap"], status(rows["same"])) == (False, True, "same")
    assert (rows["luck"]["flips"], rows["luck"]["overlap"]) == (True, True)   # decided on A only: seed-set luck
    assert (rows["moves"]["flips"], rows["moves"]["overlap"]) == (True, False)
    assert not rows["undecided"]["flips"] and status(rows["undecided"]) == "differs, both undecided"
    assert rows["undecided"]["b"]["reason"] == "precondition not met"
    assert rows["nan"]["overlap"] is None and rows["nan"]["a"]["lo"] is None
    assert rows["opaque"]["flips"]   # verdicts are opaque strings: any two different decided ones flip
    assert not rows["new"]["flips"] and status(rows["new"]) == "only on B" and rows["new"]["a"] == {"verdict": None}
    assert rows["check1"]["flips"]
    assert summary(list(rows.values())) == {"claims": 7, "flips": ["luck", "moves", "opaque"], "same_verdict": 2,
                                            "intervals_overlap": 3, "checks_flip": ["check1"]}


def test_the_tables_say_which_verdicts_are_seed_set_luck():
    rows = compare_claims([claim("luck", "holds", 0.6, 0.1, 1.1, note="holds on 2% of the pool's seed sets"),
                           claim("c", "holds", 1, 0, 2, kind="check")],
                          [claim("luck", "inconclusive", 0.2, -0.3, 0.7), claim("c", "holds", 1, 0, 2, kind="check")])
    text = render_text(rows, "0-7", "100-107")
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["claim", "A", "0-7"]
    luck = next(line for line in lines if line.startswith("luck"))
    assert "holds" in luck and "0.6 [0.1, 1.1]" in luck and "0.2 [-0.3, 0.7]" in luck and luck.endswith("FLIPS")
    assert lines.index("-- checks (not counted) --") < next(i for i, x in enumerate(lines) if x.startswith("c "))
    assert "1 counted claim: 0 with the same verdict on both sets, 1 flip (luck): seed-set luck" in text
    assert text.endswith("What the project knows of these claims:\n  luck: holds on 2% of the pool's seed sets")
    md = render_markdown({"paper": "p", "scale": "tiny", "seeds_a": list(range(8)), "seeds_b": list(range(100, 108)),
                          "a_is_own": True, "rows": rows,
                          "provenance": {"git_commit": "0123456789abcdef", "created_utc": "2026-12-02"}})
    assert "FLIPS (seed-set luck)" in md and "## Checks and probes (not counted)" in md
    assert ("| luck: the claim luck *(holds on 2% of the pool's seed sets)* | paired_t | **holds** | "
            "0.6 [0.1, 1.1] (8) | **inconclusive** |") in md


def test_a_paper_whose_data_reads_the_seed_list_runs_another_set_in_its_own_folder():
    assert str(workdir_for(get_paper("andor_template"), "tiny", [100], own=False)) == "."
    assert str(workdir_for(get_paper("icl_vs_sft"), "tiny", [100], own=True)) == "."
    assert workdir_for(get_paper("icl_vs_sft"), "tiny", [100, 101], own=False).as_posix() == \
        "stability/tiny/icl_vs_sft/seeds-100-101"


def test_overlapping_sets_and_bad_seeds_are_refused_in_one_line(capsys):
    assert main(["stability", "--paper", "andor_template", "--scale", "smoke", "--seeds", "1-3"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("iclr26 stability: error: --seeds: seed(s) 1 are also in set A (seeds-0-1): a stability "
                   "check needs two disjoint seed sets")
    for bad in (["--seeds", "1-x"], ["--seeds", "5", "--cores", "0"], ["--seeds", "5", "--scale", "huge"]):
        assert main(["stability", "--paper", "andor_template", *bad]) == 2
        assert capsys.readouterr().err.count("\n") == 1


def test_a_failed_run_leaves_no_earlier_comparison(workdir, monkeypatch):
    import iclr26.core.stability as module

    out = workdir / "results" / "andor_template" / "stability" / "seeds-5"
    out.mkdir(parents=True)
    for name in ("claims.json", "stability.json", "stability.md"):
        (out / name).write_text("{}")
    (workdir / "results" / "andor_template" / "claims.json").write_text("{}")
    with pytest.raises(ConfigError, match="no_such_key"):   # stops when set A's config is composed, before any job
        stability("andor_template", "smoke", ["train.no_such_key=1"], [5])
    assert not list(out.iterdir())
    assert (workdir / "results" / "andor_template" / "claims.json").read_text() == "{}"
    # no scale or override given: config/config.yaml's, as `snakemake all` runs the paper's own set
    monkeypatch.setattr(module, "workflow_config", lambda: {"scale": "smoke", "overrides": ["train.other_key=1"]})
    with pytest.raises(ConfigError, match="other_key"):
        stability("andor_template", None, [], [5])
