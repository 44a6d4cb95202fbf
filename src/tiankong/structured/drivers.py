"""Run a flow: sync (calls one after another) or async (each batch concurrently)."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

from ..engine.parts import PartMissing, part_request
from ..errors import InputTooLong, TransportError
from .flow import Call, Flow

#: errors a call's answer may be: the flow decides (a flow that does not handle one raises it)
ANSWERED = (TransportError, InputTooLong)
#: a part call's answer may also be: the part is not installed (the flow goes on without it, and says so)
PART_ANSWERED = (*ANSWERED, PartMissing)

T = TypeVar("T")


#: Most calls of one batch in flight at once, sync or async. The engine's slots bound the useful number; the
#: cap keeps the rest queued here rather than inside llama-server, where a queued request's read timeout
#: would run while it waits (a 20-chunk compress on 2 slots would otherwise time out its last chunks).
MAX_IN_FLIGHT = 8
SYNC_WORKERS = MAX_IN_FLIGHT


def run_sync(flow: Flow[T], request: Callable[[str, str, dict[str, Any] | None], Any]) -> T:
    """Batches of one run inline; larger batches (parallel task steps) on a small thread pool."""
    def one(call: Call) -> Any:
        try:
            if call.part is not None:
                return part_request(call.part, call.method, call.path, call.body)
            return request(call.method, call.path, call.body)
        except PART_ANSWERED as exc:
            return exc

    pool: ThreadPoolExecutor | None = None
    try:
        batch = next(flow)
        while True:
            if len(batch) > 1:
                pool = pool or ThreadPoolExecutor(max_workers=SYNC_WORKERS, thread_name_prefix="tiankong")
                answers = list(pool.map(one, batch))
            else:
                answers = [one(call) for call in batch]
            batch = flow.send(answers)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    finally:
        if pool is not None:
            pool.shutdown(wait=False)


class SlotGate(Protocol):
    """Engine slots beyond a request's own, for the calls it runs side by side (a server's admission)."""

    def try_extra(self) -> bool:
        """Take one more slot now if one is free and nobody waits for it; False otherwise (never waits)."""

    def release_extra(self) -> None: ...


#: Set by a server that admits requests (the gateway) around one request's work: then a call in flight beyond the
#: request's first holds a slot of its own, so one request's parallel engine calls count like other requests' and
#: never crowd them out; without a free slot the call waits for one of the request's own calls to end.
SLOT_GATE: contextvars.ContextVar[SlotGate | None] = contextvars.ContextVar("tiankong_slot_gate", default=None)


class _Slots:
    """The slots one flow's calls hold: its own (always there), extras from the gate, at most MAX_IN_FLIGHT.
    Plain bookkeeping on the event loop (no lock): ``give`` never awaits, so a cancelled call cannot keep a slot."""

    def __init__(self, gate: SlotGate | None) -> None:
        self.gate = gate
        self.own_busy = False
        self.in_flight = 0
        self._waiters: list[asyncio.Future[None]] = []

    async def take(self) -> bool:
        """Wait for a slot; True when it is an extra one (to be given back to the gate)."""
        while True:
            if self.in_flight < MAX_IN_FLIGHT:
                if self.gate is None:
                    self.in_flight += 1
                    return False
                if not self.own_busy:
                    self.own_busy = True
                    self.in_flight += 1
                    return False
                if self.gate.try_extra():
                    self.in_flight += 1
                    return True
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            await waiter

    def give(self, extra: bool) -> None:
        self.in_flight -= 1
        if extra:
            assert self.gate is not None
            self.gate.release_extra()
        elif self.gate is not None:
            self.own_busy = False
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)


async def run_async(flow: Flow[T], request: Callable[[str, str, dict[str, Any] | None], Awaitable[Any]]) -> T:
    """Each batch concurrently, at most :data:`MAX_IN_FLIGHT` calls in flight (and, under a :data:`SLOT_GATE`,
    only as many as the request holds slots for)."""
    slots = _Slots(SLOT_GATE.get())

    async def one(call: Call) -> Any:
        if call.part is not None:  # another engine: no slot of the request's own
            try:
                return await asyncio.to_thread(part_request, call.part, call.method, call.path, call.body)
            except PART_ANSWERED as exc:
                return exc
        extra = await slots.take()
        try:
            return await request(call.method, call.path, call.body)
        except ANSWERED as exc:
            return exc
        finally:
            slots.give(extra)

    # the flow's own steps (pure computation between engine calls: a decider over 256 windows, the name taggers
    # over a long text) run in a worker thread, so that a step of seconds never holds the event loop — the
    # gateway's other requests, health checks and streams go on meanwhile
    done, batch = await asyncio.to_thread(_step, flow, [], True)
    while not done:
        answers = list(await asyncio.gather(*(one(call) for call in batch)))
        done, batch = await asyncio.to_thread(_step, flow, answers, False)
    return batch  # type: ignore[no-any-return]


def _step(flow: Flow[Any], answers: list[Any], first: bool) -> tuple[bool, Any]:
    """One step of ``flow``: (False, its next batch) or (True, its result). StopIteration cannot cross a
    thread's future, so it is turned into the result here."""
    try:
        return False, next(flow) if first else flow.send(answers)
    except StopIteration as stop:
        return True, stop.value
