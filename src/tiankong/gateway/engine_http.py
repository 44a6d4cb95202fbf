"""A lean HTTP/1.1 client for the hot path: JSON POSTs to our own llama-server over loopback.

httpx costs about 1 ms of CPU per request on a small machine, which is most of what a gateway may add (the
target is <= 2 ms at p50). Measured against the well-kept alternatives on the same canned upstream
(``benchmarks/gateway_overhead.py --clients 300 --rounds 6``, ``benchmarks/results/gateway/http-clients.txt``, 2
cores): CPU per request 0.18 ms here, aiohttp 0.25 ms (1.4×), httpcore 0.72 ms (4.1×), httpx 1.0 ms (5.8×);
sequential p50 1.37 ms vs 1.63 / 1.87 / 2.12 ms. The margin over aiohttp, the closest, is 0.25 ms at p50 and
0.07 ms of CPU per request — an eighth of the 2 ms budget, and one dependency tree (aiohttp, multidict, yarl,
frozenlist, aiosignal) less — so this client stays; should aiohttp close the gap, switch to it.

It does only what the proxy needs: keep-alive connections pooled per engine address, ``Content-Length`` and
``chunked`` responses, streaming, and closing the connection when a request is abandoned (llama-server then
cancels the generation). Everything else (health probes, ``/slots``, the task client) still uses httpx.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

from ..errors import TransportError, Unreachable

HEAD_LIMIT = 64 * 1024


class EngineHTTPError(TransportError):
    """The engine could not be reached, or closed the connection before answering completely."""


class EngineTimeout(EngineHTTPError):
    """The engine did not answer in time."""


class EngineUnreachable(EngineHTTPError, Unreachable):
    """No connection to the engine could be made (refused, no route, a connect timeout): nothing was sent."""


class _Conn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.idle_since = 0.0

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


class EngineResponse:
    """Status, headers and a body to read once (fully or as it arrives)."""

    def __init__(self, pool: ConnectionPool, key: tuple[str, int], conn: _Conn, status: int,
                 headers: dict[str, str]) -> None:
        self.status_code = status
        self.headers = headers
        self.content = b""
        self._pool, self._key, self._conn = pool, key, conn
        self._done = False
        self._closed = False
        self._reusable = headers.get("connection", "").lower() != "close"

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        """The body as it arrives (chunked transfer encoding decoded)."""
        reader = self._conn.reader
        try:
            if "chunked" in self.headers.get("transfer-encoding", "").lower():
                async for piece in _chunks(reader):
                    yield piece
            elif "content-length" in self.headers:
                yield await reader.readexactly(int(self.headers["content-length"]))
            else:
                self._reusable = False
                while piece := await reader.read(65536):
                    yield piece
        except (asyncio.IncompleteReadError, ConnectionError, OSError, ValueError) as exc:
            raise EngineHTTPError(f"the engine closed the connection mid-answer ({type(exc).__name__})") from None
        self._done = True

    async def aread(self) -> bytes:
        self.content = b"".join([piece async for piece in self.aiter_raw()])
        await self.aclose()
        return self.content

    async def aclose(self) -> None:
        """Return the connection for reuse when the answer was read completely; otherwise close it."""
        if self._closed:
            return
        self._closed = True
        if self._done and self._reusable:
            self._conn.idle_since = time.monotonic()
            self._pool.release(self._key, self._conn)
        else:
            self._conn.close()


async def _chunks(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    while True:
        size_line = await reader.readuntil(b"\r\n")
        size = int(size_line.split(b";", 1)[0].strip(), 16)
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers, then the empty line
                pass
            return
        data = await reader.readexactly(size + 2)
        yield data[:-2]


class ConnectionPool:
    """Keep-alive connections per engine address; idle ones expire before llama-server closes them (5 s)."""

    def __init__(self, timeout_s: float = 600.0, keepalive_expiry_s: float = 2.0, max_idle: int = 64) -> None:
        self.timeout_s = timeout_s
        self.keepalive_expiry_s = keepalive_expiry_s
        self.max_idle = max_idle
        self._idle: dict[tuple[str, int], list[_Conn]] = {}

    async def post(self, url: str, body: bytes, *, stream: bool,
                   headers: dict[str, str] | None = None) -> EngineResponse:
        """POST ``body`` (JSON); with ``stream=False`` the answer is read into ``.content`` before returning."""
        parts = urlsplit(url)
        key = (parts.hostname or "127.0.0.1", parts.port or 80)
        extra = "".join(f"{name}: {value}\r\n" for name, value in (headers or {}).items())
        head = (f"POST {parts.path or '/'} HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\n"
                f"Accept: */*\r\n{extra}Content-Length: {len(body)}\r\n\r\n").encode("latin-1")
        for attempt in (0, 1):
            conn, reused = await self._connection(key)
            try:
                response = await self._exchange(key, conn, head + body)
            except EngineTimeout:
                conn.close()
                raise
            except EngineHTTPError:
                conn.close()
                if reused and attempt == 0:
                    continue  # a kept-alive connection the engine had closed: nothing was processed, send again
                raise
            except BaseException:
                conn.close()  # cancelled (client gone, deadline): closing makes llama-server stop
                raise
            if not stream:
                try:
                    await response.aread()
                except BaseException:
                    conn.close()
                    raise
            return response
        raise AssertionError("unreachable")

    async def _exchange(self, key: tuple[str, int], conn: _Conn, request: bytes) -> EngineResponse:
        try:
            conn.writer.write(request)
            async with asyncio.timeout(self.timeout_s):
                await conn.writer.drain()
                raw = await conn.reader.readuntil(b"\r\n\r\n")
        except TimeoutError:
            raise EngineTimeout("the engine did not answer in time") from None
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, OSError) as exc:
            raise EngineHTTPError(f"the engine closed the connection ({type(exc).__name__})") from None
        lines = raw.decode("latin-1").split("\r\n")
        try:
            status = int(lines[0].split(" ", 2)[1])
        except (IndexError, ValueError):
            raise EngineHTTPError(f"the engine answered something that is not HTTP: {lines[0][:80]!r}") from None
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        return EngineResponse(self, key, conn, status, headers)

    async def _connection(self, key: tuple[str, int]) -> tuple[_Conn, bool]:
        idle = self._idle.get(key, [])
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if now - conn.idle_since < self.keepalive_expiry_s and not conn.reader.at_eof():
                return conn, True
            conn.close()
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(*key, limit=HEAD_LIMIT), 10.0)
        except (OSError, TimeoutError) as exc:
            raise EngineUnreachable(f"cannot connect to the engine at {key[0]}:{key[1]} ({type(exc).__name__})") \
                from None
        return _Conn(reader, writer), False

    def release(self, key: tuple[str, int], conn: _Conn) -> None:
        idle = self._idle.setdefault(key, [])
        if len(idle) < self.max_idle:
            idle.append(conn)
        else:
            conn.close()

    async def close(self) -> None:
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()
