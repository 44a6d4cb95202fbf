"""The gateway's HTTP server: uvicorn with a deadline for each request's head (slow-header clients are cut off).

uvicorn times out idle keep-alive connections but not a client that sends its request line and headers one
byte at a time: fifty such connections hold fifty sockets forever. ``TimedH11Protocol`` closes a connection
whose request head is not complete ``header_timeout_s`` after its first byte (or after the connection opened),
with one log line; the body has its own deadline where it is read (``body.read_json``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("tiankong.gateway")


class TimedH11Protocol(H11Protocol):
    header_timeout_s = 10.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_timer: asyncio.TimerHandle | None = None
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is h11.IDLE:  # still inside a request head
            self._arm()
        else:
            self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        if getattr(self, "_head_timer", None) is None:
            self._head_timer = self.loop.call_later(self.header_timeout_s, self._expire)

    def _disarm(self) -> None:
        timer = getattr(self, "_head_timer", None)
        if timer is not None:
            timer.cancel()
            self._head_timer = None

    def _expire(self) -> None:
        self._head_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            client = f"{self.client[0]}:{self.client[1]}" if self.client else "a client"
            log.warning("closed %s: no complete request head within %.0f s", client, self.header_timeout_s)
            self.transport.close()


def server_config(app: Any, host: str, port: int, *, header_timeout_s: float = 10.0,
                  **options: Any) -> uvicorn.Config:
    """uvicorn's configuration for the gateway, with the request-head deadline."""
    protocol = type("TimedH11Protocol", (TimedH11Protocol,), {"header_timeout_s": header_timeout_s})
    return uvicorn.Config(app, host=host, port=port, http=protocol, **options)
