"""The async driver (the gateway's): a flow's own computation between engine calls never holds the event loop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Generator
from typing import Any

from tiankong.structured.drivers import run_async
from tiankong.structured.flow import Call

#: a deadlock guard, not a speed figure: with the step on the event loop the event below can never be set, and the
#: step gives up after this long
GUARD_S = 10.0


def waiting_flow(started: threading.Event, loop_ran: threading.Event) -> Generator[list[Call], list[Any], bool]:
    """A step that can only finish early if the event loop runs while it works (as other requests must)."""
    (props,) = yield [Call("GET", "/props")]
    started.set()
    return loop_ran.wait(GUARD_S) and props["answer"] == "GET /props"


def test_a_flows_long_step_does_not_hold_the_event_loop() -> None:
    async def scenario() -> bool:
        started, loop_ran = threading.Event(), threading.Event()

        async def engine(method: str, path: str, body: dict[str, Any] | None) -> Any:
            return {"answer": f"{method} {path}"}

        async def another_request() -> None:  # on the loop: it can only see the step start if the loop is free
            while not started.is_set():
                await asyncio.sleep(0.001)
            loop_ran.set()

        async def with_other() -> bool:
            flow = asyncio.create_task(run_async(waiting_flow(started, loop_ran), engine))
            await asyncio.sleep(0)
            other = asyncio.create_task(another_request())
            result = await flow
            await other
            return result

        return await with_other()

    assert asyncio.run(scenario()) is True  # the other coroutine ran during the step, and the result came back


def test_an_error_inside_a_step_reaches_the_caller() -> None:
    def failing() -> Generator[list[Call], list[Any], str]:
        yield [Call("GET", "/props")]
        raise ValueError("bad step")

    async def engine(method: str, path: str, body: dict[str, Any] | None) -> Any:
        return {}

    try:
        asyncio.run(run_async(failing(), engine))
    except ValueError as exc:
        assert str(exc) == "bad step"
    else:
        raise AssertionError("the step's error was swallowed")
