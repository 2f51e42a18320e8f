"""The report's forest plot: one small figure per paper, one row per claim, every interval on one axis.

Claims have different units (accuracy points, seconds, parameter counts), so each row is scaled before
it is drawn. The x axis is the effect *toward the claim*, measured from the claim's own threshold:

    x = sign * (estimate - reference) / scale

- reference: 0 for a method - baseline comparison, else the claim's `value`;
- sign: +1 for `higher`, -1 for `lower`, so the claimed side is always to the right of 0;
- scale: the claim's `margin` (the smallest effect that matters) when it has one, so the margin band is
  [-1, 1]; else the farthest end of its interval from the threshold, so the interval ends at +-1.
- `within` claims: x = (estimate - reference) / tolerance, so their tolerance band is [-1, 1].

A verdict is then read the same way on every row: the interval right of 0 (holds), left of 0 (not
reproduced), across 0 (inconclusive), inside the margin band (no effect). Rows scaled by a margin or a
tolerance can run farther than +-1; the axis stretches to fit them up to +-X_CAP, and a row running past
that ends in an arrow at the edge.
"""
from __future__ import annotations

import io
import math
from dataclasses import dataclass

OUTCOME_COLOURS = {"holds": "#0a6b2d", "not reproduced": "#a31515", "not reproduced (no effect)": "#7a3e9d",
                   "inconclusive": "#8a6d00", "untestable here": "#6b6b6b", "check": "#1f4e9c"}
X_CAP = 4.0
X_LABEL = "effect toward the claim, from its threshold at 0 (scaled per claim: margin, tolerance or interval)"


def outcome(claim: dict) -> str:
    """The colour class of a claim: its verdict, or 'check' for a check (not counted)."""
    return "check" if claim.get("kind") == "check" else claim["verdict"]


def _number(x) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


def margin_value(claim: dict) -> float | None:
    """The claim's margin as a positive number, or None when it has none (or a useless one)."""
    margin = claim.get("margin")
    value = abs(_number(margin.get("value") if isinstance(margin, dict) else margin))
    return value if math.isfinite(value) and value > 0 else None


def reference(claim: dict) -> float:
    """The threshold the effect is compared with: 0 for a comparison with a baseline, else `value`."""
    if claim.get("baseline") is not None or claim.get("value") is None:
        return 0.0
    return _number(claim["value"])


@dataclass
class Row:
    label: str
    lo: float      # scaled; nan when the claim has no interval
    value: float
    hi: float
    outcome: str
    band: str | None   # "margin" or "tolerance": a band [-1, 1] drawn behind the row


def forest_row(claim: dict) -> Row:
    est = claim["estimate"]
    ref = reference(claim)
    raw = [_number(est.get(k)) - ref for k in ("lo", "value", "hi")]
    finite = [abs(x) for x in raw if math.isfinite(x)]
    far_end = max(finite, default=0.0) or abs(ref) or 1.0
    label = ("check: " if claim.get("kind") == "check" else "") + str(claim["id"])
    if claim["direction"] == "within":
        tolerance = abs(_number(claim.get("tolerance")))
        has_band = math.isfinite(tolerance) and tolerance > 0
        lo, value, hi = (x / (tolerance if has_band else far_end) for x in raw)
        return Row(label, lo, value, hi, outcome(claim), "tolerance" if has_band else None)
    margin = margin_value(claim)
    sign = -1.0 if claim["direction"] == "lower" else 1.0
    lo, value, hi = (sign * x / (margin or far_end) for x in raw)
    if sign < 0:
        lo, hi = hi, lo
    return Row(label, lo, value, hi, outcome(claim), "margin" if margin else None)


def x_limit(rows: list[Row]) -> float:
    """Half the axis: wide enough for every finite end, at least the band, at most X_CAP."""
    ends = [abs(x) for r in rows for x in (r.lo, r.value, r.hi) if math.isfinite(x)]
    return min(max([1.0, *ends]) * 1.08, X_CAP)


BAND_STYLE = {"margin": {"color": "#cccccc", "label": "± margin (smallest effect that matters)"},
              "tolerance": {"color": "#cfe3cf", "label": "± tolerance (a 'within' claim)"}}


def _draw_row(ax, y: int, row: Row, limit: float) -> None:
    colour = OUTCOME_COLOURS.get(row.outcome, "#000000")
    if row.band:
        ax.fill_between([-1, 1], y - 0.4, y + 0.4, color=BAND_STYLE[row.band]["color"], lw=0, zorder=0)
    if math.isfinite(row.lo) and math.isfinite(row.hi):
        ax.plot([max(row.lo, -limit), min(row.hi, limit)], [y, y], color=colour, lw=2.2, solid_capstyle="butt")
        for end, marker in ((row.lo, "<"), (row.hi, ">")):   # runs off the axis: an arrow at the edge
            if abs(end) > limit:
                ax.plot(math.copysign(limit, end), y, marker, color=colour, ms=7, clip_on=False)
    if math.isfinite(row.value):
        if abs(row.value) <= limit:
            ax.plot(row.value, y, "o", color=colour, ms=5, zorder=3)
    else:
        ax.text(0.05 * limit, y, "no estimate", va="center", fontsize=7, color=colour)


def _legend_handles(rows: list[Row]):
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    present = {r.outcome for r in rows}
    handles = [Line2D([], [], color=c, lw=2.2, marker="o", ms=5, label=o)
               for o, c in OUTCOME_COLOURS.items() if o in present]
    bands = {r.band for r in rows} - {None}
    handles += [Patch(color=BAND_STYLE[b]["color"], label=BAND_STYLE[b]["label"]) for b in BAND_STYLE if b in bands]
    return handles


def _layout(fig, ax, labels: list[str], legend_lines: int) -> None:
    """Margins measured from the tick labels' own widths: one draw (a layout engine draws twice)."""
    renderer = fig.canvas.get_renderer()
    width, height = fig.get_size_inches()
    widest = max((renderer.get_text_width_height_descent(t, ax.yaxis.get_major_ticks()[0].label1._fontproperties,
                                                          ismath=False)[0] for t in labels), default=0.0)
    left = widest / fig.dpi + 0.2
    bottom = 0.5 + 0.2 * legend_lines    # x tick labels, the x label, the legend
    fig.subplots_adjust(left=left / width, right=1 - 0.25 / width, top=1 - 0.1 / height, bottom=bottom / height)


def forest_plot_png(claims: list[dict]) -> bytes:
    """One paper's claims (then its checks) as rows, first claim at the top; height grows with the
    row count and the axis is the rows' own, so there is no empty band and no clipped interval."""
    from .figures import pyplot

    ordered = [c for c in claims if c.get("kind") != "check"] + [c for c in claims if c.get("kind") == "check"]
    rows = [forest_row(c) for c in ordered]
    limit = x_limit(rows)
    handles = _legend_handles(rows)
    columns = min(4, len(handles))
    legend_lines = math.ceil(len(handles) / columns)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8.0, 0.3 * len(rows) + 0.65 + 0.2 * legend_lines), dpi=110)
    for y, row in enumerate(rows):
        _draw_row(ax, y, row, limit)
    checks = sum(r.label.startswith("check: ") for r in rows)
    if 0 < checks < len(rows):   # a rule between the claims and the checks (not counted)
        ax.axhline(len(rows) - checks - 0.5, color="#999999", lw=0.6, ls=":")
    ax.axvline(0.0, color="#222222", lw=1)
    ax.set_xlim(-limit, limit)
    ax.set_ylim(len(rows) - 0.5, -0.5)   # rows fill the axes: no blank band
    ax.set_yticks(range(len(rows)), [r.label for r in rows], fontsize=8)
    ax.tick_params(axis="x", labelsize=8)
    ax.set_xlabel(X_LABEL, fontsize=8)
    ax.grid(axis="x", color="#eeeeee", lw=0.6)
    ax.set_axisbelow(True)
    fig.legend(handles=handles, loc="lower center", ncol=columns, fontsize=7, frameon=False,
               bbox_to_anchor=(0.5, 0.0), borderaxespad=0.2)
    _layout(fig, ax, [r.label for r in rows], legend_lines)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return buffer.getvalue()
