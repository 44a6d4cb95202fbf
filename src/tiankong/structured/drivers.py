"""Run a flow: sync (calls one after another) or async (each batch concurrently)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from ..errors import TransportError
from .flow import Call, Flow

T = TypeVar("T")


def run_sync(flow: Flow[T], request: Callable[[str, str, dict[str, Any] | None], Any]) -> T:
    def one(call: Call) -> Any:
        try:
            return request(call.method, call.path, call.body)
        except TransportError as exc:
            return exc

    try:
        batch = next(flow)
        while True:
            batch = flow.send([one(call) for call in batch])
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


async def run_async(flow: Flow[T], request: Callable[[str, str, dict[str, Any] | None], Awaitable[Any]]) -> T:
    async def one(call: Call) -> Any:
        try:
            return await request(call.method, call.path, call.body)
        except TransportError as exc:
            return exc

    try:
        batch = next(flow)
        while True:
            batch = flow.send(list(await asyncio.gather(*(one(call) for call in batch))))
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
