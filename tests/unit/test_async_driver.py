"""The async driver (the gateway's): a flow's own computation between engine calls never holds the event loop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Generator
from typing import Any

from tiankong.structured.drivers import run_async
from tiankong.structured.flow import Call

STEP_S = 0.3  # each step holds its thread this long, as a decider over 256 windows or the name taggers over 1 MB do


def busy_flow() -> Generator[list[Call], list[Any], str]:
    time.sleep(STEP_S)
    (props,) = yield [Call("GET", "/props")]
    time.sleep(STEP_S)
    return str(props["answer"])


def test_a_flows_long_step_does_not_hold_the_event_loop() -> None:
    async def scenario() -> tuple[str, int]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        async def engine(method: str, path: str, body: dict[str, Any] | None) -> Any:
            return {"answer": f"{method} {path}"}

        running = asyncio.create_task(ticker())
        result = await run_async(busy_flow(), engine)
        running.cancel()
        return result, ticks

    result, ticks = asyncio.run(scenario())
    assert result == "GET /props"  # the flow's result comes back through the thread hop
    # 0.6 s of steps: a free loop ticks ~60 times at 10 ms; a held one at most once between the two steps
    assert ticks >= 20, ticks


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
