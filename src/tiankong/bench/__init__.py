"""Speed and capacity benchmarks against llama-server (managed) or any OpenAI-compatible URL.

* ``speed`` – prompt-processing / generation tokens/s and TTFT vs prompt length, threads and ctx size;
* ``ladder`` – throughput and latency per concurrency level, the knee and a recommended cap;
* ``chart``/``output`` – CSV, JSON, a PNG (matplotlib, Agg) and a self-contained HTML page (inline SVG).

See docs/bench.md for what is measured and the knee rule.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..paths import check_folder
from .common import ServerInfo, check_server
from .ladder import Knee, LadderConfig, LadderReport, StepResult, find_knee, run_ladder
from .output import write_outputs
from .speed import SpeedConfig, SpeedReport, SpeedRow, run_speed


def speed_bench(config: SpeedConfig, out_dir: str | Path | None = None,
                progress: Callable[[str], None] | None = None) -> SpeedReport:
    """Run ``bench speed`` and, with ``out_dir``, write speed.{json,csv,png,html} there."""
    if out_dir is not None:
        check_folder(out_dir)  # before the run: a file there failed only when its results were in
    report = run_speed(config, progress)
    if out_dir is not None:
        write_outputs(report, out_dir)
    return report


def ladder_bench(config: LadderConfig, out_dir: str | Path | None = None,
                 progress: Callable[[str], None] | None = None) -> LadderReport:
    """Run ``bench ladder`` and, with ``out_dir``, write ladder.{json,csv,png,html} there."""
    if out_dir is not None:
        check_folder(out_dir)  # before the run: a file there failed only when its results were in
    report = run_ladder(config, progress)
    if out_dir is not None:
        write_outputs(report, out_dir)
    return report


__all__ = [
    "Knee", "LadderConfig", "LadderReport", "ServerInfo", "SpeedConfig", "SpeedReport", "SpeedRow", "StepResult",
    "check_server", "find_knee", "ladder_bench", "run_ladder", "run_speed", "speed_bench", "write_outputs",
]
