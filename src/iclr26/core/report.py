"""results/report.html: one self-contained page with every paper's table, claims and figures.

The page is built from the files tabulate wrote (table.md, figures), so it shows exactly what is
in results/; images are embedded, so the file can be mailed or attached as it is.
"""
from __future__ import annotations

import base64
import html
import re
from pathlib import Path

from .io import atomic_write, read_json

STYLE = """
body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.6em 0 1.2em;font-size:.9em}
td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left;vertical-align:top}
th{background:#f3f3f3} img{max-width:100%;border:1px solid #eee;margin:.5em 0}
.holds{color:#0a6b2d} .not-reproduced{color:#a31515} .inconclusive{color:#8a6d00}
nav a{margin-right:1em} h1{border-bottom:2px solid #333} section{margin-bottom:3em}
"""


def _inline(text: str) -> str:
    text = html.escape(text)
    text = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", text)
    text = re.sub(r"(?<![\w*])_(.+?)_(?!\w)", r"<i>\1</i>", text)
    for word, cls in (("not reproduced", "not-reproduced"), ("holds", "holds"), ("inconclusive", "inconclusive")):
        text = text.replace(f"<b>{word}</b>", f'<b class="{cls}">{word}</b>')
    return text


def markdown_to_html(markdown: str, image_dir: Path) -> str:
    """Enough Markdown for the files this pipeline writes: headings, tables, lists, images, text."""
    out, table = [], []

    def flush_table():
        if not table:
            return
        cells = [[c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", row.strip())[1:-1]] for row in table]
        head, body = cells[0], [r for r in cells[2:]]
        out.append("<table><tr>" + "".join(f"<th>{_inline(c)}</th>" for c in head) + "</tr>")
        out.extend("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in r) + "</tr>" for r in body)
        out.append("</table>")
        table.clear()

    for line in markdown.splitlines():
        if line.startswith("|"):
            table.append(line)
            continue
        flush_table()
        if m := re.match(r"^(#{1,4}) (.*)", line):
            level = len(m.group(1)) + 1  # the page has its own h1
            out.append(f"<h{level}>{_inline(m.group(2))}</h{level}>")
        elif m := re.match(r"^!\[.*?\]\((.+?)\)", line):
            image = image_dir / m.group(1)
            if image.exists():
                data = base64.b64encode(image.read_bytes()).decode()
                out.append(f'<img alt="{html.escape(m.group(1))}" src="data:image/png;base64,{data}">')
        elif line.startswith("- "):
            out.append(f"<ul><li>{_inline(line[2:])}</li></ul>")
        elif line.strip():
            out.append(f"<p>{_inline(line)}</p>")
    flush_table()
    return "\n".join(out)


OUTCOME_COLOURS = {"holds": "#0a6b2d", "not reproduced": "#a31515", "inconclusive": "#8a6d00",
                   "untestable here": "#666666", "check": "#1f4e9c"}


def _outcome(claim: dict) -> str:
    return "check" if claim.get("kind") == "check" else claim["verdict"]


def summary_html(payloads: list[dict], deviations: dict[str, int]) -> str:
    """The verdicts at a glance: one row per paper (scale, seeds, outcome counts, deviations)."""
    outcomes = [o for o in OUTCOME_COLOURS if any(_outcome(c) == o for p in payloads for c in p["claims"])]
    head = "".join(f"<th>{html.escape(o)}</th>" for o in outcomes)
    rows = []
    for p in payloads:
        counts = [sum(_outcome(c) == o for c in p["claims"]) for o in outcomes]
        cells = "".join(f'<td style="color:{OUTCOME_COLOURS[o]}">{n}</td>' for o, n in zip(outcomes, counts))
        seeds = p.get("seeds") or []
        rows.append(f'<tr><td><a href="#{p["paper"]}">{html.escape(p["paper"])}</a></td>'
                    f"<td>{html.escape(p['scale'])}</td><td>{len(seeds)}</td>{cells}"
                    f"<td>{deviations.get(p['paper'], 0)}</td></tr>")
    return (f'<section id="summary"><h2>Summary</h2><table><tr><th>paper</th><th>scale</th><th>seeds</th>{head}'
            f"<th>deviations</th></tr>{''.join(rows)}</table></section>")


def forest_plot_png(payloads: list[dict]) -> bytes:
    """Every claim's effect and interval against its threshold, one row each, coloured by outcome.
    Claims have different units, so each row is scaled by its interval's farthest end from the
    threshold: the threshold is at 0, and a verdict is where the interval lies relative to it."""
    import io as _io

    from .figures import pyplot

    rows = []
    for p in payloads:
        for c in p["claims"]:
            est = c["estimate"]
            reference = 0.0 if c.get("baseline") is not None else float(c.get("value") or 0.0)
            lo, value, hi = (None if est.get(k) is None else float(est[k]) - reference for k in ("lo", "value", "hi"))
            finite = [abs(x) for x in (lo, value, hi) if x is not None and x == x and abs(x) != float("inf")]
            scale = max(finite, default=1.0) or 1.0
            rows.append((f"{p['paper']}: {c['id']}", *(None if x is None else x / scale for x in (lo, value, hi)),
                         _outcome(c)))
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 0.28 * len(rows) + 1.2))
    for y, (_label, lo, value, hi, outcome) in enumerate(reversed(rows)):
        colour = OUTCOME_COLOURS.get(outcome, "#000000")
        if lo is not None and hi is not None and lo == lo and hi == hi:
            ax.plot([lo, hi], [y, y], color=colour, lw=2)
        if value is not None and value == value:
            ax.plot(value, y, "o", color=colour, ms=4)
    ax.axvline(0.0, color="#333333", lw=1)
    ax.set_yticks(range(len(rows)), [r[0] for r in reversed(rows)], fontsize=7)
    ax.set_xlim(-1.1, 1.1)
    ax.set_xlabel("effect - threshold, scaled per claim (the threshold is 0)")
    for outcome, colour in OUTCOME_COLOURS.items():
        ax.plot([], [], color=colour, lw=2, label=outcome)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    buffer = _io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    plt.close(fig)
    return buffer.getvalue()


def write_report(papers: list[str], results_dir, out) -> Path:
    """The page of this run's papers and of every other paper whose results are in `results_dir`
    (each of those marked as not rerun by this run)."""
    from .claims import earlier_results, stale_note

    results = Path(results_dir)
    stale = {}
    for path in earlier_results(results, papers):
        if all((path.parent / name).exists() for name in ("table.md", "provenance.json")):
            stale[path.parent.name] = stale_note(read_json(path))
    papers = sorted([*papers, *stale])
    payloads, deviations = [], {}
    for slug in papers:
        claims_file = results / slug / "claims.json"
        if claims_file.exists():
            payloads.append(read_json(claims_file))
        config_file = results / slug / "config.yaml"
        if config_file.exists():
            import yaml

            deviations[slug] = len(yaml.safe_load(config_file.read_text()).get("deviations") or [])
    overview = summary_html(payloads, deviations)
    if any(p["claims"] for p in payloads):
        forest = base64.b64encode(forest_plot_png(payloads)).decode()
        overview += (f'<section id="forest"><h2>Every claim</h2><img alt="forest plot of every claim" '
                     f'src="data:image/png;base64,{forest}"></section>')
    sections, nav = [], ['<a href="#summary">summary</a>']
    for slug in papers:
        table = results / slug / "table.md"
        if not table.exists():
            raise FileNotFoundError(f"{table} is missing; run the tabulate stage first")
        nav.append(f'<a href="#{slug}">{slug}</a>')
        meta = read_json(results / slug / "provenance.json")
        body = markdown_to_html(table.read_text(), table.parent)
        if slug in stale:
            note = html.escape(stale[slug])
            body = f'<p class="stale"><b>Not rerun by the run that wrote this page</b>: {note}.</p>' + body
        sections.append(f'<section id="{slug}">{body}<p><small>git {html.escape(meta["git_commit"])} · '
                        f'{html.escape(meta["created_utc"])}</small></p></section>')
    claims = results / "claims.md"
    summary = markdown_to_html(claims.read_text(), results) if claims.exists() else ""
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>iclr26 report</title>"
            f"<style>{STYLE}</style></head><body><h1>iclr26: reproduced headline tables</h1>"
            f"<nav>{''.join(nav)}</nav>{overview}{summary}{''.join(sections)}</body></html>\n")
    return atomic_write(out, page)
