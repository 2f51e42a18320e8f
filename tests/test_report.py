"""The report in a real browser (Debian's headless Chromium): the summary comes first, then the
forest plot of every claim, then every paper's section with its table and figures. A screenshot
of the summary is kept in test-artifacts/report_summary.png."""
from __future__ import annotations

import base64
import io
import os
import re
import shutil
import subprocess

import pytest

from conftest import REPO
from iclr26.core.paper import all_papers

ARTIFACTS = REPO / "test-artifacts"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


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


def _chromium(binary, page, tmp_path, *args):
    proc = subprocess.run([binary, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", *args,
                           page.as_uri()], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_every_paper_renders_in_a_browser(chromium, report, tmp_path):
    dom = _chromium(chromium, report, tmp_path, "--dump-dom")
    summary, forest = dom.find('id="summary"'), dom.find('id="forest"')
    assert 0 <= summary < forest < min(dom.find(f'<section id="{slug}"') for slug in all_papers())
    for slug, paper in all_papers().items():
        section = dom.split(f'<section id="{slug}">', 1)[1].split("</section>", 1)[0]
        assert paper.title in section and "<table>" in section
        images = re.findall(r'src="data:image/png;base64,([^"]+)"', section)
        assert len(images) == len(paper.figures), slug
        from PIL import Image

        for data in images:  # each figure is a whole PNG the browser can draw
            assert min(Image.open(io.BytesIO(base64.b64decode(data))).size) > 50


def test_a_screenshot_of_the_summary_is_kept(chromium, report, tmp_path):
    from PIL import Image

    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "report_summary.png"
    _chromium(chromium, report, tmp_path, "--window-size=1200,1400", f"--screenshot={shot}")
    image = Image.open(shot).convert("L")
    assert image.size == (1200, 1400)
    dark = sum(1 for value in image.getdata() if value < 128)
    assert dark > 0.01 * image.size[0] * image.size[1], "the page rendered (almost) blank"
