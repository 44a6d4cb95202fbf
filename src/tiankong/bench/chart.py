"""Benchmark charts drawn by matplotlib (Agg, no display): PNG files and an SVG inside the HTML report.

A ``Chart`` is a title and panels stacked vertically; a ``Panel`` has series of (x, y) points and vertical
markers (the knee, the recommendation). The x axis is categorical (the measured levels, evenly spaced; a marker
between two levels is placed on a log scale between them), the y axis starts at 0. The figure is exactly
``width`` × ``height(chart)`` pixels.
"""

from __future__ import annotations

import html
import io
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure

DPI = 100
HEADER = 56  # pixels above the first panel: title and subtitle


@dataclass
class Series:
    name: str
    points: list[tuple[float, float]]


@dataclass
class Marker:
    x: float
    label: str


@dataclass
class Panel:
    title: str
    x_label: str
    y_label: str
    series: list[Series]
    markers: list[Marker] = field(default_factory=list)


@dataclass
class Chart:
    title: str
    subtitle: str
    panels: list[Panel]
    width: int = 900
    panel_height: int = 300


def height(chart: Chart) -> int:
    return HEADER + chart.panel_height * len(chart.panels)


def _position(x: float, cats: list[float]) -> float:
    """Index of ``x`` among the categories; between two of them on a log scale; clamped at the ends."""
    if not cats:
        return 0.0
    if x in cats:
        return float(cats.index(x))
    if x <= cats[0]:
        return 0.0
    if x >= cats[-1]:
        return float(len(cats) - 1)
    upper = next(i for i, c in enumerate(cats) if c > x)
    lo, hi = cats[upper - 1], cats[upper]
    fraction = (math.log(x) - math.log(lo)) / (math.log(hi) - math.log(lo)) if lo > 0 else (x - lo) / (hi - lo)
    return upper - 1 + fraction


def _label(value: float) -> str:
    return str(int(value)) if value == int(value) else f"{value:g}"


def _pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend (no display), imported when a chart is drawn: it costs the CLI
    about half a second of start-up otherwise."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    return pyplot


def figure(chart: Chart) -> Figure:
    pyplot = _pyplot()
    total = height(chart)
    fig: Figure = pyplot.figure(figsize=(chart.width / DPI, total / DPI), dpi=DPI)
    fig.suptitle(chart.title, y=1 - 8 / total, fontsize=14)
    fig.text(0.5, 1 - 48 / total, chart.subtitle, ha="center", color="#777777", fontsize=9)
    for index, panel in enumerate(chart.panels):
        top = HEADER + index * chart.panel_height
        # panel box in figure fractions: room for its title, legend and axis labels
        left, right = 72 / chart.width, 1 - 24 / chart.width
        bottom_px, top_px = top + chart.panel_height - 44, top + 48
        axes = fig.add_axes((left, 1 - bottom_px / total, right - left, (bottom_px - top_px) / total))
        cats = sorted({x for s in panel.series for x, _ in s.points})
        for series in panel.series:
            points = sorted((_position(x, cats), y) for x, y in series.points if math.isfinite(y))
            axes.plot([p[0] for p in points], [p[1] for p in points], marker="o", markersize=4, linewidth=2,
                      label=series.name)
        for marker in panel.markers:
            if cats:
                where = _position(marker.x, cats)
                axes.axvline(where, color="#787878", linestyle="--", linewidth=1)
                axes.annotate(marker.label, (where, 1), xycoords=("data", "axes fraction"), xytext=(4, -12),
                              textcoords="offset points", color="#787878", fontsize=8)
        axes.set_xticks(range(len(cats)), [_label(c) for c in cats])
        axes.set_xlim(-0.5, max(0, len(cats) - 1) + 0.5)
        axes.set_ylim(bottom=0)
        axes.grid(axis="y", color="#e1e1e1")
        axes.set_xlabel(panel.x_label, fontsize=9)
        axes.set_ylabel(panel.y_label, fontsize=9)
        axes.set_title(panel.title, loc="left", fontsize=11, pad=18)
        if panel.series:
            axes.legend(loc="lower left", bbox_to_anchor=(0, 1), ncol=max(1, len(panel.series)), fontsize=8,
                        frameon=False, borderaxespad=0.1)
    return fig


def _render(chart: Chart, kind: str) -> bytes:
    fig = figure(chart)
    try:
        buffer = io.BytesIO()
        fig.savefig(buffer, format=kind, dpi=DPI, metadata={"Software": None} if kind == "png" else {"Date": None})
        return buffer.getvalue()
    finally:
        _pyplot().close(fig)


def to_png(chart: Chart) -> bytes:
    return _render(chart, "png")


def to_svg(chart: Chart) -> str:
    """The chart as an ``<svg>`` element (no XML prolog: it is inlined into the HTML report)."""
    text = _render(chart, "svg").decode("utf-8")
    return text[text.index("<svg"):]


def to_html(chart: Chart, rows: list[dict[str, Any]], notes: list[str]) -> str:
    """A self-contained page: title, notes, the chart as inline SVG, the data table."""
    columns = list(rows[0]) if rows else []
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_cell(row.get(c)))}</td>" for c in columns) + "</tr>"
                   for row in rows)
    notes_html = "".join(f"<p>{html.escape(note)}</p>" for note in notes)
    return (f"<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>{html.escape(chart.title)}</title>"
            "<style>body{font-family:sans-serif;margin:24px;color:#222}table{border-collapse:collapse;"
            "font-size:13px}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
            "th{background:#f4f4f4}</style></head><body>"
            f"<h1>{html.escape(chart.title)}</h1><p>{html.escape(chart.subtitle)}</p>{notes_html}"
            f"{to_svg(chart)}<table><tr>{head}</tr>{body}</table></body></html>\n")


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
