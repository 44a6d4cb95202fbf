"""``eval report``: a comparison as Markdown and as one self-contained HTML page (inline CSS and SVG chart)."""

from __future__ import annotations

import html
from collections import Counter

from .compare import CLASSES, MB, CandidateDiff, Comparison

SHOWN_CLASSES = ("wrong", "improved", "length_anomaly", "degraded")
MAX_ITEMS = 40
COLORS = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948")


def _mb(value: int | None) -> str:
    return f"{value / MB:.0f}" if value else "–"


def _pct(value: float) -> str:
    return f"{100 * value:.1f}"


def _tag_counts(comparison: Comparison) -> Counter[str]:
    counts: Counter[str] = Counter()
    for item in comparison.candidates[0].items:
        counts.update(item.tags or ["(untagged)"])
    return counts


def model_table(comparison: Comparison) -> tuple[list[str], list[list[str]]]:
    head = ["model", "accuracy %", "mean score", "failed", "s / item", "generated tokens / s", "peak RSS MB", "file MB"]
    rows = [[m.name + (" (baseline)" if m.name == comparison.baseline else ""), _pct(m.accuracy),
             f"{m.mean_score:.3f}", str(m.failed), f"{m.seconds_per_item:.2f}", f"{m.tokens_per_s:.1f}",
             _mb(m.peak_rss_bytes), _mb(m.model_bytes)] for m in comparison.models]
    return head, rows


def tag_table(comparison: Comparison) -> tuple[list[str], list[list[str]]]:
    counts = _tag_counts(comparison)
    head = ["tag", "items", *(m.name for m in comparison.models)]
    rows = [[tag, str(n), *(_pct(m.per_tag.get(tag, 0.0)) for m in comparison.models)]
            for tag, n in sorted(counts.items())]
    return head, rows


def class_table(comparison: Comparison) -> tuple[list[str], list[list[str]]]:
    head = ["candidate", "Δ accuracy (points)", "95 % CI", *CLASSES, "both wrong"]
    rows = [[c.name, f"{c.diff_points:+.1f}", f"[{c.ci_points[0]:+.1f}, {c.ci_points[1]:+.1f}]",
             *(str(c.counts[k]) for k in CLASSES), str(c.both_wrong)] for c in comparison.candidates]
    return head, rows


def item_table(candidate: CandidateDiff) -> tuple[list[str], list[list[str]]]:
    head = ["id", "class", "baseline score", "candidate score", "length ratio", "baseline output", "candidate output"]
    changed = [i for i in candidate.items if i.cls in SHOWN_CLASSES]
    changed.sort(key=lambda i: SHOWN_CLASSES.index(i.cls))
    rows = [[i.id, i.cls, f"{i.baseline_score:.2f}", f"{i.candidate_score:.2f}",
             f"{i.length_ratio:.2f}" if i.length_ratio is not None else "–", _short(i.baseline_text),
             _short(i.candidate_text)] for i in changed[:MAX_ITEMS]]
    return head, rows


def _short(text: str, limit: int = 100) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


# --- Markdown ----------------------------------------------------------------------------------------


def _md_table(head: list[str], rows: list[list[str]]) -> str:
    def cell(value: str) -> str:
        return value.replace("|", "\\|")

    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def to_markdown(comparison: Comparison) -> str:
    parts = [f"# Eval: {comparison.set_path}", "",
             f"{comparison.items} items; baseline **{comparison.baseline}**.", "",
             f"**Decision: {comparison.decision}.**", "", f"Rule: {comparison.rule}.", "",
             "## Models", "", _md_table(*model_table(comparison)), "",
             "## Accuracy per tag (%)", "", _md_table(*tag_table(comparison)), "",
             "## Per-item differences against the baseline", "", _md_table(*class_table(comparison)), ""]
    for candidate in comparison.candidates:
        head, rows = item_table(candidate)
        parts += [f"### {candidate.name}: items that changed", ""]
        parts += [_md_table(head, rows) if rows else "None.", ""]
    return "\n".join(parts)


# --- HTML --------------------------------------------------------------------------------------------


def _html_table(head: list[str], rows: list[list[str]]) -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def chart_svg(comparison: Comparison) -> str:
    """Grouped bars: accuracy per tag (and overall) for every model."""
    groups = ["all", *sorted(_tag_counts(comparison))]
    models = comparison.models
    bar, gap, height, top, left = 18, 22, 200, 20, 40
    group_w = bar * len(models) + gap
    width = left + group_w * len(groups) + 10
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height + top + 44 + 15 * len(models)}" '
           f'role="img" aria-label="accuracy per tag">']
    for pct in (0, 25, 50, 75, 100):
        y = top + height * (1 - pct / 100)
        out.append(f'<line x1="{left}" x2="{width}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>'
                   f'<text x="{left - 4}" y="{y + 4:.1f}" font-size="10" text-anchor="end">{pct}</text>')
    for g, group in enumerate(groups):
        x0 = left + g * group_w + gap / 2
        for m, model in enumerate(models):
            value = model.accuracy if group == "all" else model.per_tag.get(group, 0.0)
            h = height * value
            out.append(f'<rect x="{x0 + m * bar:.1f}" y="{top + height - h:.1f}" width="{bar - 2}" height="{h:.1f}" '
                       f'fill="{COLORS[m % len(COLORS)]}"><title>{html.escape(model.name)} · {html.escape(group)}: '
                       f'{_pct(value)} %</title></rect>')
        out.append(f'<text x="{x0 + bar * len(models) / 2:.1f}" y="{top + height + 14}" font-size="11" '
                   f'text-anchor="middle">{html.escape(group)}</text>')
    for m, model in enumerate(models):
        y, x = top + height + 34 + 15 * m, left
        out.append(f'<rect x="{x}" y="{y - 9}" width="10" height="10" fill="{COLORS[m % len(COLORS)]}"/>'
                   f'<text x="{x + 14}" y="{y}" font-size="11">{html.escape(model.name)}</text>')
    out.append("</svg>")
    return "".join(out)


STYLE = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:14px}th,td{border:1px solid #ccc;padding:3px 8px;
text-align:left;vertical-align:top}th{background:#f3f3f3}.decision{background:#eef6ee;border-left:4px solid #59a14f;
padding:.6em 1em}"""


def to_html(comparison: Comparison) -> str:
    esc = html.escape
    parts = ["<!doctype html><html><head><meta charset='utf-8'>",
             f"<title>Eval: {esc(comparison.set_path)}</title><style>{STYLE}</style></head><body>",
             f"<h1>Eval: {esc(comparison.set_path)}</h1>",
             f"<p>{comparison.items} items; baseline <b>{esc(comparison.baseline)}</b>.</p>",
             f"<p class='decision'><b>Decision: {esc(comparison.decision)}.</b><br>Rule: {esc(comparison.rule)}.</p>",
             "<h2>Accuracy per tag</h2>", chart_svg(comparison),
             "<h2>Models</h2>", _html_table(*model_table(comparison)),
             "<h2>Accuracy per tag (%)</h2>", _html_table(*tag_table(comparison)),
             "<h2>Per-item differences against the baseline</h2>", _html_table(*class_table(comparison))]
    for candidate in comparison.candidates:
        head, rows = item_table(candidate)
        parts.append(f"<h3>{esc(candidate.name)}: items that changed</h3>")
        parts.append(_html_table(head, rows) if rows else "<p>None.</p>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(comparison: Comparison, *, html_path: str | None = None, md_path: str | None = None) -> list[str]:
    """Write the Markdown and/or HTML report; returns the paths written."""
    from pathlib import Path

    written = []
    for path, render in ((md_path, to_markdown), (html_path, to_html)):
        if path:
            target = Path(path)
            target.write_text(render(comparison), encoding="utf-8")
            written.append(str(target))
    return written


def check_report_paths(html_path: str | None, md_path: str | None, runs: list[str] | None = None) -> None:
    """Before anything is read: each path writable, not both the same file (the HTML overwrote the Markdown, and
    both were reported written), and neither a run file it reads (`--md quant/q41.json` replaced that run)."""
    from pathlib import Path

    from ..errors import ConfigError
    from ..paths import check_distinct, check_output

    if html_path and md_path and Path(html_path).resolve() == Path(md_path).resolve():
        raise ConfigError("--md and --html name the same file", hint="give each its own path", param="html")
    files = [p for run in runs or [] for p in (sorted(Path(run).glob("*.json")) if Path(run).is_dir() else [run])]
    check_distinct({"--md": md_path, "--html": html_path}, {f"the run file {f}": f for f in files})
    for path, what in ((md_path, "--md"), (html_path, "--html")):
        if path:
            check_output(path, what)


def report_files(paths: list[str], *, baseline: str | None = None, tolerance_points: float = 2.0,
                 html_path: str | None = None, md_path: str | None = None) -> tuple[Comparison, list[str]]:
    """Compare run files and write the report(s): ``eval report``."""
    from .compare import compare_files

    check_report_paths(html_path, md_path, paths)
    comparison = compare_files(paths, baseline=baseline, tolerance_points=tolerance_points)
    return comparison, write_report(comparison, html_path=html_path, md_path=md_path)
