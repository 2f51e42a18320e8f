"""The report in a real browser (Debian's headless Chromium) at a desktop width (1280 px) and a phone's
(390 px): the summary comes first, then every paper's section with its claim list, forest plot, table
and figures; nothing is wider than the window. Screenshots of the summary and of one paper are kept in
test-artifacts/ (report_summary.png, report_paper.png, and the paper on a phone, report_paper_390.png).

Chromium will not make a window narrower than 500 px, so the page is measured inside an iframe of the
width under test (a test-only harness page; the report itself has no script), whose scrollWidth is the
page's own at that width.
"""
from __future__ import annotations

import base64
import html
import io
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO
from iclr26.core.paper import all_papers

ARTIFACTS = REPO / "test-artifacts"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars"]
WIDTHS = (1280, 390)
HEIGHT = 1400
SCREENSHOT_PAPER = "diffusion_convergence"   # any paper with claims and figures; a shared fixture of the suite


@pytest.fixture(scope="module")
def chromium():
    path = shutil.which("chromium")
    if not path:
        if os.environ.get("ICLR26_SKIP_BROWSER") == "1":
            pytest.skip("ICLR26_SKIP_BROWSER=1 and no chromium")
        pytest.fail("chromium is not installed: run scripts/setup.sh as root (apt-get install chromium), "
                    "or set ICLR26_SKIP_BROWSER=1 to skip")
    return path


@pytest.fixture(scope="module")
def report(tmp_path_factory, smoke_run):
    """Every paper at smoke scale (the contract test's runs), tabulated, with the claims page and the report."""
    from iclr26.core.claims import write_claims_summary
    from iclr26.core.report import write_report

    work = tmp_path_factory.mktemp("report")
    for slug in all_papers():
        shutil.copytree(smoke_run(slug)[0] / "results" / slug, work / "results" / slug)
    previous = os.getcwd()
    os.chdir(work)
    try:
        write_claims_summary([f"results/{s}/claims.json" for s in all_papers()], "results/claims.md")
        return write_report(list(all_papers()), "results", work / "results" / "report.html").resolve()
    finally:
        os.chdir(previous)


# ----------------------------------------------------------------------------- the harness
MEASURE = """
addEventListener('load', () => {
  const frame = document.getElementById('page'), doc = frame.contentDocument, root = doc.documentElement;
  if (SCROLL_TO) doc.getElementById(SCROLL_TO).scrollIntoView();
  const width = root.clientWidth, clips = el => getComputedStyle(el).overflowX !== 'visible';
  const offenders = [];   // what sticks out of the window, outside any box that scrolls it
  for (const el of doc.body.querySelectorAll('*')) {
    let inside = false;
    for (let p = el.parentElement; p && p !== doc.body; p = p.parentElement) if (clips(p)) { inside = true; break; }
    if (!inside && el.getBoundingClientRect().right > width + 1)
      offenders.push(el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') + (el.className ? '.' + el.className : ''));
  }
  const sections = {};
  for (const s of doc.querySelectorAll('section[id]'))
    sections[s.id] = {height: s.offsetHeight, images: [...s.querySelectorAll('img')].map(i => i.naturalWidth)};
  document.getElementById('measure').textContent = JSON.stringify(
    {scrollWidth: root.scrollWidth, clientWidth: width, offenders: offenders.slice(0, 10), sections});
});
"""


def harness(report, tmp_path, width: int, scroll_to: str = "") -> Path:
    """A test-only page showing the report in an iframe `width` px wide, with a script that writes the
    measurements into its own DOM (read back with --dump-dom)."""
    script = MEASURE.replace("SCROLL_TO", json.dumps(scroll_to))
    page = (f"<!doctype html><html><head><meta charset='utf-8'><style>html,body{{margin:0;overflow:hidden}}"
            f"#measure{{position:absolute;top:0;left:-99999px}}</style></head><body>"
            f"<iframe id='page' style='width:{width}px;height:{HEIGHT}px;border:0;display:block' "
            f"srcdoc=\"{html.escape(report.read_text(), quote=True)}\"></iframe>"
            f"<pre id='measure'></pre><script>{script}</script></body></html>")
    path = tmp_path / f"harness-{width}-{scroll_to or 'top'}.html"
    path.write_text(page)
    return path


def _chromium(binary, page, tmp_path, width: int, *args):
    window = f"--window-size={max(width, 500)},{HEIGHT}"   # Chromium's narrowest window is 500 px
    proc = subprocess.run([binary, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", window, *args,
                           page.as_uri()], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def look(binary, report, tmp_path, width: int, shot: str, scroll_to: str = "") -> dict:
    """One Chromium run at `width`: the measurements, and a screenshot kept as test-artifacts/`shot`."""
    from PIL import Image

    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / shot
    dom = _chromium(binary, harness(report, tmp_path, width, scroll_to), tmp_path, width, "--dump-dom",
                    f"--screenshot={path}")
    found = re.search(r'<pre id="measure">(.*?)</pre>', dom, re.S)
    assert found and found.group(1), "the harness wrote no measurements"
    Image.open(path).crop((0, 0, width, HEIGHT)).save(path)   # the iframe: the window may be wider
    return {**json.loads(html.unescape(found.group(1))), "shot": path}


def _not_blank(path: Path) -> bool:
    from PIL import Image

    gray = Image.open(path).convert("L")
    return sum(1 for value in gray.getdata() if value < 128) > 0.01 * gray.size[0] * gray.size[1]


# ----------------------------------------------------------------------------- the page
def test_every_paper_has_its_section(report):
    """The page: summary first, then each paper's section with its title, table, claim list, forest plot
    and every figure as a whole PNG (that the browser draws them is the next test's)."""
    from PIL import Image

    text = report.read_text()
    assert 0 <= text.find('id="summary"') < min(text.find(f'<section id="{slug}">') for slug in all_papers())
    for slug, paper in all_papers().items():
        section = text.split(f'<section id="{slug}">', 1)[1].split("</section>", 1)[0]
        assert paper.title in html.unescape(section) and "<table>" in section, slug
        figures = re.findall(r'<img[^>]*src="data:image/png;base64,([^"]+)"[^>]*class="figure"', section)
        assert len(figures) == len(paper.figures), slug
        assert section.count('class="forest"') == 1 and 'class="claims"' in section, slug
        for data in figures:  # each figure is a whole PNG the browser can draw
            assert min(Image.open(io.BytesIO(base64.b64decode(data))).size) > 50


# ----------------------------------------------------------------------------- in the browser
VIEWS = [(1280, "", "report_summary.png"), (1280, SCREENSHOT_PAPER, "report_paper.png"),
         (390, SCREENSHOT_PAPER, "report_paper_390.png")]


@pytest.mark.parametrize("width, scroll_to, shot", VIEWS, ids=[v[2].removesuffix(".png") for v in VIEWS])
def test_in_a_browser_every_section_is_drawn_and_nothing_is_wider_than_the_window(chromium, report, tmp_path,
                                                                                   width, scroll_to, shot):
    seen = look(chromium, report, tmp_path, width, shot, scroll_to)
    assert seen["scrollWidth"] <= seen["clientWidth"] == width, (
        f"at {width} px the page is {seen['scrollWidth']} px wide; sticking out: {seen['offenders']}")
    assert not seen["offenders"], seen["offenders"]
    for slug, paper in all_papers().items():
        drawn = seen["sections"][slug]
        assert drawn["height"] > 200, (width, slug)
        assert len(drawn["images"]) == len(paper.figures) + 1 and min(drawn["images"]) > 50, (width, slug)
    assert _not_blank(seen["shot"]), f"{shot}: the page rendered (almost) blank"


# ----------------------------------------------------------------------------- the parts, without a browser
def _png(path: Path, size=(80, 60)) -> Path:
    from PIL import Image

    Image.new("RGB", size, (200, 30, 30)).save(path)
    return path


def _claim(**extra) -> dict:
    claim = {"id": "c1", "claim": "Method A beats B on the benchmark (n=80)", "compared": "a - b",
             "estimate": {"value": 0.5, "lo": 0.2, "hi": 0.8, "n": 5, "how": "paired t"}, "test": "paired_t",
             "direction": "higher", "baseline": "b", "kind": "claim", "verdict": "holds"}
    return {**claim, **extra}


def test_markdown_is_rendered_by_markdown_it(tmp_path):
    from iclr26.core.report import markdown_to_html

    _png(tmp_path / "fig.png")
    page = markdown_to_html("# Title\n\nSome **bold** text <script>x</script>.\n\n"
                            "| method | acc |\n|---|---|\n| a \\| b | **0.9** |\n\n- one\n- two\n\n"
                            "![fig.png](fig.png)\n\n![gone.png](gone.png)\n", tmp_path)
    assert "<h2>Title</h2>" in page   # the page has its own h1
    assert "<strong>bold</strong>" in page and "&lt;script&gt;" in page and "<script>" not in page
    assert '<div class="scroll"><table>' in page and "<td>a | b</td>" in page
    assert "<td><strong>0.9</strong></td>" in page
    assert "<ul>\n<li>one</li>\n<li>two</li>\n</ul>" in page
    assert re.search(r'<img src="data:image/png;base64,[^"]+" alt="fig.png" class="figure"', page)
    assert "[figure gone.png is missing]" in page


def test_table_md_is_split_into_shown_replaced_and_folded_parts(tmp_path):
    """The headings tables.render_markdown writes are the ones the report knows: its claim tables are
    replaced by the claim list, deviations, post-hoc decisions and notes are folded, figures kept."""
    from iclr26.core.report import split_paper_text
    from iclr26.core.stats import Estimate
    from iclr26.core.tables import Section, render_markdown

    section = Section("main", ["acc"], {"a": {"acc": Estimate(0.9, 0.8, 1.0, 3, "t")}}, {"acc": ".2f"})
    markdown = render_markdown("Paper — its table", "**Ours: tiny**", [section], {}, {"rows": {"a": {"acc": "91"}}},
                               [_claim(), _claim(id="c2", kind="check")], ["fig.png"], ["a note"],
                               ["a deviation", {"what": "changed x", "why": "y", "post_hoc": "2026-12-01"}],
                               [{"what": "tiny thing", "post_hoc": "2026-11-30"}])
    text = split_paper_text(markdown)
    assert text.title == "Paper — its table" and text.intro[1].content == "**Ours: tiny**"
    assert [h for h, _ in text.shown] == ["main", "The paper's numbers (paper)"]
    assert [h for h, _ in text.folded] == ["Deviations from the paper",
                                          "Decisions made after reading tiny-scale results", "Notes"]
    assert [c.attrGet("src") for t in text.figures for c in t.children or [] if c.type == "image"] == ["fig.png"]


def test_the_claim_list_says_what_was_claimed_and_found_in_a_line_and_folds_the_rest():
    from iclr26.core.report import CLAIM_WORDS, claim_html, claim_list_html, short_text

    words = " ".join(f"w{i}" for i in range(40))
    long = f"Scaling (in the paper's Table 2) helps {words}. A second sentence."
    seeds = {"decide": 12, "no_effect": None, "capped": False,
             "text": "≈ 12 seeds would decide it at this effect and spread",
             "command": "snakemake all --config 'seeds=[0,1,2]'"}
    item = claim_html(_claim(claim=long, paper="+3.1 points", verdict="inconclusive", seeds_needed=seeds,
                             note="post hoc (audit 05): the bar moved", margin={"value": 0.1, "why": "noise floor"},
                             estimate={"value": 0.5, "lo": -0.2, "hi": 1.2, "n": 5, "how": "paired t"}))
    line = re.search(r'<span class="what">(.*?)</span>', item).group(1)
    assert line == short_text(long, CLAIM_WORDS) and len(line.split()) <= CLAIM_WORDS + 1 and line.endswith("…")
    assert "Table 2" not in line and "second" not in line
    assert 'class="claim v-inconclusive"' in item and "+3.1 points" in item and "<b>0.5</b> [-0.2, 1.2]" in item
    assert "straddles" in item   # the one-line reason when the claim has none of its own
    assert "≈ 12 seeds would decide it" in item
    assert "<code>snakemake all --config &#x27;seeds=[0,1,2]&#x27;</code>" in item
    folded = item.split("<details>", 1)[1]
    assert html.escape(long) in folded and "post hoc (audit 05)" in folded and "± 0.1: noise floor" in folded
    assert "decide: 12 seeds" in folded
    # the optional keys may all be absent; a check is listed, folded, apart from the claims
    minimal = {k: v for k, v in _claim().items() if k not in ("baseline",)} | {"value": 0.0}
    page = claim_list_html([minimal, _claim(id="k", kind="check", verdict="untestable here",
                                            reason="2 seeds; paired_t is valid from 3")])
    assert page.count('class="claim ') == 2 and "Checks and probes (1;" in page and "v-check" in page


def test_no_effect_is_its_own_outcome_in_the_summary_and_the_list():
    from iclr26.core.report import claim_html, summary_html, tally_text

    no_effect = _claim(id="n", verdict="not reproduced (no effect)", margin={"value": 0.5, "why": "w"},
                       estimate={"value": 0.01, "lo": -0.1, "hi": 0.1, "n": 8})
    claims = [no_effect, _claim(id="r", verdict="not reproduced"), _claim()]
    summary = summary_html([{"paper": "p", "scale": "tiny", "seeds": [0, 1], "claims": claims}], {"p": 2}, {})
    heads = re.findall(r"<th[^>]*>([^<]+)</th>", summary)
    assert heads == ["paper", "scale", "seeds", "holds", "not reproduced", "not reproduced (no effect)",
                     "deviations"]
    assert 'class="claim v-not-reproduced-no-effect"' in claim_html(no_effect)
    assert "rules out an effect that matters (margin ± 0.5)" in claim_html(no_effect)
    assert "the 95% interval [0.2, 0.8] lies wholly above 0 (no difference)" in claim_html(_claim())
    assert tally_text(claims) == "1 holds · 1 not reproduced · 1 not reproduced (no effect)"


def test_the_forest_plot_puts_every_claim_on_one_axis_relative_to_its_threshold():
    from PIL import Image

    from iclr26.core.report_forest import X_CAP, forest_plot_png, forest_row, x_limit

    est = {"value": 3.0, "lo": 2.0, "hi": 4.0, "n": 5}
    higher = forest_row(_claim(estimate=est))              # scaled by the interval's far end from 0
    assert (higher.lo, higher.value, higher.hi, higher.band) == (0.5, 0.75, 1.0, None)
    lower = forest_row(_claim(direction="lower", estimate=est, baseline=None, value=5.0))
    assert (lower.lo, lower.hi) == (1 / 3, 1.0)           # toward the claim is to the right
    margin = forest_row(_claim(estimate=est, margin={"value": 2.0, "why": "w"}))
    assert (margin.lo, margin.hi, margin.band) == (1.0, 2.0, "margin")
    within = forest_row(_claim(direction="within", tolerance=0.5, baseline=None, value=3.0, estimate=est))
    assert (within.lo, within.hi, within.band) == (-2.0, 2.0, "tolerance")
    assert x_limit([higher, margin, within]) == pytest.approx(2.16)
    assert x_limit([forest_row(_claim(estimate=est, margin={"value": 0.01}))]) == X_CAP  # beyond: an arrow
    empty = forest_row(_claim(estimate={"value": None, "lo": None, "hi": None, "n": 0}))
    assert empty.value != empty.value   # nan: drawn as "no estimate", not a crash

    def height(n):
        return Image.open(io.BytesIO(forest_plot_png([_claim(id=f"c{i}") for i in range(n)] + [
            _claim(id="nan", estimate={"value": None, "lo": None, "hi": None, "n": 0})]))).size[1]

    assert 0.25 * 110 * 10 < height(12) - height(2) < 0.35 * 110 * 10   # ~0.3 in a row, nothing else grows


def test_write_report_marks_papers_this_run_did_not_rerun(tmp_path):
    from iclr26.core.io import write_json
    from iclr26.core.report import write_report

    results = tmp_path / "results"
    for slug in ("alpha", "beta"):
        (results / slug).mkdir(parents=True)
        (results / slug / "table.md").write_text(f"# {slug} title — t\n\nsub\n\n## main\n\n| m | x |\n|---|---|\n"
                                                 f"| a | 1 |\n\n## Claims\n\n| claim |\n|---|\n| c |\n\n"
                                                 f"## Deviations from the paper\n\n- d1\n- d2\n\n![f.png](f.png)\n")
        _png(results / slug / "f.png")
        meta = {"git_commit": "abc123", "created_utc": "2026-12-01T00:00:00+00:00"}
        write_json(results / slug / "provenance.json", meta)
        write_json(results / slug / "claims.json", {"paper": slug, "title": f"{slug} title", "scale": "tiny",
                                                    "seeds": [0, 1, 2], "claims": [_claim()], "provenance": meta})
    page = write_report(["alpha"], results, tmp_path / "report.html").read_text()
    beta = page.split('<section id="beta">', 1)[1]
    assert "Not rerun by the run that wrote this page" in beta and "not rerun" not in page.split('id="beta"')[0] \
        .split('<section id="alpha">', 1)[1]
    assert "beta</a> <small>(not rerun)</small>" in page
    assert "<h2>alpha title</h2>" in page and '<p class="table-title">Table: t</p>' in page
    assert "<summary>Deviations from the paper (2)</summary>" in page and "<h3>Claims</h3>" not in page
    assert not re.search(r"""(src|href)=["'](?!data:|#)""", page), "the report links an external file"
