"""Benchmark charts without a plotting library: one list of shapes, rendered as SVG (HTML page) and PNG.

A ``Chart`` is a title and panels stacked vertically; a ``Panel`` has series of (x, y) points and vertical
markers (the knee, the recommendation). The x axis is categorical (the measured levels, evenly spaced;
a marker between two levels is placed on a log scale between them), the y axis starts at 0.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from typing import Any

from .png import Canvas, Color

PALETTE: list[Color] = [(31, 119, 180), (214, 39, 40), (44, 160, 44), (255, 127, 14), (148, 103, 189),
                        (140, 86, 75), (227, 119, 194), (23, 190, 207)]
INK: Color = (34, 34, 34)
GRID: Color = (225, 225, 225)
MARK: Color = (120, 120, 120)


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


# --- shapes ---------------------------------------------------------------------------------------


@dataclass
class Line:
    x1: float
    y1: float
    x2: float
    y2: float
    color: Color
    width: float = 1.0
    dash: float = 0.0


@dataclass
class Box:
    x: float
    y: float
    w: float
    h: float
    color: Color


@dataclass
class Dot:
    x: float
    y: float
    r: float
    color: Color


@dataclass
class Label:
    x: float
    y: float
    text: str
    color: Color = INK
    scale: int = 1
    anchor: str = "start"
    vertical: bool = False


Shape = Line | Box | Dot | Label
_HEADER = 56


def fmt_num(value: float) -> str:
    if value == 0 or not math.isfinite(value):
        return "0" if value == 0 else "-"
    size = abs(value)
    if value == int(value) and size < 10000:
        return str(int(value))
    if size >= 10000:
        return f"{value / 1000:.0f}k"
    if size >= 1000:
        return f"{value / 1000:.1f}k"
    if size >= 10:
        return f"{value:.0f}"
    return f"{value:.1f}" if size >= 1 else f"{value:.2f}"


def nice_max(value: float) -> float:
    if not math.isfinite(value) or value <= 0:
        return 1.0
    unit = 10.0 ** math.floor(math.log10(value))
    return float(next(m * unit for m in (1, 2, 2.5, 5, 10) if m * unit >= value * 0.999))


def height(chart: Chart) -> int:
    return _HEADER + chart.panel_height * len(chart.panels)


def draw(chart: Chart) -> list[Shape]:
    shapes: list[Shape] = [Label(chart.width / 2, 26, chart.title, scale=2, anchor="middle"),
                           Label(chart.width / 2, 44, chart.subtitle, color=MARK, anchor="middle")]
    for index, panel in enumerate(chart.panels):
        shapes += _panel(panel, chart.width, _HEADER + index * chart.panel_height, chart.panel_height)
    return shapes


def _panel(panel: Panel, width: int, top: float, panel_h: float) -> list[Shape]:
    left, right, plot_top, bottom = 72.0, width - 24.0, top + 48.0, top + panel_h - 44.0
    shapes: list[Shape] = [Label(left, top + 16, panel.title, scale=2)]
    cats = sorted({x for s in panel.series for x, _ in s.points})
    values = [y for s in panel.series for _, y in s.points if math.isfinite(y)]
    y_max = nice_max(max(values, default=0.0))

    def px(x: float) -> float:
        return left + (right - left) * (_position(x, cats) + 0.5) / max(1, len(cats))

    def py(y: float) -> float:
        return bottom - (bottom - plot_top) * (y / y_max)

    for tick in range(6):
        value = y_max * tick / 5
        shapes += [Line(left, py(value), right, py(value), GRID),
                   Label(left - 6, py(value) + 3, fmt_num(value), anchor="end")]
    shapes += [Line(left, bottom, right, bottom, INK), Line(left, plot_top, left, bottom, INK)]
    for x in cats:
        shapes += [Line(px(x), bottom, px(x), bottom + 4, INK), Label(px(x), bottom + 16, fmt_num(x), anchor="middle")]
    shapes += [Label((left + right) / 2, bottom + 34, panel.x_label, anchor="middle"),
               Label(18, (plot_top + bottom) / 2, panel.y_label, anchor="middle", vertical=True)]
    for marker in panel.markers:
        if cats:
            shapes += [Line(px(marker.x), plot_top, px(marker.x), bottom, MARK, 1.0, 4.0),
                       Label(px(marker.x) + 4, plot_top + 10, marker.label, color=MARK)]
    legend_x = left
    for number, series in enumerate(panel.series):
        color = PALETTE[number % len(PALETTE)]
        shapes += [Box(legend_x, top + 27, 10, 10, color), Label(legend_x + 14, top + 36, series.name)]
        legend_x += 30 + 6 * len(series.name)
        points = [(px(x), py(y)) for x, y in sorted(series.points) if math.isfinite(y)]
        shapes += [Line(a[0], a[1], b[0], b[1], color, 2.0) for a, b in zip(points, points[1:], strict=False)]
        shapes += [Dot(x, y, 3.0, color) for x, y in points]
    return shapes


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


# --- renderers ------------------------------------------------------------------------------------


def to_png(chart: Chart) -> bytes:
    canvas = Canvas(chart.width, height(chart))
    for shape in draw(chart):
        if isinstance(shape, Line):
            canvas.line(shape.x1, shape.y1, shape.x2, shape.y2, shape.color, shape.width, shape.dash)
        elif isinstance(shape, Box):
            canvas.box(shape.x, shape.y, shape.w, shape.h, shape.color)
        elif isinstance(shape, Dot):
            canvas.disc(shape.x, shape.y, shape.r, shape.color)
        else:
            canvas.text(shape.x, shape.y, shape.text, shape.color, shape.scale, shape.anchor, shape.vertical)
    return canvas.to_png()


def _rgb(color: Color) -> str:
    return "#{:02x}{:02x}{:02x}".format(*color)


def to_svg(chart: Chart) -> str:
    w, h = chart.width, height(chart)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
             'font-family="sans-serif">', f'<rect width="{w}" height="{h}" fill="#ffffff"/>']
    for shape in draw(chart):
        if isinstance(shape, Line):
            dash = f' stroke-dasharray="{shape.dash:g}"' if shape.dash else ""
            parts.append(f'<line x1="{shape.x1:.1f}" y1="{shape.y1:.1f}" x2="{shape.x2:.1f}" y2="{shape.y2:.1f}" '
                         f'stroke="{_rgb(shape.color)}" stroke-width="{shape.width:g}"{dash}/>')
        elif isinstance(shape, Box):
            parts.append(f'<rect x="{shape.x:.1f}" y="{shape.y:.1f}" width="{shape.w:.1f}" height="{shape.h:.1f}" '
                         f'fill="{_rgb(shape.color)}"/>')
        elif isinstance(shape, Dot):
            parts.append(f'<circle cx="{shape.x:.1f}" cy="{shape.y:.1f}" r="{shape.r:g}" fill="{_rgb(shape.color)}"/>')
        else:
            anchor = {"start": "start", "middle": "middle", "end": "end"}.get(shape.anchor, "start")
            turn = f' transform="rotate(-90 {shape.x:.1f} {shape.y:.1f})"' if shape.vertical else ""
            parts.append(f'<text x="{shape.x:.1f}" y="{shape.y:.1f}" font-size="{6 + 5 * shape.scale}" '
                         f'fill="{_rgb(shape.color)}" text-anchor="{anchor}"{turn}>{html.escape(shape.text)}</text>')
    return "\n".join(parts + ["</svg>"])


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
