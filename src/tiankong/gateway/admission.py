"""Admission control for one engine: a bounded number in flight, a bounded FIFO queue behind it.

llama-server queues without bound; the gateway does not. At most ``limit`` requests (the engine's slots)
are sent to the engine at once, at most ``queue_size`` wait for a slot, and everything beyond that is
refused at once (HTTP 429 with ``Retry-After``), so a burst costs the client a retry, not an unbounded wait.

A task request whose flow sends engine calls side by side (chunks, documents) holds one slot per call in
flight: the first is the request's own, each further one is taken only when a slot is free and nobody waits
(:meth:`Admission.try_extra`), so ``in_flight`` counts engine calls and one request cannot crowd others out.

Batch items (the gateway's own Batch API, ``batch_api.py``) wait in a second line that is served only when
nobody is waiting in the first and a slot is free, and they hold at most ``batch_limit`` slots at once: an
interactive request never waits behind a queued batch item, only (at most) for one running batch item to end.

:class:`Lane` is one replica of the engine pool with its admission queue (each replica has its own).
"""

from __future__ import annotations

import asyncio
import math
from collections import Counter, deque
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..engine.pool import Replica


class QueueFull(Exception):
    """No slot free and the waiting queue is full."""


Group = Hashable  # requests the engine can batch together (same LoRA adapter set); () for the base model

#: a waiter may be passed over this many times (per slot) for requests that batch with the running ones
MAX_SKIPS_PER_SLOT = 4


@dataclass(eq=False)
class _Waiter:
    future: asyncio.Future[None]
    group: Group
    skipped: int = 0


class Admission:
    """A bounded semaphore with a bounded waiting line and a service-time estimate for ``Retry-After``.

    The line is FIFO except for one thing: llama-server decodes slots with different LoRA adapter sets in
    separate batches (taking turns), so when a slot frees, a waiter whose ``group`` matches the requests
    already running is let in ahead of the line, at most ``MAX_SKIPS_PER_SLOT × limit`` times past any one
    waiter (nobody starves). With one group (no adapters) this is plain FIFO.
    """

    def __init__(self, limit: int, queue_size: int, *, group_batching: bool = True,
                 batch_limit: int | None = None, batch_yields: bool = False, preempt: bool = False) -> None:
        if limit < 1 or queue_size < 0 or (batch_limit is not None and batch_limit < 0):
            raise ValueError("limit must be >= 1, queue_size and batch_limit >= 0")
        self.batch_limit = batch_limit  # slots batch items may hold at once (None: every free one)
        self.batch_yields = batch_yields  # no new batch line while an interactive request is being served
        #: batch lines run only while no interactive request is in flight or waiting, and the plain ones step
        #: aside the moment one arrives (``preempt.py``)
        self.preempt = preempt
        self.preemptions = 0
        self._interactive: asyncio.Event | None = None
        self.batch_in_flight = 0
        self._batch_waiting: deque[_Waiter] = deque()
        self.limit = limit
        self.base_limit = limit  # the configured limit; degradation (L2) may lower ``limit`` for a while
        self.queue_size = queue_size
        self.group_batching = group_batching
        self.in_flight = 0
        self.reordered = 0  # waiters let in ahead of the line to batch with the running group
        self.extra_in_flight = 0  # slots held by requests' side-by-side engine calls beyond their first
        self._running: Counter[Group] = Counter()
        self._waiting: deque[_Waiter] = deque()
        self._paused = False
        self._service_s = 1.0  # EWMA of the time a request holds a slot
        self._idle: asyncio.Event | None = None

    @property
    def waiting(self) -> int:
        """Interactive requests waiting for a slot (batch items wait in a line of their own)."""
        return len(self._waiting)

    @property
    def batch_waiting(self) -> int:
        return len(self._batch_waiting)

    def has_room(self) -> bool:
        return self._free() or len(self._waiting) < self.queue_size

    def retry_after_s(self) -> int:
        """Seconds until a retry has a fair chance: the queue ahead drained at the observed service rate."""
        estimate = self._service_s * (len(self._waiting) + 1) / self.limit
        return max(1, min(60, math.ceil(estimate)))

    async def acquire(self, group: Group = (), *, batch: bool = False) -> None:
        """Take a slot, waiting in line if needed; :class:`QueueFull` when the line is full. A ``batch`` item
        waits (without bound: its runner limits how many it sends) until no interactive request is waiting."""
        if batch:
            if self._batch_free():
                self._enter(group, batch=True)
                return
            line = self._batch_waiting
        elif self._free() and not self._waiting:
            self._enter(group)
            return
        elif len(self._waiting) >= self.queue_size:
            raise QueueFull
        else:
            line = self._waiting
        waiter = _Waiter(asyncio.get_running_loop().create_future(), group)
        line.append(waiter)
        if not batch:
            self._signal()
        try:
            await waiter.future  # the releasing request counts us in before waking us
        except asyncio.CancelledError:
            if waiter.future.done() and not waiter.future.cancelled():
                self.release(group=group, batch=batch)  # a slot was handed over just as we gave up: pass it on
            else:
                line.remove(waiter)
            raise

    def try_extra(self, group: Group = (), *, batch: bool = False) -> bool:
        """One more slot for a request already in (a task whose flow runs calls side by side), only when it is
        free now and nobody is waiting for it: extra calls never wait in line and never pass a waiter."""
        if not (self._batch_free() if batch else self._free() and not self._waiting):
            return False
        self._enter(group, batch=batch)
        self.extra_in_flight += 1
        return True

    def release_extra(self, group: Group = (), *, batch: bool = False) -> None:
        self.extra_in_flight -= 1
        self.release(group=group, batch=batch)

    def release(self, held_s: float | None = None, group: Group = (), *, batch: bool = False) -> None:
        self.in_flight -= 1
        if batch:
            self.batch_in_flight -= 1
        self._running[group] -= 1
        if self._running[group] <= 0:
            del self._running[group]
        if held_s is not None:
            self._service_s = 0.8 * self._service_s + 0.2 * held_s
        self._wake()
        if self.in_flight == 0 and self._idle is not None:
            self._idle.set()

    def set_limit(self, limit: int) -> None:
        """Change how many may be in flight; lowering it lets running requests finish, raising it wakes waiters."""
        self.limit = max(1, limit)
        self._wake()

    async def drain(self) -> None:
        """Stop handing out slots and wait until none is in use (for a planned engine restart)."""
        self._paused = True
        while self.in_flight > 0:
            self._idle = asyncio.Event()
            await self._idle.wait()
        self._idle = None

    def resume(self) -> None:
        self._paused = False
        self._wake()

    def _free(self) -> bool:
        return self.in_flight < self.limit and not self._paused

    def _batch_free(self) -> bool:
        share = self.batch_share()
        interactive = self.in_flight - self.batch_in_flight
        return (self._free() and not self._waiting and self.batch_in_flight < share and
                not ((self.batch_yields or self.preempt) and interactive > 0))

    def batch_share(self) -> int:
        """Slots batch lines may hold: ``batch_limit``, else every one — but one line at a time when they step
        aside. Why one: a stopped line gives its engine slot back only when llama-server notices (at its next
        token, or after its prompt is read), and every line stopped or resumed is engine work an interactive
        request shares; on a CPU, where a step's cost grows with the sequences in it, more lines add little batch
        throughput. Measured (``benchmarks/batch_idle.py``, 2 cores, 4 slots, 2 chats/s): one line, interactive
        p99 2.16x quiet and 0.65x idle batch speed; three lines, 4.45x and 0.41x (docs/batch-api.md)."""
        if self.batch_limit is not None:
            return min(self.batch_limit, self.limit)
        return 1 if self.preempt else self.limit

    # --- batch lines that step aside (preempt.py) ----------------------------------------------------------

    def interactive_busy(self) -> bool:
        return self.in_flight - self.batch_in_flight > 0 or bool(self._waiting)

    async def interactive_arrived(self) -> None:
        """Return as soon as an interactive request is in flight or waiting."""
        while not self.interactive_busy():
            if self._interactive is None:
                self._interactive = asyncio.Event()
            await self._interactive.wait()

    def _signal(self) -> None:
        if self._interactive is not None and self.interactive_busy():
            self._interactive.set()
            self._interactive = None

    async def step_aside(self, group: Group = ()) -> None:
        """A running batch line gives its slot back and waits in the batch line for it again (until nobody
        interactive is in flight or waiting). Cancelled while waiting, it is counted back in, so that the
        caller's own ``release`` (which follows) keeps the books."""
        self.release(group=group, batch=True)
        try:
            await self.acquire(group, batch=True)
        except BaseException:
            self._enter(group, batch=True)
            raise

    def _enter(self, group: Group, *, batch: bool = False) -> None:
        self.in_flight += 1
        self._running[group] += 1
        if batch:
            self.batch_in_flight += 1
        else:
            self._signal()

    def _next(self) -> _Waiter:
        """The head of the line, or the first waiter that batches with the running requests (bounded skips)."""
        head = self._waiting[0]
        if not self.group_batching or not self._running or head.group in self._running:
            return self._waiting.popleft()
        if head.skipped >= MAX_SKIPS_PER_SLOT * self.base_limit:
            return self._waiting.popleft()
        running = self._running.most_common(1)[0][0]
        index = next((i for i, w in enumerate(self._waiting) if w.group == running), 0)
        if index == 0:
            return self._waiting.popleft()
        for passed in list(self._waiting)[:index]:
            passed.skipped += 1
        waiter = self._waiting[index]
        del self._waiting[index]
        self.reordered += 1
        return waiter

    def _wake(self) -> None:
        while self._waiting and self._free():
            waiter = self._next()
            if not waiter.future.done():
                self._enter(waiter.group)
                waiter.future.set_result(None)
        while self._batch_waiting and self._batch_free():
            waiter = self._batch_waiting.popleft()
            if not waiter.future.done():
                self._enter(waiter.group, batch=True)
                waiter.future.set_result(None)


@dataclass
class RequestSlots:
    """The :class:`~tiankong.structured.drivers.SlotGate` of one admitted request: its extra slots come from (and
    go back to) its engine's admission, in its group and class."""

    admission: Admission
    group: Group = ()
    batch: bool = False

    def try_extra(self) -> bool:
        return self.admission.try_extra(self.group, batch=self.batch)

    def release_extra(self) -> None:
        self.admission.release_extra(self.group, batch=self.batch)


@dataclass(eq=False)
class Lane:
    """One replica of the engine pool as the gateway serves it: the pool's :class:`Replica` (where it is, how it
    is — a restarted engine's new port and pid are always current) and the admission queue in front of it."""

    replica: Replica
    admission: Admission
    recycling: bool = field(default=False, init=False)  # a planned restart is under way (pipeline.py)

    @property
    def name(self) -> str:
        return self.replica.name

    def outstanding(self) -> int:
        """Requests in flight plus those waiting in its queue (the pool routes to the replica with the fewest)."""
        return self.admission.in_flight + self.admission.waiting
