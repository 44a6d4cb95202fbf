"""The life of one gateway request: admission, deadline, client disconnect, metrics, planned restarts.

* Admission: a request that finds no slot and no room in the queue is refused at once (429, ``Retry-After``).
* Deadline: ``request_timeout_s`` covers the queue wait and the engine's work; past it the client gets 504
  and the engine request is cancelled.
* Disconnect: the client going away (streaming or not) cancels the work, which closes the engine request.
* Recycling: when the engine asks for a planned restart (``restart_after_requests``), admission drains,
  the engine restarts, and queued requests continue on the new engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import TypeVar

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive

from ..structured.drivers import SLOT_GATE
from .admission import Lane, QueueFull, RequestSlots
from .metrics import GatewayMetrics, RequestRecord
from .responses import deadline_exceeded, queue_full
from .streaming import DeferredSSE, Item, wait_disconnect
from .upstream import Upstream

T = TypeVar("T")
#: a batch line's deadline and its length: a line that stepped aside (``preempt.py``) starts it again when it
#: gets its slot back, as it did when it first got one
LINE_DEADLINE: contextvars.ContextVar[tuple[asyncio.Timeout, float] | None] = contextvars.ContextVar(
    "tiankong_line_deadline", default=None)
CLIENT_GONE = 499  # nginx's "client closed request"; only ever seen in metrics
log = logging.getLogger("tiankong.gateway")


async def until_disconnect(receive: Receive, work: Awaitable[T]) -> T | None:
    """Run ``work`` unless the client disconnects first (then cancel it and return None)."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(wait_disconnect(receive))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    return None if task.cancelled() else task.result()


class Pipeline:
    """Admission, deadline, disconnect and metrics around the routes' work, for one engine."""

    def __init__(self, lane: Lane, metrics: GatewayMetrics, *, timeout_s: float, keepalive_s: float,
                 idle_timeout_s: float, retry_wait_s: float, assemble_min_tokens: int,
                 isolate_prompts: bool = False) -> None:
        self.lane = lane
        self.metrics = metrics
        self.timeout_s = timeout_s
        self.keepalive_s = keepalive_s
        self.idle_timeout_s = idle_timeout_s
        self.upstream = Upstream(lane, timeout_s, retry_wait_s, assemble_min_tokens, isolate_prompts)
        self._background: set[asyncio.Task[None]] = set()

    async def close(self) -> None:
        for task in list(self._background):
            task.cancel()
        await self.upstream.close()

    def done(self, call: RequestRecord, response: Response) -> Response:
        self.metrics.finish(call, response.status_code)
        return response

    def reject(self, call: RequestRecord) -> Response:
        call.rejected = "queue_full"
        admission = self.lane.admission
        return queue_full(admission.retry_after_s(), admission.waiting)

    async def run(self, request: Request, call: RequestRecord, work: Callable[[], Awaitable[Response]],
                  slot: bool = True) -> Response:
        """A request answered in one piece. ``slot=False``: work that takes no engine slot (llama-server answers
        ``/tokenize``, ``/detokenize`` and ``/apply-template`` on its HTTP thread), so it neither waits in the
        queue nor fills it: a task client's preparation calls never get a 429 from a busy engine."""
        call.engine = self.lane.name
        if slot and not call.batch and not self.lane.admission.has_room():
            return self.done(call, self.reject(call))
        answered = self._deadlined(call, work) if slot else self._unslotted(work)
        response = await until_disconnect(request.receive, answered)
        if response is None:
            self.metrics.finish(call, CLIENT_GONE)
            return Response(status_code=CLIENT_GONE)
        return self.done(call, response)

    def stream(self, call: RequestRecord, path: str, body: dict[str, object]) -> Response:
        """A streamed request: admission now, the rest inside the SSE response."""
        call.engine, call.stream = self.lane.name, True
        if not call.batch and not self.lane.admission.has_room():
            return self.done(call, self.reject(call))

        def on_close(status: int, outcome: str) -> None:
            self.metrics.finish(call, CLIENT_GONE if outcome == "disconnect" else status)

        return DeferredSSE(self._stream_source(call, path, dict(body)), deadline=time.monotonic() + self.timeout_s,
                           timeout_s=self.timeout_s, keepalive_s=self.keepalive_s,
                           idle_timeout_s=self.idle_timeout_s, on_close=on_close)

    def source(self, call: RequestRecord, path: str, body: dict[str, object]) -> AsyncGenerator[Item, None]:
        """A stream's items with its slot held (admission first; a full queue is one 429 item): for work that
        relays a stream inside a response of its own (draft then replace, ``cascade.py``)."""
        call.engine, call.stream = self.lane.name, True
        return self._stream_source(call, path, dict(body))

    async def slotted(self, call: RequestRecord, work: Callable[[], Awaitable[Response]],
                      on_admitted: Callable[[], None] | None = None) -> Response:
        """``work`` with a slot held (waiting in line; 429 when the line is full), no deadline of its own."""
        call.engine = self.lane.name
        held = await self._acquire(call)
        if held is None:
            return self.reject(call)
        if on_admitted is not None:
            on_admitted()
        try:
            return await work()
        finally:
            self._release(call, held)

    async def _acquire(self, call: RequestRecord) -> float | None:
        """Wait in line for a slot: when it was granted (the queue wait noted on ``call``), None when the line
        is full."""
        waited = time.perf_counter()
        try:
            await self.lane.admission.acquire(call.group, batch=call.batch)
        except QueueFull:
            return None
        held = time.perf_counter()
        call.queue_wait_s = held - waited
        return held

    def _release(self, call: RequestRecord, held: float) -> None:
        self.lane.admission.release(time.perf_counter() - held, call.group, batch=call.batch)
        self._after_request()

    async def _deadlined(self, call: RequestRecord, work: Callable[[], Awaitable[Response]]) -> Response:
        """The deadline covers the queue wait and the work; a batch line's (it waits for idle slots, as long
        as interactive traffic keeps them busy) starts when it gets its slot."""
        try:
            async with asyncio.timeout(None if call.batch else self.timeout_s) as deadline:
                return await self._with_slot(call, work, deadline)
        except TimeoutError:
            return deadline_exceeded(self.timeout_s, "in the queue" if call.queue_wait_s is None else
                                     "while the engine worked")

    async def _unslotted(self, work: Callable[[], Awaitable[Response]]) -> Response:
        try:
            async with asyncio.timeout(self.timeout_s):
                return await work()
        except TimeoutError:
            return deadline_exceeded(self.timeout_s, "while the engine worked")

    async def _with_slot(self, call: RequestRecord, work: Callable[[], Awaitable[Response]],
                         deadline: asyncio.Timeout) -> Response:
        held = await self._acquire(call)
        if held is None:
            return self.reject(call)
        if call.batch:
            deadline.reschedule(asyncio.get_running_loop().time() + self.timeout_s)
        gate = SLOT_GATE.set(RequestSlots(self.lane.admission, call.group, call.batch))
        line = LINE_DEADLINE.set((deadline, self.timeout_s) if call.batch else None)
        try:
            return await work()
        finally:
            LINE_DEADLINE.reset(line)
            SLOT_GATE.reset(gate)
            self._release(call, held)

    async def _stream_source(self, call: RequestRecord, path: str,
                             body: dict[str, object]) -> AsyncGenerator[Item, None]:
        held = await self._acquire(call)
        if held is None:
            yield self.reject(call)
            return
        try:
            async with contextlib.aclosing(self.upstream.relay(call, path, body)) as items:
                async for item in items:
                    yield item
        finally:
            self._release(call, held)

    # --- planned restarts ------------------------------------------------------------------------------

    def _after_request(self) -> None:
        lane = self.lane
        if not lane.replica.recycles() or not lane.replica.count_request() or lane.recycling:
            return
        lane.recycling = True
        task = asyncio.ensure_future(self._recycle())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _recycle(self) -> None:
        lane = self.lane
        try:
            await lane.admission.drain()
            await asyncio.to_thread(lane.replica.recycle)
        except Exception as exc:  # the watchdog takes over from here; requests get 503 meanwhile
            log.warning("planned engine restart failed: %s", exc)
        finally:
            lane.recycling = False
            lane.admission.resume()
