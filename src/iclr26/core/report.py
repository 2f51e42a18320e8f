"""results/report.html: one self-contained page a researcher reads, verdicts first.

The page holds, in order: the summary (one row per paper: scale, seeds, verdict counts), then per paper
its claim list (what the paper claimed in a line, the paper's number, ours with its interval, the verdict
and why), a forest plot of those claims, its tables and figures, and, folded, everything else
(deviations, decisions made after reading results, notes, each claim's full text and test).

It is built from the files tabulate wrote (claims.json, table.md, figures, provenance.json), so it shows
exactly what is in results/; images are embedded, so the file can be mailed or attached as it is.
Markdown is rendered by markdown-it-py; the page has no script and links nothing outside itself.
"""
from __future__ import annotations

import base64
import functools
import html
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from .io import atomic_write, read_json
from .report_forest import OUTCOME_COLOURS, forest_plot_png, margin_value, outcome, reference

CLAIM_WORDS = 20    # the claim list's line of the paper's claim; the full text is folded below it
REASON_WORDS = 28


# ----------------------------------------------------------------------------- style
def _verdict_class(name: str) -> str:
    return "v-" + re.sub(r"[^a-z]+", "-", name.lower()).strip("-")


STYLE = """
*{box-sizing:border-box} html{-webkit-text-size-adjust:100%}
body{font-family:system-ui,sans-serif;max-width:1100px;margin:0 auto;padding:0 1em 3em;color:#222;
 line-height:1.45;overflow-wrap:break-word}
h1{border-bottom:2px solid #333;font-size:1.6em} h2{margin-top:1.6em} section{margin-bottom:3em}
nav{display:flex;flex-wrap:wrap;gap:.2em 1em;padding:.4em 0 .6em;border-bottom:1px solid #ddd}
.scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;margin:.6em 0 1.2em;font-size:.9em}
td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left;vertical-align:top} th{background:#f3f3f3}
td.n{text-align:right} tr.total td{font-weight:600;border-top:2px solid #999}
img{max-width:100%;height:auto} img.figure{border:1px solid #eee;margin:.5em 0}
figure{margin:.8em 0} figcaption{font-size:.85em;color:#555}
.tally{color:#444;font-size:.95em}
ol.claims{list-style:none;padding:0;margin:.6em 0}
li.claim{border-left:5px solid var(--c);background:#fafafa;padding:.45em .8em;margin:.6em 0}
.what{font-weight:600}
.verdict{display:inline-block;color:#fff;background:var(--c);border-radius:3px;padding:0 .45em;
 font-size:.85em;font-weight:600;white-space:nowrap;margin-right:.4em}
dl.nums{display:grid;grid-template-columns:max-content minmax(0,1fr);gap:.05em .8em;margin:.3em 0}
dl.nums dt{color:#666} dl.nums dd{margin:0}
code{font-size:.85em;background:#eef;padding:0 .25em;overflow-wrap:anywhere}
.seeds{margin:.3em 0} details{margin:.35em 0} summary{cursor:pointer;color:#333}
details ul{margin:.3em 0;padding-left:1.2em} .stale{background:#fff4d6;padding:.4em .6em} small{color:#555}
.table-title{font-style:italic;color:#333}
@media (max-width:600px){body{padding:0 .6em 2em} h1{font-size:1.35em} h2{font-size:1.2em}
 li.claim{padding:.4em .55em}}
""" + "".join(f".{_verdict_class(name)}{{--c:{colour}}}" for name, colour in OUTCOME_COLOURS.items())


# ----------------------------------------------------------------------------- Markdown (markdown-it-py)
@functools.lru_cache(maxsize=1)
def markdown_parser():
    """CommonMark with tables; raw HTML in a config's text is escaped, not passed through."""
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": False}).enable("table")

    def table_open(self, tokens, idx, options, env):   # a wide table scrolls inside its box, not the page
        return '<div class="scroll"><table>\n'

    def table_close(self, tokens, idx, options, env):
        return "</table></div>\n"

    md.add_render_rule("table_open", table_open)
    md.add_render_rule("table_close", table_close)
    return md


MIME = {".png": "image/png", ".svg": "image/svg+xml", ".jpg": "image/jpeg", ".jpeg": "image/jpeg"}


def _embed_images(tokens, image_dir: Path) -> None:
    """Each image's file, relative to `image_dir`, becomes a data: URI (the page stands alone); a
    missing file becomes its name in text, so the gap is visible."""
    from markdown_it.token import Token

    for token in tokens:
        for i, child in enumerate(token.children or []):
            if child.type != "image":
                continue
            path = image_dir / str(child.attrGet("src"))
            if path.is_file() and path.suffix.lower() in MIME:
                data = base64.b64encode(path.read_bytes()).decode()
                child.attrSet("src", f"data:{MIME[path.suffix.lower()]};base64,{data}")
                child.attrSet("class", "figure")
            else:
                token.children[i] = Token("text", "", 0, content=f"[figure {child.attrGet('src')} is missing]")


def _shift_headings(tokens, by: int) -> None:
    """The page has its own h1 (and each paper its h2): a file's headings move down `by` levels."""
    for token in tokens:
        if token.type in ("heading_open", "heading_close"):
            token.tag = f"h{min(int(token.tag[1]) + by, 6)}"


def markdown_to_html(markdown: str, image_dir: Path, shift: int = 1) -> str:
    return _render(markdown_parser().parse(markdown), Path(image_dir), shift)


# ----------------------------------------------------------------------------- a paper's table.md, in parts
# The headings tables.render_markdown writes. Its claim tables are replaced by the claim list (built from
# claims.json, which holds the same and more); the parts a reader needs only sometimes are folded.
REPLACED = ("Claims", "Checks and probes")
FOLDED = ("Deviations from the paper", "Decisions made after reading tiny-scale results", "Notes")


@dataclass
class PaperText:
    title: str = ""
    intro: list = field(default_factory=list)     # tokens before the first section (the subtitle)
    shown: list = field(default_factory=list)     # [(heading, tokens)]: the tables, the paper's numbers
    folded: list = field(default_factory=list)    # [(heading, tokens without the heading)]
    figures: list = field(default_factory=list)   # tokens of the paragraphs that are only images


def _is_figure(tokens, i: int) -> bool:
    """tokens[i] opens a paragraph holding images and nothing else."""
    if tokens[i].type != "paragraph_open" or i + 1 >= len(tokens):
        return False
    children = tokens[i + 1].children or []
    return any(c.type == "image" for c in children) and all(
        c.type == "image" or c.type == "softbreak" or (c.type == "text" and not c.content.strip())
        for c in children)


def split_paper_text(markdown: str) -> PaperText:
    """table.md as title, intro, its sections (shown, replaced or folded) and its figures."""
    tokens = markdown_parser().parse(markdown)
    text, body = PaperText(), None
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token.type == "heading_open" and token.tag in ("h1", "h2"):
            title = tokens[i + 1].content
            if token.tag == "h1":
                text.title = title
            else:
                body = _file_section(text, title, tokens[i:i + 3])
            i += 3
        elif _is_figure(tokens, i):   # figures close the file, after whatever section was last
            text.figures += tokens[i:i + 3]
            i += 3
        else:
            (text.intro if body is None else body).append(token)
            i += 1
    text.shown = [(h, b) for h, b in text.shown if len(b) > 3]   # more than the heading
    text.folded = [(h, b) for h, b in text.folded if b]
    return text


def _file_section(text: PaperText, heading: str, heading_tokens: list) -> list:
    """The list a section's tokens go to: shown (with its heading), folded (the heading becomes the
    fold's summary) or a list nobody keeps (the claim tables the claim list replaces)."""
    if heading == REPLACED[0] or heading.startswith(REPLACED[1]):
        return []
    if heading.startswith(FOLDED):
        text.folded.append((heading, []))
        return text.folded[-1][1]
    text.shown.append((heading, list(heading_tokens)))
    return text.shown[-1][1]


def _render(tokens, image_dir: Path, shift: int = 1) -> str:
    md = markdown_parser()
    _embed_images(tokens, image_dir)
    _shift_headings(tokens, shift)
    return md.renderer.render(tokens, md.options, {})


# ----------------------------------------------------------------------------- the claim list
def _fmt(x) -> str:
    try:
        x = float(x)
    except (TypeError, ValueError):
        return "n/a"
    return f"{x:.3g}" if math.isfinite(x) else "n/a"


def short_text(text: str, words: int, first_sentence: bool = True) -> str:
    """A line of `text`: parentheticals dropped, its first sentence, at most `words` words (… if cut)."""
    line = str(text)
    while re.search(r"\s\([^()]*\)", line):   # "(n=80)" goes, "O(1/N)" stays
        line = re.sub(r"\s+\([^()]*\)", "", line)
    if first_sentence:
        line = re.split(r"(?<=[.!?])\s+(?=[A-Z])", line.strip())[0]
    line = re.sub(r"\s+([,;:.])", r"\1", re.sub(r"\s+", " ", line)).strip() or str(text)
    cut = line.split(" ")
    return line if len(cut) <= words else " ".join(cut[:words]).rstrip(",;:") + " …"


def _threshold_text(c: dict) -> str:
    ref = "0 (no difference)" if c.get("baseline") is not None else _fmt(reference(c))
    if c["direction"] == "within":
        return f"within {_fmt(reference(c))} ± {_fmt(c.get('tolerance'))}"
    return f"{'higher' if c['direction'] == 'higher' else 'lower'} than {ref}"


def verdict_reason(c: dict) -> str:
    """Why the verdict: the measured reason when the claim has one, else where its interval lies."""
    if c.get("reason"):
        return str(c["reason"])
    lo, hi = _fmt(c["estimate"].get("lo")), _fmt(c["estimate"].get("hi"))
    interval = f"the 95% interval [{lo}, {hi}]"
    if "n/a" in (lo, hi):
        return "no finite interval"
    if c["verdict"] == "not reproduced (no effect)":
        margin = margin_value(c)
        return f"{interval} rules out an effect that matters" + (f" (margin ± {_fmt(margin)})" if margin else "")
    if c["direction"] == "within":
        band = f"{_fmt(reference(c))} ± {_fmt(c.get('tolerance'))}"
        sides = {"holds": f"lies inside {band}", "not reproduced": f"lies outside {band}",
                 "inconclusive": f"crosses an edge of {band}"}
    else:
        line = "0 (no difference)" if c.get("baseline") is not None else _fmt(reference(c))
        claimed, other = ("above", "below") if c["direction"] == "higher" else ("below", "above")
        sides = {"holds": f"lies wholly {claimed} {line}", "not reproduced": f"lies wholly {other} {line}",
                 "inconclusive": f"straddles {line}"}
    return f"{interval} {sides[c['verdict']]}" if c["verdict"] in sides else ""


def _ours_html(c: dict) -> str:
    est = c["estimate"]
    return (f"<b>{_fmt(est.get('value'))}</b> [{_fmt(est.get('lo'))}, {_fmt(est.get('hi'))}] "
            f"<small>{html.escape(str(c.get('compared', '')))}; {html.escape(str(c.get('test', '')))}, "
            f"n={est.get('n', '?')}</small>")


def _seeds_html(seeds: dict | None) -> str:
    """How many seeds would decide an inconclusive claim, and the command that runs them."""
    if not isinstance(seeds, dict):
        return ""
    text = seeds.get("text") or (f"≈ {seeds['decide']} seeds would decide it" if seeds.get("decide") else "")
    command = f"<br><code>{html.escape(str(seeds['command']))}</code>" if seeds.get("command") else ""
    return f'<p class="seeds">{html.escape(str(text))}{command}</p>' if text or command else ""


def _precondition_text(pre: dict) -> str:
    est = pre.get("estimate") or {}
    what = pre.get("claim") or f"{pre.get('metric')} {pre.get('direction')}"
    return (f"{what}: {pre.get('compared', '')} = {_fmt(est.get('value'))} [{_fmt(est.get('lo'))}, "
            f"{_fmt(est.get('hi'))}], {pre.get('verdict', '?')}")


def _details_items(c: dict, why_shown: str) -> list[str]:
    """Everything about the claim beyond its line: the paper's full words, the test, the notes."""
    est, margin = c["estimate"], c.get("margin")
    items = [f"<b>The paper's claim</b>: {html.escape(str(c['claim']))}",
             f"<b>Tested</b>: {html.escape(str(c.get('compared', '')))} {html.escape(_threshold_text(c))}; "
             f"{html.escape(str(c.get('test', '')))}, n={est.get('n', '?')}"
             + (f"; {html.escape(str(est['how']))}" if est.get("how") else "")]
    if verdict_reason(c) != why_shown:   # the line above was cut: here in full
        items.append(f"<b>Why this verdict</b>: {html.escape(verdict_reason(c))}")
    if margin_value(c):
        why = margin.get("why") if isinstance(margin, dict) else None
        items.append(f"<b>Margin</b> (smallest effect that matters): ± {_fmt(margin_value(c))}"
                     + (f": {html.escape(str(why))}" if why else ""))
    if isinstance(c.get("precondition"), dict):
        items.append(f"<b>Precondition</b>: {html.escape(_precondition_text(c['precondition']))}")
    seeds = c.get("seeds_needed")
    if isinstance(seeds, dict):
        counts = [f"{k.replace('_', ' ')}: {seeds[k]} seeds" for k in ("decide", "no_effect") if seeds.get(k)]
        if counts or seeds.get("capped"):
            items.append("<b>Seeds needed</b>: " + "; ".join(counts)
                         + (" (capped: more than the search tried)" if seeds.get("capped") else ""))
    if c.get("note"):
        items.append(f"<b>Note</b>: {html.escape(str(c['note']))}")
    return items


def claim_html(c: dict) -> str:
    """One claim: verdict and the claim in a line, the paper's number, ours, why; the rest folded."""
    name = outcome(c)
    label = c["verdict"] if name != "check" else f"check: {c['verdict']}"
    why = short_text(verdict_reason(c), REASON_WORDS, first_sentence=False)
    details = "".join(f"<li>{item}</li>" for item in _details_items(c, why))
    return (f'<li class="claim {_verdict_class(name)}">'
            f'<div><span class="verdict">{html.escape(label)}</span>'
            f'<span class="what">{html.escape(short_text(c["claim"], CLAIM_WORDS))}</span></div>'
            f'<dl class="nums"><dt>paper</dt><dd>{html.escape(str(c.get("paper") or "—"))}</dd>'
            f"<dt>ours</dt><dd>{_ours_html(c)}</dd><dt>why</dt><dd>{html.escape(why or '—')}</dd></dl>"
            f"{_seeds_html(c.get('seeds_needed'))}"
            f"<details><summary>full claim, test and notes</summary><ul>{details}</ul></details></li>")


def claim_list_html(claims: list[dict]) -> str:
    """The paper's claims as a list; its checks (not counted) folded under it."""
    real = [c for c in claims if c.get("kind") != "check"]
    checks = [c for c in claims if c.get("kind") == "check"]
    out = f'<ol class="claims">{"".join(claim_html(c) for c in real)}</ol>' if real else ""
    if checks:
        out += (f"<details><summary>Checks and probes ({len(checks)}; not the paper's claims, not counted)"
                f'</summary><ol class="claims">{"".join(claim_html(c) for c in checks)}</ol></details>')
    return out


def tally_text(claims: list[dict]) -> str:
    """'2 holds · 1 inconclusive; 3 checks': the paper's claims by verdict, in the summary's order."""
    names = [o for o in OUTCOME_COLOURS if o != "check"]
    counts = [(sum(outcome(c) == o for c in claims), o) for o in names]
    checks = sum(outcome(c) == "check" for c in claims)
    text = " · ".join(f"{n} {o}" for n, o in counts if n) or "no claims"
    return text + (f"; {checks} check{'s' * (checks != 1)} (not counted)" if checks else "")


# ----------------------------------------------------------------------------- the summary
VERDICT_LEGEND = ("<b>holds</b>: the effect's 95% interval lies on the claimed side of the threshold; "
                  "<b>not reproduced</b>: on the other side; <b>not reproduced (no effect)</b>: inside the "
                  "claim's margin, ruling out an effect that matters; <b>inconclusive</b>: it straddles the "
                  "threshold; <b>untestable here</b>: a precondition fails or there are too few seeds for the "
                  "test (the reason is given). Checks are shown but not counted.")


def summary_html(payloads: list[dict], deviations: dict[str, int], stale: dict[str, str]) -> str:
    """The verdicts at a glance: one row per paper (scale, seeds, outcome counts, deviations), then totals."""
    outcomes = [o for o in OUTCOME_COLOURS if any(outcome(c) == o for p in payloads for c in p["claims"])]
    head = "".join(f'<th class="{_verdict_class(o)}">{html.escape(o)}</th>' for o in outcomes)
    rows, totals = [], [0] * len(outcomes)
    for p in payloads:
        counts = [sum(outcome(c) == o for c in p["claims"]) for o in outcomes]
        totals = [t + n for t, n in zip(totals, counts)]
        cells = "".join(f'<td class="n">{n or ""}</td>' for n in counts)
        tag = " <small>(not rerun)</small>" if p["paper"] in stale else ""
        rows.append(f'<tr><td><a href="#{p["paper"]}" title="{html.escape(str(p.get("title", "")))}">'
                    f'{html.escape(p["paper"])}</a>{tag}</td><td>{html.escape(str(p.get("scale", "")))}</td>'
                    f'<td class="n">{len(p.get("seeds") or [])}</td>{cells}'
                    f'<td class="n">{deviations.get(p["paper"], 0)}</td></tr>')
    total = "".join(f'<td class="n">{n}</td>' for n in totals)
    rows.append(f'<tr class="total"><td>all</td><td></td><td></td>{total}<td class="n">'
                f"{sum(deviations.values())}</td></tr>")
    return (f'<section id="summary"><h2>Summary</h2><p>{VERDICT_LEGEND}</p><div class="scroll"><table>'
            f"<tr><th>paper</th><th>scale</th><th>seeds</th>{head}<th>deviations</th></tr>{''.join(rows)}"
            f"</table></div></section>")


# ----------------------------------------------------------------------------- a paper's section
FOREST_CAPTION = ("Each row is one claim: the dot is our effect, the bar its 95% interval, drawn toward the "
                  "claim from the claim's own threshold (0) and scaled per claim (by its margin or tolerance, "
                  "shaded as ±1, when it has one; else by its interval's far end), so that every claim fits "
                  "one axis.")


def _forest_html(slug: str, claims: list[dict]) -> str:
    if not claims:
        return ""
    data = base64.b64encode(forest_plot_png(claims)).decode()
    return (f'<figure><img class="forest" alt="forest plot of the claims of {html.escape(slug)}" '
            f'src="data:image/png;base64,{data}"><figcaption>{FOREST_CAPTION}</figcaption></figure>')


def _folded_html(heading: str, body: list, image_dir: Path) -> str:
    items = sum(t.type == "list_item_open" for t in body)
    count = f" ({items})" if items else ""
    return f"<details><summary>{html.escape(heading)}{count}</summary>{_render(body, image_dir)}</details>"


def _titles(heading: str, paper_title: str | None, slug: str) -> tuple[str, str]:
    """table.md's heading is '<paper's title> — <the table's title>': the section is headed by the
    paper's title alone, and the table's title goes above its tables."""
    if paper_title and heading.startswith(paper_title):
        return paper_title, heading[len(paper_title):].lstrip(" —-")
    return heading or paper_title or slug, ""


def paper_html(slug: str, folder: Path, payload: dict | None, stale: str | None) -> str:
    """A paper: title, verdict tally, claim list, forest plot, tables, figures, then the folded parts."""
    table = folder / "table.md"
    if not table.exists():
        raise FileNotFoundError(f"{table} is missing; run the tabulate stage first")
    text = split_paper_text(table.read_text())
    claims = (payload or {}).get("claims") or []
    meta = read_json(folder / "provenance.json")
    title, table_title = _titles(text.title, (payload or {}).get("title"), slug)
    parts = [f"<h2>{html.escape(title)}</h2>", _render(text.intro, folder)]
    if stale:
        parts.append(f'<p class="stale"><b>Not rerun by the run that wrote this page</b>: {html.escape(stale)}.</p>')
    parts += [f'<p class="tally">{html.escape(tally_text(claims))}</p>', claim_list_html(claims),
              _forest_html(slug, claims)]
    if table_title:
        parts.append(f'<p class="table-title">Table: {markdown_parser().renderInline(table_title)}</p>')
    parts += [_render(body, folder) for _heading, body in text.shown]
    parts.append(_render(text.figures, folder))
    parts += [_folded_html(heading, body, folder) for heading, body in text.folded]
    parts.append(f"<p><small>git {html.escape(str(meta.get('git_commit', '?')))} · "
                 f"{html.escape(str(meta.get('created_utc', '?')))}</small></p>")
    return f'<section id="{slug}">{"".join(parts)}</section>'


# ----------------------------------------------------------------------------- the page
def _read_results(results: Path, papers: list[str]) -> tuple[dict, dict]:
    """Each paper's claims.json payload and its deviation count (from the config tabulate saved)."""
    import yaml

    payloads, deviations = {}, {}
    for slug in papers:
        if (results / slug / "claims.json").exists():
            payloads[slug] = read_json(results / slug / "claims.json")
        config = results / slug / "config.yaml"
        if config.exists():
            loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)   # libyaml: the configs are long
            deviations[slug] = len((yaml.load(config.read_text(), Loader=loader) or {}).get("deviations") or [])
    return payloads, deviations


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
    payloads, deviations = _read_results(results, papers)
    nav = ['<a href="#summary">summary</a>', *(f'<a href="#{s}">{html.escape(s)}</a>' for s in papers)]
    sections = [paper_html(s, results / s, payloads.get(s), stale.get(s)) for s in papers]
    page = ("<!doctype html><html lang='en'><head><meta charset='utf-8'>"
            "<meta name='viewport' content='width=device-width, initial-scale=1'><title>iclr26 report</title>"
            f"<style>{STYLE}</style></head><body><h1>iclr26: reproduced headline claims</h1>"
            f"<nav>{''.join(nav)}</nav>{summary_html(list(payloads.values()), deviations, stale)}"
            f"{''.join(sections)}</body></html>\n")
    return atomic_write(out, page)
