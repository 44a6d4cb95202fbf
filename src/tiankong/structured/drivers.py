"""Run a flow: sync (calls one after another) or async (each batch concurrently)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from ..errors import InputTooLong, TransportError
from .flow import Call, Flow

#: errors a call's answer may be: the flow decides (a flow that does not handle one raises it)
ANSWERED = (TransportError, InputTooLong)

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
            return request(call.method, call.path, call.body)
        except ANSWERED as exc:
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


async def run_async(flow: Flow[T], request: Callable[[str, str, dict[str, Any] | None], Awaitable[Any]]) -> T:
    """Each batch concurrently, at most :data:`MAX_IN_FLIGHT` calls in flight."""
    gate = asyncio.Semaphore(MAX_IN_FLIGHT)

    async def one(call: Call) -> Any:
        async with gate:
            try:
                return await request(call.method, call.path, call.body)
            except ANSWERED as exc:
                return exc

    try:
        batch = next(flow)
        while True:
            batch = flow.send(list(await asyncio.gather(*(one(call) for call in batch))))
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
