import pandas as pd
import pytest

from iclr26.core.tables import build_sections, render_csv, render_latex, render_markdown, tex_escape

SPEC = {"sections": [
    {"name": "headline", "columns": [
        {"metric": "acc", "label": "accuracy", "agg": "mean", "fmt": ".2f"},
        {"metric": "acc", "label": "acc (env b)", "where": {"env": "b"}, "agg": "iqm"},
    ]},
]}


def _records():
    rows = []
    for seed in range(4):
        for env in ("a", "b"):
            rows.append({"method": "m1", "seed": seed, "env": env, "acc": 0.5 + 0.1 * seed})
            rows.append({"method": "m2", "seed": seed, "env": env, "acc": 0.6})
    return pd.DataFrame(rows)


def test_sections_aggregate_per_method_and_filter():
    (section,) = build_sections(SPEC, _records(), ["m2", "m1"])
    assert list(section.rows) == ["m2", "m1"]  # declared method order, not alphabetical
    assert section.rows["m1"]["accuracy"].value == pytest.approx(0.65)
    assert section.rows["m1"]["accuracy"].n == 8
    assert section.rows["m1"]["acc (env b)"].n == 4


def test_markdown_shows_ours_paper_and_claims():
    sections = build_sections(SPEC, _records(), ["m1", "m2"])
    claims = [{"claim": "m1 wins", "paper": "+3", "compared": "m1 - m2", "test": "paired_t", "verdict": "holds",
               "estimate": {"value": 0.1, "lo": 0.05, "hi": 0.15, "n": 4, "how": "x"}}]
    md = render_markdown("T", "sub", sections, {"m1": "Method one"}, {"source": "Table 1", "columns": ["acc"],
                         "rows": {"m1": {"acc": "71.2"}}}, claims, ["fig.png"], ["a note"])
    assert "| Method one | 0.65 [" in md
    assert "## The paper's numbers (Table 1)" in md and "| Method one | 71.2 |" in md
    assert "**holds**" in md and "![fig.png](fig.png)" in md and "- a note" in md


def test_csv_is_tidy_and_latex_is_escaped():
    sections = build_sections(SPEC, _records(), ["m1", "m2"])
    csv = render_csv(sections, {}, {"rows": {"m1": {"acc": "71.2"}}}, "tiny")
    frame = pd.read_csv(__import__("io").StringIO(csv))
    assert set(frame["source"]) == {"ours (tiny)", "paper: "}
    assert len(frame) == 2 * 2 + 1
    tex = render_latex("κ & δ_1", sections, {})
    assert r"$\kappa$ \& $\delta$\_1" in tex and r"\toprule" in tex and tex.count(r"\\") >= 3
    assert tex_escape("50%") == r"50\%"


def test_deviations_are_printed_under_the_table_and_checked_when_composed():
    from iclr26.core.config import ConfigError, compose_job_config
    from iclr26.core.paper import all_papers
    from iclr26.core.tables import render_markdown

    text = render_markdown("t", "s", [], {}, {}, [], [], [], ["a stand-in dataset",
                           {"what": "budget cut to 40k steps", "why": "CPU time", "post_hoc": "2026-11-30"}])
    assert "## Deviations from the paper" in text
    assert "- a stand-in dataset" in text and "- budget cut to 40k steps: CPU time (post-hoc, 2026-11-30)" in text
    slug = sorted(all_papers())[0]
    with pytest.raises(ConfigError, match=r"config key 'deviations\[0\]' must be a string or"):
        compose_job_config(slug, "smoke", ("deviations=[{when: now}]",))


def test_the_tiny_post_hoc_history_is_printed_at_full_scale():
    """A full-scale file replaces the deviation list; the tiny-scale post-hoc decisions it does not
    restate still appear under their own heading."""
    from iclr26.core.config import compose_job_config
    from iclr26.core.paper import all_papers
    from iclr26.core.tables import render_markdown
    from iclr26.core.tabulate import tiny_history

    for slug in sorted(all_papers()):
        tiny = [d for d in compose_job_config(slug, "tiny").get("deviations") or []
                if isinstance(d, dict) and d.get("post_hoc")]
        if tiny:
            break
    assert tiny_history(slug, []) == tiny
    assert tiny_history(slug, [tiny[0]["what"]]) == tiny[1:]
    assert tiny_history("dart", ["[iot-baseline] restated in other words at full"]) == [
        d for d in tiny_history("dart", []) if not d["what"].startswith("[iot-baseline]")]
    text = render_markdown("t", "s", [], {}, {}, [], [], [], ["full only"], tiny)
    assert "## Decisions made after reading tiny-scale results" in text
    assert f"- {tiny[0]['what']}" in text
