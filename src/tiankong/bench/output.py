"""Write a benchmark report: ``<kind>.json`` (everything), ``<kind>.csv`` (the table), ``<kind>.png`` and
``<kind>.html`` (chart + table, self-contained)."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .chart import Chart, Marker, Panel, Series, to_html, to_png
from .ladder import LadderReport
from .speed import SpeedReport


def write_outputs(report: SpeedReport | LadderReport, out_dir: str | Path) -> list[Path]:
    """Write the four files into ``out_dir`` (created); returns their paths and records them in the report."""
    folder = Path(out_dir).expanduser()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the output folder {folder}: {exc.strerror}",
                          hint="pass another --out") from None
    rows = table_rows(report)
    chart = speed_chart(report) if isinstance(report, SpeedReport) else ladder_chart(report)
    paths = {ext: folder / f"{report.kind}.{ext}" for ext in ("json", "csv", "png", "html")}
    report.files = [str(p) for p in paths.values()]
    paths["json"].write_text(report.model_dump_json(indent=2) + "\n", encoding="utf-8")
    _write_csv(paths["csv"], rows)
    paths["png"].write_bytes(to_png(chart))
    paths["html"].write_text(to_html(chart, rows, notes(report)), encoding="utf-8")
    return list(paths.values())


def table_rows(report: SpeedReport | LadderReport) -> list[dict[str, Any]]:
    if isinstance(report, SpeedReport):
        return [row.model_dump(mode="json") for row in report.rows]
    return [{k: v for k, v in step.model_dump(mode="json").items() if k != "error_codes"} for step in report.steps]


def _write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        if not rows:
            return
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def notes(report: SpeedReport | LadderReport) -> list[str]:
    machine = f"{report.cpu_count} CPUs, load average {report.load_avg_1m:.1f} at the start"
    if isinstance(report, SpeedReport):
        return [f"{report.model}: median of {report.config.repeats} runs per cell, "
                f"{report.config.gen_tokens} generated tokens per run; {machine}; {report.duration_s:.0f} s."]
    lines = [f"{report.model} ({report.server_kind}, slots {report.slots or '?'}): "
             f"{report.config.max_tokens} tokens per request; {machine}; {report.duration_s:.0f} s."]
    if report.knee:
        knee = report.knee
        head = f"knee at concurrency {knee.concurrency}" if knee.found else "no knee found"
        lines.append(f"{head}; recommended concurrency cap {knee.recommended}. {knee.reason}.")
    return lines


def speed_chart(report: SpeedReport) -> Chart:
    groups: dict[str, list[Any]] = {}
    for row in report.rows:
        if row.source == "llama-server":
            name = f"{row.threads or '?'} threads, ctx {row.ctx or '?'}"
            groups.setdefault(name, []).append(row)
    bench_pp = [r for r in report.rows if r.source == "llama-bench" and r.pp_tok_s is not None]
    pp = [Series(name, [(r.prompt_tokens, _v(r.pp_tok_s)) for r in rows]) for name, rows in groups.items()]
    pp += [Series(f"llama-bench t={t}", [(r.prompt_tokens, _v(r.pp_tok_s)) for r in bench_pp if r.threads == t])
           for t in sorted({r.threads or 0 for r in bench_pp})]
    tg = [Series(name, [(r.prompt_tokens, _v(r.tg_tok_s)) for r in rows]) for name, rows in groups.items()]
    ttft = [Series(name, [(r.prompt_tokens, _v(r.ttft_s) * 1000) for r in rows]) for name, rows in groups.items()]
    return Chart(title=f"tiankong bench speed: {report.model}", subtitle=f"{report.started_at}, median of "
                 f"{report.config.repeats} runs", panels=[
                     Panel("Prompt processing", "prompt tokens", "tokens/s", pp),
                     Panel("Generation", "prompt tokens", "tokens/s", tg),
                     Panel("Time to first token", "prompt tokens", "ms", ttft)])


def ladder_chart(report: LadderReport) -> Chart:
    steps = report.steps
    markers: list[Marker] = []
    if report.knee and report.knee.concurrency:
        markers.append(Marker(report.knee.concurrency, f"knee {report.knee.concurrency}"))
    if report.knee:
        markers.append(Marker(report.knee.recommended, f"cap {report.knee.recommended}"))
    throughput = [Series("tokens/s", [(s.concurrency, s.tok_per_s) for s in steps])]
    requests = [Series("requests/s", [(s.concurrency, s.req_per_s) for s in steps])]
    latency = [Series(name, [(s.concurrency, getattr(s, key)) for s in steps]) for name, key in (
        ("latency p50", "latency_p50_s"), ("latency p99", "latency_p99_s"), ("TTFT p50", "ttft_p50_s"),
        ("TTFT p99", "ttft_p99_s"))]
    return Chart(title=f"tiankong bench ladder: {report.model}", subtitle=f"{report.started_at}, slots "
                 f"{report.slots or '?'}, {report.config.max_tokens} tokens per request", panels=[
                     Panel("Throughput", "concurrent requests", "tokens/s", throughput, markers),
                     Panel("Requests", "concurrent requests", "requests/s", requests, markers),
                     Panel("Latency", "concurrent requests", "seconds", latency, markers)])


def _v(value: float | None) -> float:
    return math.nan if value is None else value


def dump(report: SpeedReport | LadderReport) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(report.model_dump_json())
    return data
