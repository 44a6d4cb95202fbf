"""A ``dedupe`` job: one whole-data-set step (``kind = "dedupe"``), resumable and exactly-once.

Duplicates are a property of the whole input, so the step cannot write a record's line before it has seen every
record: it reads the input (JSONL or CSV, ``tiankong.dedupe.read_records``), runs ``dedupe_flow`` over all of it and
writes ``OUT`` — one ``{"id", "cluster", "kept", "evidence"}`` line per record, in input order, the bytes of
``tiankong dedupe`` — in one atomic rename (a temporary file beside it, fsynced). Exactly once: ``OUT`` holds every
record once or is not written at all, and the run holds ``OUT.lock`` as every batch run does.

Resumable: the flow's engine calls (embedding batches, the decider's pairs) go through the journal
``OUT.calls.jsonl`` (``batch/journal.py``). A run killed with ``kill -9`` at any moment leaves the journal's whole
lines; the re-run answers those calls from it and asks only the rest, and since the flow is deterministic for the
same answers (fixed MinHash seed, single-threaded index build, sorted pairs) it ends in the same clusters and
writes the same bytes. A run whose ``OUT`` is written and whose report names the same input (sha256) and arguments
does nothing again (``skipped_done``); another input or other arguments start afresh.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from .identity import stored_job
from .inputs import detect_format
from .job import BatchJob
from .kinds import dedupe_options, kind_engine
from .report import BatchReport, RunStats, build_report
from .store import OutputLock, OutputPaths, write_json

if TYPE_CHECKING:
    from ..dedupe.core import DedupeOptions
    from .engines import BatchEngines
    from .runner import ProgressSink


async def run_dedupe(job: BatchJob, *, progress: ProgressSink | None = None,
                     engines: BatchEngines | None = None) -> BatchReport:
    """Run (or resume, or find finished) the dedupe step of ``job``; the report is also ``OUT.report.json``."""
    paths = OutputPaths(Path(job.output))
    paths.check_input(job.input)
    fmt = detect_format(job.input, job.format)
    job.check_task(fmt)
    options = dedupe_options(job)
    paths.output.parent.mkdir(parents=True, exist_ok=True)
    lock = OutputLock(paths)
    try:
        return await _locked(job, fmt, paths, options, progress, engines)
    finally:
        lock.release()


def fingerprint(job: BatchJob, options: DedupeOptions) -> str:
    """The run a journal and a report belong to: the input's bytes, the fields read, the step's arguments and the
    semantic stage's rules (a finished job runs again once after they change)."""
    digest = hashlib.sha256()
    with Path(job.input).open("rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    digest.update(json.dumps([job.id_field, job.text_field, job.args], sort_keys=True, default=str).encode())
    digest.update(repr(options).encode())
    if "semantic" in options.stages:  # which part reads which record, at which cosines (dedupe/parts.py)
        from ..dedupe.parts import rules

        digest.update(rules().encode())
    return digest.hexdigest()


def _finished(paths: OutputPaths, stamp: str) -> dict[str, Any] | None:
    """The step report of a finished run of the same input and arguments (its ``OUT`` still there), else None."""
    if not (paths.output.exists() and paths.report.exists()):
        return None
    try:
        report = json.loads(paths.report.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    step = report.get("step") if isinstance(report, dict) else None
    return step if isinstance(step, dict) and step.get("fingerprint") == stamp else None


async def _locked(job: BatchJob, fmt: str, paths: OutputPaths, options: DedupeOptions,
                  progress: ProgressSink | None, engines: BatchEngines | None) -> BatchReport:
    from ..dedupe.files import read_records

    stats = RunStats()
    stamp = await asyncio.to_thread(fingerprint, job, options)
    records = await asyncio.to_thread(read_records, job.input, field=job.text_field, id_field=job.id_field,
                                      csv_file=fmt == "csv")
    if not records:
        raise ConfigError(f"the input {job.input} has no records (empty input)", hint="nothing to do")
    total = len(records)
    previous = _finished(paths, stamp)
    if previous is not None:
        stats.skipped_done = total
        return _report(job, fmt, paths, stats, total, previous)
    write_json(paths.job, stored_job(job, fmt))
    if progress:
        progress.start(total, 0)
    try:
        step = await _step(job, paths, records, options, stamp, engines)
    finally:
        if progress:
            progress.stop()
    stats.processed = total
    return _report(job, fmt, paths, stats, total, step)


async def _step(job: BatchJob, paths: OutputPaths, records: list[Any], options: DedupeOptions, stamp: str,
                engines: BatchEngines | None) -> dict[str, Any]:
    """The flow over every record through the journal, then ``OUT`` written at once; the step's report."""
    from ..dedupe.core import dedupe_flow
    from ..dedupe.files import no_chat_engine, output_lines, write_atomic
    from ..structured.drivers import run_async, run_sync
    from .engines import BatchEngines
    from .journal import CallJournal, journaled

    journal = CallJournal(paths.calls, stamp)
    spread = None
    if job.ray is not None:  # signatures, bands and the ANN search in partitions on the cluster; this driver writes OUT
        from dataclasses import replace

        from .ray_dedupe import RaySpread

        spread = RaySpread(job.ray)
        options = replace(options, spread=spread)
    try:
        flow = journaled(dedupe_flow(records, options), journal)
        if kind_engine(job).engine:  # a decider that reads the chat engine
            pool = engines or await BatchEngines.open(job)
            try:
                result = await run_async(flow, pool.clients[0]._request)
            finally:
                if engines is None:
                    await pool.close()
        else:
            result = await asyncio.to_thread(run_sync, flow, no_chat_engine)
        await asyncio.to_thread(write_atomic, paths.output, output_lines(result))
    finally:
        journal.close()
        ray = spread.describe() if spread is not None else None
        if spread is not None:
            spread.close()
    calls = {"replayed": journal.replayed, "sent": journal.called, "repaired_bytes": journal.repaired}
    journal.remove()  # OUT is written: a re-run finds it finished
    return {**result.report, "fingerprint": stamp, "calls": calls, **({"ray": ray} if ray else {})}


def _report(job: BatchJob, fmt: str, paths: OutputPaths, stats: RunStats, total: int,
            step: dict[str, Any]) -> BatchReport:
    report = build_report(stats, input=job.input, output=paths.output, fmt=fmt, task="dedupe", total=total,
                          done=total, failed=0, repaired=0, concurrency=1)
    report.step = step
    write_json(paths.report, report.model_dump(mode="json"))
    return report
