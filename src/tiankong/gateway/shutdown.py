"""A request still running when the gateway stops is answered, not dropped with a traceback.

``tiankong serve`` stops on SIGTERM or Ctrl-C: uvicorn stops accepting, waits ``timeout_graceful_shutdown``
for the requests in flight, then cancels what is left. Without this wrapper each cancelled request logged an
``Exception in ASGI application`` traceback and its client saw the connection drop: a stream cut mid-sentence with
no end, a plain request with no answer at all. :class:`ShutdownAnswer` catches that cancellation at the outside of
the app and says what happened in the client's own terms — a 503 with ``Retry-After`` when nothing was answered
yet, one ``data: {"error": …}`` event that ends a stream already under way — then lets the task end. A plain body
half sent (a file download) is not ended: the dropped connection is what tells its client it is incomplete.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from .responses import error_body, sse_error

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

MESSAGE = "the gateway is shutting down; retry when it is back"
CODE = "gateway_shutdown"
#: the message uvicorn cancels a request's task with when it stops (``Server.shutdown``)
UVICORN_SHUTDOWN = "timeout graceful shutdown exceeded"
#: the most a goodbye may take: the process is on its way out (uvicorn waits for the cancelled tasks)
SEND_S = 1.0
log = logging.getLogger("tiankong.gateway")


class ShutdownAnswer:
    """Pure ASGI wrapper; see the module docstring."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        sent: dict[str, Any] = {"started": False, "ended": False, "sse": False}

        async def watched(message: Message) -> None:
            if message["type"] == "http.response.start":
                sent["started"] = True
                sent["sse"] = any(k.lower() == b"content-type" and v.startswith(b"text/event-stream")
                                  for k, v in message.get("headers", []))
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                sent["ended"] = True
            await send(message)

        try:
            await self.app(scope, receive, watched)
        except asyncio.CancelledError as exc:
            # only uvicorn's own cancellation at shutdown (after timeout_graceful_shutdown; it does not look at how
            # the task ends, and re-raised it is logged as the traceback this avoids). Any other is the caller's —
            # the Batch API's runner calls this app in-process and cancels a line's request when its batch is
            # cancelled: answered here, the cancel was lost and the batch ran on (fresh clone run 35)
            if not any(UVICORN_SHUTDOWN in str(arg) for arg in exc.args):
                raise
            log.warning("stopping: %s %s was cut off", scope.get("method", ""), scope.get("path", ""))
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(_goodbye(send, sent), SEND_S)


async def _goodbye(send: Send, sent: dict[str, Any]) -> None:
    if sent["ended"]:
        return
    if not sent["started"]:
        body = json.dumps(error_body(MESSAGE, "server_error", CODE)).encode()
        await send({"type": "http.response.start", "status": 503,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"retry-after", b"5"), (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})
    elif sent["sse"]:
        await send({"type": "http.response.body", "body": sse_error(MESSAGE, "server_error", CODE),
                    "more_body": False})
    # a plain body half sent (a batch output file's download) is left unended: ending it would make a chunked body
    # cut short read as whole; the connection's close tells the client it was not
