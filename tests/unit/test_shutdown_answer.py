"""``gateway/shutdown.py`` on a request the server cancels as it stops, driven as plain ASGI (no server): what the
client is told for each state of its answer."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tiankong.gateway.shutdown import ShutdownAnswer

pytestmark = pytest.mark.unit


def cut_off(headers: list[tuple[bytes, bytes]] | None, first_chunk: bytes | None) -> list[dict[str, Any]]:
    """The messages sent when a request whose app sent ``headers`` (None: nothing) and ``first_chunk`` is
    cancelled the way uvicorn cancels it at shutdown."""
    sent: list[dict[str, Any]] = []
    started = asyncio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if headers is not None:
            await send({"type": "http.response.start", "status": 200, "headers": headers})
        if first_chunk is not None:
            await send({"type": "http.response.body", "body": first_chunk, "more_body": True})
        started.set()
        await asyncio.sleep(3600)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        await asyncio.sleep(3600)
        return {}

    async def main() -> None:
        task = asyncio.ensure_future(ShutdownAnswer(app)({"type": "http", "method": "POST", "path": "/x"}, receive,
                                                         send))
        await started.wait()
        task.cancel(msg="Task cancelled, timeout graceful shutdown exceeded")  # as uvicorn's Server.shutdown does
        await task  # the wrapper ends the task as asked, without raising

    asyncio.run(main())
    return sent


def test_a_request_not_yet_answered_gets_a_503_with_retry_after() -> None:
    (start, body) = cut_off(None, None)
    assert start["status"] == 503 and (b"retry-after", b"5") in start["headers"]
    assert json.loads(body["body"])["error"]["code"] == "gateway_shutdown"


def test_a_stream_under_way_ends_with_an_error_event() -> None:
    sent = cut_off([(b"content-type", b"text/event-stream; charset=utf-8")], b"data: {}\n\n")
    assert sent[-1]["more_body"] is False and b'"gateway_shutdown"' in sent[-1]["body"]


def test_a_plain_body_half_sent_is_not_ended_as_if_whole() -> None:
    """A batch output's download cut at shutdown: ending the chunked body would make it read as complete."""
    sent = cut_off([(b"content-type", b"application/octet-stream")], b'{"id": 1}\n')
    assert not any(m["type"] == "http.response.body" and not m.get("more_body", False) for m in sent)


def test_any_other_cancellation_is_the_callers_and_goes_through() -> None:
    """The Batch API's runner calls the app in-process and cancels a line's request when its batch is cancelled:
    answered as a shutdown, the cancel was lost and the batch ran to its end (fresh clone run 35)."""
    sent: list[dict[str, Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await asyncio.sleep(3600)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def main() -> None:
        task = asyncio.ensure_future(ShutdownAnswer(app)({"type": "http"}, send, send))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert sent == []
