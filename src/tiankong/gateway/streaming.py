"""Server-sent events with a deferred status line, keep-alive comments, deadlines and idle timeouts.

:class:`DeferredSSE` relays an async source of ``bytes`` (SSE data, passed through untouched) or ``Response``
items (errors). The status line is held back until the first item, so a request refused or failed before
any token still gets its real status (429, 503, 504); only when nothing arrives for ``keepalive_s`` does it
commit to ``200 text/event-stream`` and send ``: keep-alive`` comments while waiting. An error after that
becomes one ``data: {"error": …}`` event. The client's disconnect is watched the whole time and cancels the
source, which closes the upstream request (llama-server then stops generating).

:class:`SSEInspector` watches the relayed bytes for the first content token (TTFT), usage and timings.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncGenerator, Callable
from typing import Any

from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from .responses import deadline_exceeded, sse_error

SSE_HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache"),
               (b"x-accel-buffering", b"no")]
KEEPALIVE = b": keep-alive\n\n"

Item = bytes | Response
#: called once when the exchange ends: (the status it ended with — the HTTP status sent, or the error that cut off a
#: stream already sent as 200 —, outcome: ok|error|disconnect|deadline|idle)
OnClose = Callable[[int, str], None]


async def wait_disconnect(receive: Receive) -> None:
    """Return when the client has gone (the request body must have been read already)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


class ClientGone(Exception):
    """The client closed the connection or stopped reading."""


class DeferredSSE(Response):
    """An ASGI response relaying an SSE source; see the module docstring."""

    def __init__(self, source: AsyncGenerator[Item, None], *, deadline: float, timeout_s: float, keepalive_s: float,
                 idle_timeout_s: float, on_close: OnClose) -> None:  # no super().__init__: nothing is buffered
        self.status_code = 200
        self.background = None
        self.source = source
        self.deadline = deadline  # time.monotonic() value
        self.timeout_s = timeout_s
        self.keepalive_s = keepalive_s
        self.idle_timeout_s = idle_timeout_s
        self.on_close = on_close
        self.status = 0  # the HTTP status sent (200 once the first event went out)
        # how the stream ended when that was an error after the 200 (the deadline 504, an engine that broke off
        # 503, an idle engine 504): what the metrics count — a stream cut off was counted a success
        self.ended = 0
        self._send: Send | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self._send = send
        disconnect = asyncio.ensure_future(wait_disconnect(receive))
        outcome = "error"
        try:
            outcome = await self._pump(disconnect)
        except ClientGone:
            outcome = "disconnect"
        finally:
            disconnect.cancel()
            with contextlib.suppress(Exception):
                await self.source.aclose()
            self.on_close(self.ended or self.status or 499, outcome)

    async def _pump(self, disconnect: asyncio.Future[None]) -> str:
        pending: asyncio.Future[Item] = asyncio.ensure_future(anext(self.source))
        last_data: float | None = None
        try:
            while True:
                waiting: set[asyncio.Future[Any]] = {pending, disconnect}
                done, _ = await asyncio.wait(waiting, timeout=self._budget(last_data),
                                             return_when=asyncio.FIRST_COMPLETED)
                if disconnect in done:
                    return "disconnect"
                if pending not in done:
                    outcome = await self._quiet(last_data)
                    if outcome:
                        return outcome
                    continue
                try:
                    item = pending.result()
                except StopAsyncIteration:
                    await self._body(b"", more=False)
                    return "ok"
                if isinstance(item, Response):
                    await self._error(item)
                    return "error"
                await self._body(item)
                last_data = time.monotonic()
                pending = asyncio.ensure_future(anext(self.source))
        finally:
            if not pending.done():
                pending.cancel()
            await asyncio.gather(pending, return_exceptions=True)  # the source's clean-up runs: upstream closed

    def _budget(self, last_data: float | None) -> float:
        now = time.monotonic()
        budget = min(self.keepalive_s, self.deadline - now)
        if last_data is not None:
            budget = min(budget, last_data + self.idle_timeout_s - now)
        return max(budget, 0.0)

    async def _quiet(self, last_data: float | None) -> str | None:
        """Nothing arrived in time: deadline, idle timeout, or just a keep-alive."""
        now = time.monotonic()
        if now >= self.deadline:
            await self._error(deadline_exceeded(self.timeout_s, "while streaming"))
            return "deadline"
        if last_data is not None and now - last_data >= self.idle_timeout_s:
            self.ended = 504
            await self._error_event(sse_error(f"no data from the engine for {self.idle_timeout_s:g} s",
                                              "engine_error", "stream_idle_timeout"))
            return "idle"
        await self._body(KEEPALIVE)
        return None

    async def _error(self, response: Response) -> None:
        if self.status:
            self.ended = response.status_code
            await self._error_event(b"data: " + bytes(response.body) + b"\n\n")
            return
        self.status = response.status_code
        await self._raw({"type": "http.response.start", "status": self.status, "headers": response.raw_headers})
        await self._raw({"type": "http.response.body", "body": bytes(response.body), "more_body": False})

    async def _error_event(self, event: bytes) -> None:
        await self._body(event)
        await self._body(b"", more=False)

    async def _body(self, chunk: bytes, more: bool = True) -> None:
        if not self.status:
            self.status = 200
            await self._raw({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
        await self._raw({"type": "http.response.body", "body": chunk, "more_body": more})

    async def _raw(self, message: Message) -> None:
        """Send, bounded by the idle timeout: a client that stops reading abandons the stream."""
        assert self._send is not None
        try:
            async with asyncio.timeout(self.idle_timeout_s):
                await self._send(message)
        except (OSError, TimeoutError):
            raise ClientGone from None


class SSEInspector:
    """Finds the first content token, usage and timings in relayed SSE bytes, without re-encoding them."""

    def __init__(self, on_first_token: Callable[[], None]) -> None:
        self.on_first_token = on_first_token
        self.seen_token = False
        self.usage: dict[str, Any] | None = None
        self.timings: dict[str, Any] | None = None
        self._partial = b""

    def feed(self, chunk: bytes) -> None:
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()
        for line in lines:
            if line.startswith(b"data: {"):
                self._line(line)

    def _line(self, line: bytes) -> None:
        if self.seen_token and b'"usage"' not in line and b'"timings"' not in line:
            return
        try:
            event = json.loads(line[6:])
        except ValueError:
            return
        if not self.seen_token and _has_content(event):
            self.seen_token = True
            self.on_first_token()
        if isinstance(event.get("usage"), dict):
            self.usage = event["usage"]
        if isinstance(event.get("timings"), dict):
            self.timings = event["timings"]


def _has_content(event: dict[str, Any]) -> bool:
    for choice in event.get("choices") or []:
        delta = choice.get("delta") if isinstance(choice, dict) else None
        if isinstance(delta, dict) and (delta.get("content") or delta.get("reasoning_content")):
            return True
        if isinstance(choice, dict) and choice.get("text"):
            return True
    return bool(event.get("content"))
