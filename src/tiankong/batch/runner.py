"""``tiankong.batch.run``: stream the input through the engine with a bounded number of items in flight.

Order of work: detect the format → one pass over the ids (count, duplicates, missing fields) → repair a torn
last line in the output files → read the ids already done or failed → run. A producer reads the input one
record at a time into a queue of at most ``2 × concurrency`` items; ``concurrency`` workers take items, run
the task and hand the line to an appender (whole lines, fsynced in small groups). An item whose engine is
unreachable is retried with backoff while the outage lasts less than ``engine_wait_s``; past that the run
stops (finished items are kept; re-running continues).

Exactly once: the run holds ``OUT.lock`` while it writes (a second run of the same output is refused), each id
is handed to one worker once, and every result goes through the store's ``OutputWriter``, which refuses (and
logs as a defect) a second result for an id already written — so no id is ever written twice, whatever happens
to its engine requests.

Order: lines are appended as items finish (completion order). With ``keep_order`` a run that finishes then puts
``OUT`` in input order with one atomic rewrite (``store.put_in_order``, which says why it is done that way and not
by holding results back): the writing, and so the exactly-once rules, stay those of an unordered run.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from pathlib import Path
from typing import Any, Protocol

from ..errors import ConfigError, EngineError, TiankongError, TransportError
from ..paths import check_output
from . import openai_fmt
from .engines import BatchEngines, unreachable
from .identity import changed_settings, stored_job
from .inputs import Item, Scan, check_scan, detect_format, job_items, prescan
from .job import BatchJob
from .ray_exec import RayEngines
from .report import BatchReport, RunStats, build_report, saved_job
from .store import (
    Appender,
    OutputLock,
    OutputPaths,
    OutputWriter,
    compact_errors,
    put_in_order,
    repair,
    write_json,
    written_keys,
)
from .tasks import METER, Meter, MeteredClient, run_task

MAX_BACKOFF_S = 2.0


class ProgressSink(Protocol):
    def start(self, total: int, completed: int) -> None: ...
    def update(self, stats: RunStats, completed: int) -> None: ...
    def stop(self) -> None: ...


def run(job: BatchJob, *, progress: ProgressSink | None = None, executor: str = "local",
        keep_order: bool | None = None) -> BatchReport:
    """Run (or resume) a batch job to the end; returns the report (also written to ``OUT.report.json``).
    ``executor="ray"``: on the Ray cluster of ``job.ray`` (default: a one-machine cluster; ``ray_exec.py``).
    ``keep_order=True`` (or the job's ``keep_order``): ``OUT`` ends in input order (completion order otherwise)."""
    if executor not in ("local", "ray"):
        raise ConfigError(f"unknown executor {executor!r}", hint="use executor=\"local\" or \"ray\"")
    if executor == "ray" and job.ray is None:
        job = job.model_copy(update={"ray": "local"})
    return asyncio.run(arun(job, progress=progress, keep_order=keep_order))


async def arun(job: BatchJob, *, progress: ProgressSink | None = None, engines: BatchEngines | None = None,
               keep_order: bool | None = None) -> BatchReport:
    """``run`` in a running event loop; ``engines``: run on these (the caller opens and closes them) instead of
    the job's own. Cancelling it keeps every finished item (whole lines are flushed on the way out)."""
    if keep_order is not None and keep_order != job.keep_order:
        job = job.model_copy(update={"keep_order": keep_order})
    check_output(job.output)  # before the lock, the journal or any engine: not at the end of the run
    if job.kind == "dedupe":  # one step over the whole data set, not one task call per record
        from .whole import run_dedupe  # noqa: PLC0415

        return await run_dedupe(job, progress=progress, engines=engines)
    paths = OutputPaths(Path(job.output))
    paths.check_input(job.input)
    fmt = detect_format(job.input, job.format)
    job.check_task(fmt)
    scan = await asyncio.to_thread(prescan, job_items(job, fmt), job.required_fields())
    check_scan(scan, job)
    paths.output.parent.mkdir(parents=True, exist_ok=True)
    lock = OutputLock(paths)  # one run writes an output at a time
    try:
        return await _locked_run(job, fmt, paths, scan, progress, engines)
    finally:
        lock.release()


async def _locked_run(job: BatchJob, fmt: str, paths: OutputPaths, scan: Scan, progress: ProgressSink | None,
                      engines: BatchEngines | None) -> BatchReport:
    total = scan.unique
    stored = stored_job(job, fmt)
    paths.check_same_job(stored)  # before anything of OUT is touched
    repaired = repair(paths.output) + repair(paths.errors)
    paths.ordering.unlink(missing_ok=True)  # a copy a killed run was putting in order: OUT is still whole
    writer = OutputWriter(paths.output, job.fsync_every)
    failed_before = written_keys(paths.errors) - writer.written.keys()
    changed = changed_settings(saved_job(paths.job), stored) if writer.written else []
    write_json(paths.job, stored)
    batch = _Batch(job, fmt, paths, writer, failed_before, progress)
    pool: BatchEngines | RayEngines
    if engines is not None:
        pool = engines
    elif job.ray is not None:
        pool = await RayEngines.open(job, fmt)
    else:
        pool = await BatchEngines.open(job)
    try:
        concurrency = job.concurrency or await pool.slots()
        await batch.go(pool, concurrency, total)
    finally:
        batch.close()
        if engines is None:
            await pool.close()
    reordered = False
    if job.keep_order:  # only after a run that finished: a stopped one leaves completion order to the next run
        keys = (item.key for item in job_items(job, fmt))
        reordered = await asyncio.to_thread(put_in_order, paths.output, keys, paths.ordering)
    failed = compact_errors(paths.errors, batch.done, scan.malformed_keys)
    report = build_report(batch.stats, input=job.input, output=paths.output, fmt=fmt, task=job.step or "openai",
                          total=total, done=len(batch.done), failed=failed, repaired=repaired,
                          concurrency=concurrency, nodes=pool.describe() if isinstance(pool, RayEngines) else None,
                          keep_order=job.keep_order, reordered=reordered)
    if changed and batch.stats.skipped_done:  # a re-run with new labels printed "done 5/5" and changed nothing
        report.notes.append(f"{', '.join(changed)} changed since the done lines were written: those "
                            f"{batch.stats.skipped_done} keep their answers; write to another --output to answer "
                            "every line with the new settings")
    write_json(paths.report, report.model_dump(mode="json"))
    return report


def count_input(job: BatchJob) -> int:
    """Distinct ids in the job's input (one pass, ids only)."""
    fmt = detect_format(job.input, job.format)
    return prescan(job_items(job, fmt), []).unique


class _Outage:
    """How long the engine has been unreachable (shared by all workers)."""

    def __init__(self, limit_s: float) -> None:
        self.limit_s = limit_s
        self.since: float | None = None

    def ok(self) -> None:
        self.since = None

    def within_limit(self) -> bool:
        now = time.monotonic()
        if self.since is None:
            self.since = now
        return now - self.since < self.limit_s


class _Batch:
    def __init__(self, job: BatchJob, fmt: str, paths: OutputPaths, writer: OutputWriter, failed_before: set[str],
                 progress: ProgressSink | None) -> None:
        self.job, self.fmt, self.progress = job, fmt, progress
        self.out, self.failed_before = writer, failed_before
        self.done = writer.written  # ids with a result in OUT: earlier runs' and this run's
        self.seen: set[str] | None = set() if job.dedupe else None
        self.err = Appender(paths.errors, job.fsync_every)
        self.stats = RunStats()
        self.outage = _Outage(job.engine_wait_s)

    # --- orchestration ------------------------------------------------------------------------

    async def go(self, pool: BatchEngines | RayEngines, concurrency: int, total: int) -> None:
        self.stats = RunStats(total=total)
        if self.progress:
            self.progress.start(total, 0)
        queue: asyncio.Queue[Item | None] = asyncio.Queue(maxsize=2 * concurrency)
        try:
            async with asyncio.TaskGroup() as group:
                flusher = group.create_task(self._flush_loop())
                workers = [group.create_task(self._worker(pool, queue)) for _ in range(concurrency)]
                group.create_task(self._produce(queue, concurrency))
                await asyncio.gather(*workers)
                flusher.cancel()
        except BaseExceptionGroup as group_error:
            raise _first(group_error) from None
        finally:
            if self.progress:
                self.progress.stop()

    async def _produce(self, queue: asyncio.Queue[Item | None], workers: int) -> None:
        for count, item in enumerate(job_items(self.job, self.fmt)):
            if count % 1000 == 999:
                await asyncio.sleep(0)
            if not self._admit(item):
                continue
            if item.data is None:
                self.stats.malformed += 1
                self._fail(item, item.error or "malformed input")
                continue
            await queue.put(item)
        for _ in range(workers):
            await queue.put(None)

    def _admit(self, item: Item) -> bool:
        key = item.key
        if key in self.done:
            self.stats.skipped_done += 1
        elif self.seen is not None and key in self.seen:
            self.stats.duplicates_skipped += 1
            return False
        elif key in self.failed_before and not self.job.retry_failed:
            self.stats.skipped_failed += 1
        else:
            if self.seen is not None:
                self.seen.add(key)
            return True
        self._tick()
        return False

    async def _worker(self, pool: BatchEngines | RayEngines, queue: asyncio.Queue[Item | None]) -> None:
        while (item := await queue.get()) is not None:
            await self._process(pool, item)

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(0.1)
            due = [appender for appender in (self.out, self.err) if appender.due()]
            for appender in due:
                appender.flush()
            if due:
                self._tick()  # the durable counts moved

    def close(self) -> None:
        try:
            self.out.close()
        finally:
            self.err.close()

    # --- one item -----------------------------------------------------------------------------

    async def _process(self, pool: BatchEngines | RayEngines, item: Item) -> None:
        meter = Meter()
        METER.set(meter)
        started = time.monotonic()
        delay = 0.25
        while True:
            if item.key in self.done:  # answered meanwhile (never expected: one worker per id): not run again
                return
            index = pool.acquire()
            try:
                result = await self._execute(pool, index, item, meter)
            except Exception as exc:
                if not unreachable(exc):
                    self._fail(item, exc)
                    return
                self._check_outage(pool, exc)
                self.stats.retries += 1
                await asyncio.sleep(delay)
                delay = min(delay * 2, MAX_BACKOFF_S)
                continue
            finally:
                pool.release(index)
            self.outage.ok()
            self._succeed(item, result, meter, time.monotonic() - started)
            return

    async def _execute(self, pool: BatchEngines | RayEngines, index: int, item: Item, meter: Meter) -> Any:
        assert item.data is not None
        if isinstance(pool, RayEngines):
            result, usage = await pool.run_item(index, item.data)
            meter.add({"usage": usage})
            return result
        client: MeteredClient = pool.clients[index]
        if self.fmt == "openai":
            return await openai_fmt.run_request(client, item.data, passthrough=pool.passthrough)
        return await run_task(client, self.job, item.data)

    def _check_outage(self, pool: BatchEngines | RayEngines, exc: Exception) -> None:
        if pool.engine_gave_up():
            raise EngineError("the managed engine kept crashing and was given up",
                              hint="finished items are kept; see the engine log, then re-run the same command")
        if not self.outage.within_limit():
            reason = exc.one_line() if isinstance(exc, TiankongError) else str(exc)
            raise TransportError(f"the engine has been unreachable for {self.job.engine_wait_s:.0f} s ({reason})",
                                 hint="finished items are kept: start the engine again and re-run the same command")

    def _succeed(self, item: Item, result: Any, meter: Meter, latency: float) -> None:
        if self.fmt == "openai":
            record = openai_fmt.output_line(item.id, result)
            attempt = str(record["id"])
        else:
            attempt = f"attempt-{secrets.token_hex(6)}"
            record = {"id": item.id, "task": self.job.step, "result": result, "usage": meter.to_json(),
                      "latency_s": round(latency, 4)}
            if self.job.task == "classify" and isinstance(result, dict):  # the decision at the top level too
                record.update(label=result.get("label"), scores=result.get("scores"))
        if not self.out.add(record, attempt):  # the store refused a second result for this id (logged, counted)
            return
        stats = self.stats
        stats.processed += 1
        stats.prompt_tokens += meter.prompt_tokens
        stats.completion_tokens += meter.completion_tokens
        stats.add_latency(latency)
        self._tick()

    def _fail(self, item: Item, exc: BaseException | str) -> None:
        if self.fmt == "openai":
            error = exc if isinstance(exc, (TiankongError, str)) else f"internal error {type(exc).__name__}: {exc}"
            record = openai_fmt.error_line(item.id, item.line, error)
        else:
            record = {"id": item.id, "line": item.line, "task": self.job.step, "error": _error(exc)}
        self.err.add(record)
        self.stats.failed += 1
        self._tick()

    def _tick(self) -> None:
        if self.progress:
            s = self.stats
            s.durable_results, s.durable_errors = self.out.appender.written, self.err.written
            self.progress.update(s, s.skipped_done + s.skipped_failed + s.processed + s.failed)


def _error(exc: BaseException | str) -> dict[str, str]:
    if isinstance(exc, str):
        return {"type": "malformed_input", "message": exc}
    if isinstance(exc, TiankongError):
        return {"type": exc.type, "message": exc.one_line()}
    return {"type": "internal_error", "message": f"{type(exc).__name__}: {exc}"}


def _first(group: BaseExceptionGroup[Any]) -> BaseException:
    first = group.exceptions[0]
    return _first(first) if isinstance(first, BaseExceptionGroup) else first
