"""A paper's table: cells computed from records by the config's `table:` spec, rendered as
Markdown, CSV (tidy: one row per cell) and LaTeX (booktabs)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from .claims import outcome_text, rerun_lines, select
from .errors import ConfigError
from .stats import Estimate, aggregate


@dataclass
class Section:
    name: str
    columns: list[str]
    rows: dict[str, dict[str, Estimate]] = field(default_factory=dict)  # method -> label -> cell
    fmts: dict[str, str] = field(default_factory=dict)
    note: str = ""  # how to read the section; printed before how the cells' intervals were computed


def build_sections(spec: dict, records: pd.DataFrame, methods: list[str]) -> list[Section]:
    sections = []
    for sec in spec.get("sections", []):
        cols = sec.get("columns") or []
        if not cols:
            raise ConfigError(f"table section {sec.get('name')!r} has no columns")
        section = Section(sec.get("name", ""), [c.get("label", c["metric"]) for c in cols], note=sec.get("note", ""))
        for method in sec.get("methods", methods):
            base = select(records, method, sec.get("where"))
            if base.empty:
                continue
            cells = {}
            for col in cols:
                label = col.get("label", col["metric"])
                section.fmts[label] = col.get("fmt", ".3g")
                rows = select(base, method, col.get("where"))
                metric = col["metric"]
                if metric not in rows.columns or rows.empty:
                    continue
                lo = rows[f"{metric}_lo"] if f"{metric}_lo" in rows.columns else None
                hi = rows[f"{metric}_hi"] if f"{metric}_hi" in rows.columns else None
                if col.get("agg") == "fit" and (lo is None or hi is None):
                    raise ConfigError(f"table column {label!r}: agg 'fit' needs the records' own interval "
                                      f"({metric}_lo and {metric}_hi)")
                cells[label] = aggregate(rows[metric].to_numpy(), col.get("agg", "mean"), lo, hi)
            section.rows[method] = cells
        sections.append(section)
    return sections


def _num(x: float, fmt: str) -> str:
    return "n/a" if x is None or not math.isfinite(x) else format(x, fmt)


def cell_text(est: Estimate | None, fmt: str) -> str:
    if est is None:
        return "—"
    value, lo, hi = _num(est.value, fmt), _num(est.lo, fmt), _num(est.hi, fmt)
    if lo == value == hi or not (math.isfinite(est.lo) and math.isfinite(est.hi)):
        return value  # an interval narrower than the printed precision says nothing
    return f"{value} [{lo}, {hi}]"


def _label(method: str, labels: dict) -> str:
    return labels.get(method, method)


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    esc = lambda s: str(s).replace("|", "\\|")  # noqa: E731
    out = ["| " + " | ".join(map(esc, header)) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(map(esc, r)) + " |" for r in rows]
    return out


def deviation_text(item) -> str:
    """One deviation from the paper: a string, or {what, why, post_hoc: <date>} for a change made
    after the first results were read."""
    if isinstance(item, str):
        return item
    text = item["what"] + (f": {item['why']}" if item.get("why") else "")
    return text + (f" (post-hoc, {item['post_hoc']})" if item.get("post_hoc") else "")


def render_markdown(title: str, subtitle: str, sections: list[Section], labels: dict, reported: dict,
                    claims: list[dict], figures: list[str], notes: list[str], deviations: list | None = None,
                    tiny_history: list | None = None) -> str:
    lines = [f"# {title}", "", subtitle, ""]
    for sec in sections:
        if sec.name:
            lines += [f"## {sec.name}", ""]
        rows = [[_label(m, labels)] + [cell_text(cells.get(c), sec.fmts.get(c, ".3g")) for c in sec.columns]
                for m, cells in sec.rows.items()]
        how = "; ".join(sorted({e.how for cells in sec.rows.values() for e in cells.values()}))
        note = f"{sec.note.rstrip('.')}. " if sec.note else ""
        lines += _md_table(["method", *sec.columns], rows) + ["", f"{note}_Cells: {how}._", ""]
    if reported.get("rows"):
        cols = reported.get("columns") or sorted({k for r in reported["rows"].values() for k in r})
        lines += [f"## The paper's numbers ({reported.get('source', 'paper')})", ""]
        rows = [[_label(m, labels)] + [str(r.get(c, "—")) for c in cols] for m, r in reported["rows"].items()]
        lines += _md_table(["method", *cols], rows) + [""]
    real = [c for c in claims if c.get("kind", "claim") != "check"]
    checks = [c for c in claims if c.get("kind", "claim") == "check"]
    for heading, group in (("Claims", real), ("Checks and probes (not the paper's claims; not counted)", checks)):
        if not group:
            continue
        rows = []
        for c in group:
            e = c["estimate"]
            rows.append([c["claim"], c.get("paper", ""), f"{c['compared']}: {cell_text(Estimate(**e), '.3g')}",
                         f"{c['test']} (n={e['n']})", outcome_text(c)])
        how = "; ".join(sorted({c["estimate"].get("how", "") for c in group} - {""}))
        lines += [f"## {heading}", ""] + _md_table(["claim", "paper", "ours", "test", "verdict"], rows)
        lines += ["", f"_Intervals: {how}._", ""] if how else [""]
        if heading == "Claims" and rerun_lines(group):
            lines += ["What would decide the inconclusive claims (seeds needed at the observed effect and spread; "
                      "a rerun on them is a new experiment, its seeds fixed before it runs):", "",
                      *rerun_lines(group), ""]
    if deviations:
        lines += ["## Deviations from the paper", ""] + [f"- {deviation_text(d)}" for d in deviations] + [""]
    if tiny_history:
        lines += ["## Decisions made after reading tiny-scale results", "",
                  "_Listed at every scale so that no post-hoc decision is hidden; those not restated above "
                  "concern the tiny design and may not apply at this scale._", ""]
        lines += [f"- {deviation_text(d)}" for d in tiny_history] + [""]
    if notes:
        lines += ["## Notes", ""] + [f"- {n}" for n in notes] + [""]
    for fig in figures:
        lines += [f"![{fig}]({fig})", ""]
    return "\n".join(lines)


def render_csv(sections: list[Section], labels: dict, reported: dict, scale: str) -> str:
    rows = []
    for sec in sections:
        for method, cells in sec.rows.items():
            for col in sec.columns:
                est = cells.get(col)
                if est is None:
                    continue
                rows.append({"source": f"ours ({scale})", "section": sec.name, "method": method,
                             "method_label": _label(method, labels), "column": col, "value": est.value,
                             "ci_low": est.lo, "ci_high": est.hi, "n": est.n, "how": est.how, "reported": ""})
    for method, cells in (reported.get("rows") or {}).items():
        for col, text in cells.items():
            rows.append({"source": f"paper: {reported.get('source', '')}", "section": "paper", "method": method,
                         "method_label": _label(method, labels), "column": col, "value": float("nan"),
                         "ci_low": float("nan"), "ci_high": float("nan"), "n": 0, "how": "", "reported": str(text)})
    return pd.DataFrame(rows).to_csv(index=False, float_format="%.6g")


_TEX_ESCAPES = {"&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{", "}": r"\}",
                "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "±": r"$\pm$", "κ": r"$\kappa$",
                "δ": r"$\delta$", "ε": r"$\varepsilon$", "‖": r"$\|$", "→": r"$\to$", "≤": r"$\le$"}


def tex_escape(text: str) -> str:
    return "".join(_TEX_ESCAPES.get(ch, ch) for ch in str(text))


def render_latex(caption: str, sections: list[Section], labels: dict) -> str:
    width = max((len(s.columns) for s in sections), default=1)
    lines = [r"% generated by iclr26 tabulate; needs \usepackage{booktabs}", r"\begin{table}[t]", r"\centering",
             rf"\caption{{{tex_escape(caption)}}}", rf"\begin{{tabular}}{{l{'c' * width}}}", r"\toprule"]
    for i, sec in enumerate(sections):
        if i:
            lines.append(r"\midrule")
        if sec.name:
            lines.append(rf"\multicolumn{{{width + 1}}}{{l}}{{\textit{{{tex_escape(sec.name)}}}}} \\")
        header = ["method", *sec.columns] + [""] * (width - len(sec.columns))
        lines.append(" & ".join(tex_escape(h) for h in header) + r" \\")
        lines.append(r"\midrule")
        for method, cells in sec.rows.items():
            vals = [cell_text(cells.get(c), sec.fmts.get(c, ".3g")) for c in sec.columns]
            vals += [""] * (width - len(vals))
            lines.append(" & ".join(tex_escape(v) for v in [_label(method, labels), *vals]) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}", ""]
    return "\n".join(lines)
