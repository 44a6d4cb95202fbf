"""A stream that was cut off after its 200 went out (the deadline, an engine that broke off, an idle engine) is
counted with the error that ended it, not as the 200 it started with — the metrics counted it a success (a
sweep of 2026-12-08: 50 chunks then `deadline_exceeded`, and `requests_total{status="200"}` grew)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator

from starlette.types import Message

from tiankong.gateway.responses import engine_unavailable
from tiankong.gateway.streaming import DeferredSSE, Item

CHUNK = b'data: {"choices":[{"delta":{"content":"x"}}]}\n\n'


async def _run(source: AsyncGenerator[Item, None], *, timeout_s: float = 5.0,
               idle_timeout_s: float = 5.0) -> tuple[list[tuple[int, str]], list[Message]]:
    closed: list[tuple[int, str]] = []
    sent: list[Message] = []
    response = DeferredSSE(source, deadline=time.monotonic() + timeout_s,
                           timeout_s=timeout_s, keepalive_s=0.05, idle_timeout_s=idle_timeout_s,
                           on_close=lambda status, outcome: closed.append((status, outcome)))

    async def receive() -> Message:
        await asyncio.sleep(3600)  # the client stays
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    await response({"type": "http"}, receive, send)
    return closed, sent


async def _tokens_then(tail: Item | None = None, *, stall_s: float = 0.0) -> AsyncGenerator[Item, None]:
    for _ in range(3):
        yield CHUNK
    if stall_s:
        await asyncio.sleep(stall_s)
    if tail is not None:
        yield tail


def test_a_whole_stream_is_counted_200() -> None:
    closed, sent = asyncio.run(_run(_tokens_then()))
    assert closed == [(200, "ok")] and sent[0]["status"] == 200


def test_a_stream_cut_off_by_the_deadline_is_counted_504() -> None:
    closed, sent = asyncio.run(_run(_tokens_then(stall_s=30), timeout_s=0.5))
    assert sent[0]["status"] == 200  # the status line went out with the first tokens
    assert closed == [(504, "deadline")]
    assert b"deadline_exceeded" in b"".join(m.get("body", b"") for m in sent)


def test_a_stream_whose_engine_broke_off_is_counted_with_the_error() -> None:
    closed, _ = asyncio.run(_run(_tokens_then(engine_unavailable("the stream broke off"))))
    assert closed == [(503, "error")]


def test_a_stream_whose_engine_went_quiet_is_counted_504() -> None:
    closed, _ = asyncio.run(_run(_tokens_then(stall_s=30), idle_timeout_s=0.3))
    assert closed == [(504, "idle")]


def test_an_error_before_any_token_keeps_its_own_status() -> None:
    async def refused() -> AsyncGenerator[Item, None]:
        yield engine_unavailable("engine starting")

    closed, sent = asyncio.run(_run(refused()))
    assert sent[0]["status"] == 503 and closed == [(503, "error")]
