"""Run statistics (constant memory), the final ``BatchReport`` and ``batch status`` / ``batch report``."""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from ..errors import ConfigError
from .inputs import detect_format, prescan, read_items
from .store import OutputPaths, written_keys

RESERVOIR = 10_000


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class BatchReport(BaseModel):
    """What a run did. ``done``/``failed``/``pending`` count unique input ids over all runs so far."""

    input: str
    output: str
    format: str
    task: str
    total: int
    done: int
    failed: int
    pending: int
    complete: bool
    processed: int
    failed_this_run: int
    skipped_done: int
    skipped_failed: int
    malformed: int
    duplicates_skipped: int
    retries: int
    repaired_bytes: int
    concurrency: int
    elapsed_s: float
    items_per_s: float
    tokens: dict[str, int]
    tokens_per_s: float
    latency_s: dict[str, float]
    started_at: str
    finished_at: str
    errors_file: str | None = None
    #: a Ray run: per node (actor) its CPUs, slots, items processed and failed, items/s
    nodes: list[dict[str, Any]] | None = None
    #: what the run wants the user to know (answer-shaping settings changed since the done lines were written)
    notes: list[str] = Field(default_factory=list)
    #: the run was asked for input order; ``reordered``: it rewrote OUT into it (False: already in order)
    keep_order: bool = False
    reordered: bool = False
    #: a whole-data-set step (a ``dedupe`` job): its own report (clusters, stages, the journal's calls)
    step: dict[str, Any] | None = None

    def summary(self) -> str:
        return (f"done {self.done}/{self.total} · failed {self.failed} · {self.processed} processed in "
                f"{self.elapsed_s:.1f} s ({self.items_per_s:.2f} items/s, {self.tokens_per_s:.0f} tokens/s) · "
                f"p50 {self.latency_s.get('p50', 0):.2f} s")


@dataclass
class RunStats:
    """Counters of one run; latencies in a fixed-size reservoir (exact percentiles up to 10,000 items)."""

    total: int = 0
    skipped_done: int = 0
    skipped_failed: int = 0
    processed: int = 0
    failed: int = 0
    malformed: int = 0
    duplicates_skipped: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    #: results and error lines this run has fsynced (``processed``/``failed`` count lines still in the writer's
    #: group too, which a kill -9 loses and the next run answers again)
    durable_results: int = 0
    durable_errors: int = 0
    started: float = field(default_factory=time.monotonic)
    started_at: str = field(default_factory=_now)
    latencies: list[float] = field(default_factory=list)
    _seen_latencies: int = 0
    _rng: random.Random = field(default_factory=lambda: random.Random(0))

    def durable_counts(self) -> tuple[int, int]:
        """(completed, failed) as the output files hold them now: what a resumed run starts from, so counts shown
        from these (the Batch API's ``request_counts``) never go back after a kill."""
        return self.skipped_done + self.durable_results, self.skipped_failed + self.durable_errors

    def add_latency(self, seconds: float) -> None:
        self._seen_latencies += 1
        if len(self.latencies) < RESERVOIR:
            self.latencies.append(seconds)
            return
        slot = self._rng.randrange(self._seen_latencies)
        if slot < RESERVOIR:
            self.latencies[slot] = seconds

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def percentiles(self) -> dict[str, float]:
        values = sorted(self.latencies)
        if not values:
            return {}
        def pick(q: float) -> float:
            return round(values[min(len(values) - 1, int(q * len(values)))], 4)
        return {"p50": pick(0.5), "p90": pick(0.9), "p95": pick(0.95), "p99": pick(0.99),
                "max": round(values[-1], 4), "mean": round(sum(values) / len(values), 4)}


def build_report(stats: RunStats, *, input: str, output: Path, fmt: str, task: str, total: int, done: int,
                 failed: int, repaired: int, concurrency: int, nodes: list[dict[str, Any]] | None = None,
                 keep_order: bool = False, reordered: bool = False) -> BatchReport:
    elapsed = max(stats.elapsed, 1e-9)
    errors = OutputPaths(output).errors
    return BatchReport(
        input=input, output=str(output), format=fmt, task=task, total=total, done=done, failed=failed,
        pending=max(0, total - done - failed), complete=done == total, processed=stats.processed,
        failed_this_run=stats.failed, skipped_done=stats.skipped_done, skipped_failed=stats.skipped_failed,
        malformed=stats.malformed, duplicates_skipped=stats.duplicates_skipped, retries=stats.retries,
        repaired_bytes=repaired, concurrency=concurrency, elapsed_s=round(elapsed, 3),
        items_per_s=round(stats.processed / elapsed, 4),
        tokens={"prompt": stats.prompt_tokens, "completion": stats.completion_tokens, "total": stats.tokens},
        tokens_per_s=round(stats.tokens / elapsed, 2), latency_s=stats.percentiles(),
        started_at=stats.started_at, finished_at=_now(), errors_file=str(errors) if errors.exists() else None,
        nodes=nodes, keep_order=keep_order, reordered=reordered,
    )


class BatchStatus(BaseModel):
    """Where an output file stands against its input (read-only; works while a run is going on)."""

    output: str
    input: str | None
    total: int | None
    done: int
    failed: int
    pending: int | None
    complete: bool | None
    #: why the input's count is unknown (its file is not there: moved, deleted, or a job file unreadable)
    note: str | None = None

    def summary(self) -> str:
        total = "?" if self.total is None else str(self.total)
        pending = "?" if self.pending is None else str(self.pending)
        line = f"done {self.done}/{total} · failed {self.failed} · pending {pending}"
        return line + (f" ({self.note})" if self.note else "")


def read_report(output: str | Path) -> dict[str, Any]:
    """The JSON report of the last finished run on ``output``."""
    path = OutputPaths(Path(output)).report
    if not path.exists():
        raise ConfigError(f"no report for {output} yet (no run on it has finished)",
                          hint=f"see `tiankong batch status {output}`")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read the report {path}: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"the report {path} is not a JSON object")
    return data


def status(output: str | Path, input: str | None = None) -> BatchStatus:
    """Counts of done and failed ids in ``output`` and, when the input is known, of the input's ids."""
    paths = OutputPaths(Path(output))
    if not paths.output.exists() and not paths.job.exists():
        raise ConfigError(f"{output} does not exist", hint="start it with `tiankong batch run`")
    done = written_keys(paths.output, strict=False)
    failed = len(written_keys(paths.errors, strict=False) - done)
    if input is not None and not Path(input).exists():
        raise ConfigError(f"the input {input} is not there", hint="check the --input path")
    spec = saved_job(paths.job)
    source = input or spec.get("input")
    total, note = None, None
    if source and Path(source).exists():
        fmt = detect_format(source, str(spec.get("format", "auto")) if not input else "auto")
        items = read_items(source, fmt, str(spec.get("id_field", "id")), str(spec.get("text_field", "text")))
        total = prescan(items, []).unique
    elif source:
        note = f"the job's input {source} is not there: pass --input to count it"
    else:
        note = f"{paths.job.name} is missing or unreadable: pass --input to count the input"
    pending = None if total is None else max(0, total - len(done) - failed)
    return BatchStatus(output=str(output), input=source, total=total, done=len(done), failed=failed,
                       pending=pending, complete=None if total is None else len(done) >= total, note=note)


def saved_job(path: Path) -> dict[str, Any]:
    """``OUT.job.json`` as written ({} when it is missing or unreadable)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
