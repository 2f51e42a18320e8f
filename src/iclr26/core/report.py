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


def write_report(papers: list[str], results_dir, out) -> Path:
    results = Path(results_dir)
    sections, nav = [], []
    for slug in papers:
        table = results / slug / "table.md"
        if not table.exists():
            raise FileNotFoundError(f"{table} is missing; run the tabulate stage first")
        nav.append(f'<a href="#{slug}">{slug}</a>')
        meta = read_json(results / slug / "provenance.json")
        body = markdown_to_html(table.read_text(), table.parent)
        sections.append(f'<section id="{slug}">{body}<p><small>git {html.escape(meta["git_commit"])} · '
                        f'{html.escape(meta["created_utc"])}</small></p></section>')
    claims = results / "claims.md"
    summary = markdown_to_html(claims.read_text(), results) if claims.exists() else ""
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>iclr26 report</title>"
            f"<style>{STYLE}</style></head><body><h1>iclr26: reproduced headline tables</h1>"
            f"<nav>{''.join(nav)}</nav>{summary}{''.join(sections)}</body></html>\n")
    return atomic_write(out, page)
