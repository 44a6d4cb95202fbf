"""``BatchRunner``: the gateway runs its Batch API batches on the batch worker, in the gaps of interactive work.

One batch runs at a time, in turns: a batch that has run ``turn_s`` while another batch waits stops (the lines
it wrote stay written) and goes to the back of the line, so a key's small batch is not stuck behind another
key's large one. Turns go round-robin between keys, then between one key's batches (``fair_queue.KeyTurns``):
a key with four open batches gets one turn for every turn of another key; the stopped batch resumes where its
output ends, as after a restart. Its lines go through ``tiankong.batch.arun`` (one output line per
``custom_id``, whole lines fsynced, ids already written skipped on a re-run) with the gateway itself as the
engine: each line is sent in-process (``httpx.ASGITransport``, no socket) to the gateway's route of its URL,
with a token that exists only for this run and marks it as a batch line. Such a line passes the same checks as
any request, but waits in admission's second line (``admission.py``): it takes a slot only when no interactive
request is waiting, and never more than ``batches.slots`` of an engine.

The batch's status moves along ``batch.batches.TRANSITIONS``; a gateway killed at any moment finds its
unfinished batches on disk at the next start and carries on (``validating``/``in_progress`` run again from
where the output stops, ``finalizing`` finishes, ``cancelling`` becomes ``cancelled``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from ..batch.batches import UNFINISHED, BatchState, BatchStore
from ..batch.engines import BatchEngines
from ..batch.files import FileNotFound, FileStore
from ..batch.inputs import read_items
from ..batch.job import make_job
from ..batch.openai_fmt import error_line
from ..batch.report import RunStats
from ..batch.runner import arun
from ..batch.store import Appender, repair, written_keys
from ..batch.tasks import MeteredClient
from ..errors import TiankongError
from .fair_queue import KeyTurns
from .keys import ApiKey

log = logging.getLogger("tiankong.gateway")
S = BatchState
SAVE_EVERY_S = 2.0
SELF_URL = "http://127.0.0.1"  # in-process (ASGI): never connected to; a loopback Host passes the origin check


@dataclass
class LiveCounts:
    """Progress of the running batch (``request_counts``), written to its record every few seconds."""

    total: int
    completed: int = 0
    failed: int = 0
    saved: float = 0.0


#: how long a stopping gateway waits for the running batch to write what it answered
STOP_WAIT_S = 10.0


class _Progress:
    def __init__(self, runner: BatchRunner, batch_id: str, total: int) -> None:
        self.runner, self.batch_id = runner, batch_id
        # a later turn (or the run after a restart) starts from the counts its record holds: its own count starts
        # at 0 and climbs while it skips the done lines, which showed `completed` dropping to 0 and back
        before = runner.store.get(batch_id, None)["request_counts"]
        self.counts = runner.live[batch_id] = LiveCounts(total, int(before.get("completed", 0)),
                                                         int(before.get("failed", 0)))

    def start(self, total: int, completed: int) -> None:
        self.counts.total = total

    def update(self, stats: RunStats, completed: int) -> None:
        counts = self.counts
        completed, failed = stats.durable_counts()  # what a kill -9 keeps
        counts.completed, counts.failed = max(counts.completed, completed), max(counts.failed, failed)  # never back
        if time.monotonic() - counts.saved >= SAVE_EVERY_S:
            counts.saved = time.monotonic()
            self.runner.store.update(self.batch_id, request_counts=self.runner.counts_of(self.batch_id))

    def stop(self) -> None:
        pass


class BatchRunner:
    """Runs the batches of ``store`` one after another against ``app`` (the gateway's own ASGI app)."""

    def __init__(self, files: FileStore, store: BatchStore, callers: dict[str, ApiKey], *,
                 concurrency: Callable[[], int], engine_wait_s: float, timeout_s: float,
                 turn_s: float = 5.0) -> None:
        self.files, self.store, self.callers = files, store, callers
        self.concurrency, self.engine_wait_s, self.timeout_s = concurrency, engine_wait_s, timeout_s
        self.app: Any = None
        self.live: dict[str, LiveCounts] = {}
        self.running: str | None = None
        self._queue = KeyTurns()  # round-robin between keys, then between one key's batches
        self._queued: set[str] = set()  # ids in the queue: a batch is queued (and run) once at a time
        self._work: asyncio.Task[None] | None = None
        self._cancelled: set[str] = set()
        self.turn_s = turn_s
        self._yielded: set[str] = set()  # batches whose turn ended (they wait in the queue again)
        self._locks: dict[str, asyncio.Lock] = {}

    # --- what the routes call ---------------------------------------------------------------------------------

    def submit(self, batch_id: str) -> None:
        if batch_id in self._queued or batch_id == self.running:
            return
        self._queued.add(batch_id)
        self._queue.put(self.store.get(batch_id, None)["owner"], batch_id)

    def counts_of(self, batch_id: str) -> dict[str, int]:
        counts = self.live.get(batch_id)
        if counts is None:
            return dict(self.store.get(batch_id, None)["request_counts"])
        return {"total": counts.total, "completed": counts.completed, "failed": counts.failed}

    def describe(self, record: dict[str, Any]) -> dict[str, Any]:
        """A batch object with the running batch's live counts — also while it is cancelling or finalizing: the
        counts saved every ``SAVE_EVERY_S`` went back from 3 to 2 done in the answer to a cancel (each the larger
        of the saved and the live, so they never go back)."""
        if record["id"] in self.live:
            saved, live = record.get("request_counts") or {}, self.counts_of(record["id"])
            record = {**record, "request_counts": {k: max(int(saved.get(k) or 0), v) for k, v in live.items()}}
        return record

    async def cancel(self, batch_id: str, owner: str) -> dict[str, Any]:
        """Cancel a batch: the running one stops (its finished lines are kept); any other ends at once."""
        record = self.store.get(batch_id, owner)
        if record["status"] in (S.CANCELLING, S.CANCELLED):
            return record
        work = self._work
        if self.running == batch_id and work is not None and not work.done():
            self.store.move(batch_id, S.CANCELLING)
            self._cancelled.add(batch_id)
            work.cancel()  # the run (which holds the batch's lock) ends it as cancelled
            return self.describe(self.store.get(batch_id, owner))
        async with self._lock(batch_id):  # not running, or in its endings: after them, or instead of a run
            if self.store.get(batch_id, owner)["status"] not in (S.CANCELLING, S.CANCELLED):
                self.store.move(batch_id, S.CANCELLING)  # 409 for a batch that has finished meanwhile
                await asyncio.to_thread(self._finish, batch_id, S.CANCELLED)
        return self.describe(self.store.get(batch_id, owner))

    def _lock(self, batch_id: str) -> asyncio.Lock:
        return self._locks.setdefault(batch_id, asyncio.Lock())

    def pending(self) -> int:
        """Lines of unfinished batches not yet answered (for /metrics and /ui)."""
        left = 0
        for record in self.store.unfinished():
            counts = self.counts_of(record["id"])
            left += max(0, counts["total"] - counts["completed"] - counts["failed"])
        return left

    # --- the loop -----------------------------------------------------------------------------------------------

    async def forever(self) -> None:
        for record in self.store.unfinished():
            self.submit(record["id"])
        while True:
            batch_id = await self._queue.get()
            self._queued.discard(batch_id)
            try:
                await self._run(batch_id)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a bug must not stop every later batch: this one fails, with the reason
                log.warning("batch %s failed: %s: %s", batch_id, type(exc).__name__, exc)
                with contextlib.suppress(TiankongError):
                    await asyncio.to_thread(self._finish, batch_id, S.FAILED,
                                            error=("internal_error", f"{type(exc).__name__}: {exc}"))
            finally:
                self.running = None
                self._keep_counts(batch_id)
                self.live.pop(batch_id, None)
                self._cancelled.discard(batch_id)
                self._yielded.discard(batch_id)
                self._locks.pop(batch_id, None)

    def _keep_counts(self, batch_id: str) -> None:
        """A batch whose turn ended (or whose run stopped) keeps the live counts it reached: its record's
        ``request_counts`` never go back while it waits for its next turn."""
        with contextlib.suppress(TiankongError):
            if batch_id in self.live and self.store.get(batch_id, None)["status"] == S.IN_PROGRESS:
                self.store.update(batch_id, request_counts=self.counts_of(batch_id))

    async def _run(self, batch_id: str) -> None:
        async with self._lock(batch_id):
            await self._run_locked(batch_id)

    async def _run_locked(self, batch_id: str) -> None:
        record = self.store.get(batch_id, None)
        status = S(record["status"])
        if status == S.CANCELLING:
            await asyncio.to_thread(self._finish, batch_id, S.CANCELLED)
            return
        if status == S.FINALIZING:
            await asyncio.to_thread(self._finish, batch_id, S.COMPLETED)
            return
        if status not in (S.VALIDATING, S.IN_PROGRESS):
            return
        try:
            source = self.files.path(record["input_file_id"], record["owner"])
        except FileNotFound:
            await asyncio.to_thread(self._finish, batch_id, S.FAILED,
                                    error=("invalid_file", "the input file was deleted"))
            return
        await asyncio.to_thread(self._reclaim, batch_id)
        if status == S.VALIDATING:
            self.store.move(batch_id, S.IN_PROGRESS)
        remaining = record["expires_at"] - time.time()
        if remaining <= 0:
            await asyncio.to_thread(self._expire, batch_id, source)
            return
        self.running = batch_id
        self._work = asyncio.ensure_future(self._execute(batch_id, source, record["owner"]))
        try:
            async with asyncio.timeout(remaining):
                await self._turn(batch_id, self._work)
        except TimeoutError:
            await asyncio.to_thread(self._expire, batch_id, source)
            return
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if batch_id in self._yielded and not (current is not None and current.cancelling()):
                self.running = None  # no longer running: submit queues it again
                self.submit(batch_id)  # its turn is over: on again after the batches that wait
                return
            if batch_id not in self._cancelled or (current is not None and current.cancelling()):
                raise  # the gateway is stopping: the batch stays in progress and resumes at the next start
            await asyncio.to_thread(self._finish, batch_id, S.CANCELLED)
            return
        except TiankongError as exc:  # the engines stayed down past batches.engine_wait_s
            await asyncio.to_thread(self._finish, batch_id, S.FAILED, error=(exc.type, exc.one_line()))
            return
        finally:
            self._work = None
        self.store.move(batch_id, S.FINALIZING, expected=(S.IN_PROGRESS,))
        await asyncio.to_thread(self._finish, batch_id, S.COMPLETED)

    async def _turn(self, batch_id: str, work: asyncio.Future[None]) -> None:
        """Wait for ``work``; once it has run ``turn_s`` while another batch waits, stop it (``_yielded``)."""
        began = time.monotonic()
        try:
            while not work.done():
                await asyncio.wait({work}, timeout=0.5)
                if not work.done() and not self._queue.empty() and time.monotonic() - began >= self.turn_s:
                    self._yielded.add(batch_id)
                    work.cancel()
        except asyncio.CancelledError:  # the gateway stops, or the window ended: the run stops with it
            work.cancel()
            # and is waited for: its way out writes the answered lines it holds (a clean stop had left lines it
            # counted unwritten, answered again at the next start)
            await asyncio.wait({work}, timeout=STOP_WAIT_S)
            raise
        await work

    def _reclaim(self, batch_id: str) -> None:
        """Files a crash left half-registered by an ending (moved, status not yet changed) go back to the batch
        folder, so the run resumes from them instead of starting over."""
        paths, short = self.store.paths(batch_id), batch_id.removeprefix("batch_")
        for file_id, path in ((f"file-{short}out", paths.output), (f"file-{short}err", paths.errors)):
            self.files.reclaim(file_id, path)

    async def _execute(self, batch_id: str, source: Path, owner: str) -> None:
        paths = self.store.paths(batch_id)
        job = make_job(input=str(source), output=str(paths.output), format="openai", engine_wait_s=self.engine_wait_s,
                       timeout_s=self.timeout_s, fsync_every=8)
        token = secrets.token_urlsafe(32)
        self.callers[token] = ApiKey(owner, f"batch:{batch_id}", None, batch=True)
        concurrency = max(1, self.concurrency())
        client = MeteredClient(SELF_URL, api_key=token, timeout_s=self.timeout_s, max_connections=concurrency,
                               transport=httpx.ASGITransport(app=self.app))
        total = self.store.get(batch_id, None)["request_counts"]["total"]
        try:
            await arun(job, progress=_Progress(self, batch_id, total),
                       engines=BatchEngines([client], passthrough=True, slot_count=concurrency))
        finally:
            self.callers.pop(token, None)
            await client.close()

    # --- endings (blocking: run in a thread) ---------------------------------------------------------------------

    def _expire(self, batch_id: str, source: Path) -> None:
        """Every line not answered in time gets an error line ``batch_expired`` (as OpenAI writes them)."""
        paths = self.store.paths(batch_id)
        repair(paths.output)
        repair(paths.errors)
        done = written_keys(paths.output) | written_keys(paths.errors)
        errors = Appender(paths.errors, 64)
        try:
            # read as the run reads it (blank lines skipped, a byte-order mark, the file's own line numbers): a
            # blank line had failed the expiry itself and left the unanswered lines without error lines
            for item in read_items(source, "openai"):
                if item.data is not None and item.key not in done:
                    line = error_line(item.id, item.line, "the batch expired before this request ran")
                    line["error"] = {"code": "batch_expired", "message": "this request could not be executed "
                                     "before the completion window expired"}
                    errors.add(line)
        finally:
            errors.close()
        self._finish(batch_id, S.EXPIRED)

    def _finish(self, batch_id: str, final: BatchState, error: tuple[str, str] | None = None) -> None:
        """Register what the batch wrote as its output and error files, then enter ``final`` (``cancelled``
        for a batch cancelled meanwhile). Safe to repeat after a crash half-way: each file moves once."""
        record = self.store.get(batch_id, None)
        status = S(record["status"])
        if status not in UNFINISHED:
            return  # already ended
        if status == S.CANCELLING:
            final = S.CANCELLED
        paths, owner, short = self.store.paths(batch_id), record["owner"], batch_id.removeprefix("batch_")
        repair(paths.output)
        repair(paths.errors)
        output_id = self.files.adopt(paths.output, f"file-{short}out", filename=f"{batch_id}_output.jsonl",
                                     owner=owner)
        error_id = None
        if (paths.errors.exists() and paths.errors.stat().st_size > 0) or self.files.has(f"file-{short}err"):
            error_id = self.files.adopt(paths.errors, f"file-{short}err", filename=f"{batch_id}_error.jsonl",
                                        owner=owner)
        answered = written_keys(self.files.path(output_id, None))  # ids, not lines: one result per custom_id
        failed = written_keys(self.files.path(error_id, None)) - answered if error_id else set()
        counts = {"total": record["request_counts"]["total"], "completed": len(answered), "failed": len(failed)}
        fields: dict[str, Any] = {"output_file_id": output_id, "error_file_id": error_id, "request_counts": counts}
        if error is not None:
            fields["errors"] = _errors(*error)
        self.store.move(batch_id, final, **fields)


def _errors(code: str, message: str) -> dict[str, Any]:
    return {"object": "list", "data": [{"code": code, "message": message, "param": None, "line": None}]}
