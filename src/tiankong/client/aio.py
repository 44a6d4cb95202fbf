"""``AsyncClient``: the asyncio twin of ``Client`` (same method names, same helpers)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import weakref
from collections.abc import AsyncIterator
from typing import Any, Self

import httpx

from ..engine import EngineProcess
from ..errors import ConfigError, ServerError
from . import _embeddings as E
from . import _shared as S
from . import answers as A
from ._engine import engine_now, start_embedded, wait_engine_back
from .assemble import StreamAssembler, StreamFailed, assembles, streamed_body


class AsyncBaseClient:
    """Async client; with ``model=`` and no URL an embedded engine starts on first use."""

    def __init__(
        self,
        url: str | None = None,
        *,
        model: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 300.0,
        ctx: int = 4096,
        slots: int = 2,
        llama_server: str | None = None,
        max_connections: int = 64,
        adapters: list[str] | None = None,
        embeddings: bool = False,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.engine: EngineProcess | None = None
        self._closed = False
        self._finalizer: weakref.finalize[Any, Any] | None = None
        self.url = S.base_url(url)
        S.check_client_args(model, api_key, timeout_s, adapters)
        if self.url is None and not model:
            raise ConfigError("no server to talk to", hint="pass url=…, set TIANKONG_URL, or pass model=…")
        if url is not None:  # given here (TIANKONG_URL is a default: callers that start engines pass their settings)
            S.check_engine_args(url, ctx=ctx, slots=slots, llama_server=llama_server, adapters=adapters,
                                embeddings=embeddings)
        elif self.url is not None and adapters:  # TIANKONG_URL's server: adapters cannot be loaded into it
            S.check_engine_args(f"{self.url} (from TIANKONG_URL)", adapters=adapters)
        self.model = model
        self._engine_args = {"ctx": ctx, "slots": slots, "llama_server": llama_server, "adapters": adapters,
                             "embeddings": embeddings}
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout_s = timeout_s
        self._transport = transport
        self._limits = S.http_limits(S.check_max_connections(max_connections))
        self._http: httpx.AsyncClient | None = None
        self._start_lock = asyncio.Lock()
        self._engine_lock = threading.Lock()
        self._starting: concurrent.futures.Future[EngineProcess] | None = None
        self._lora: Any = S.UNKNOWN
        self._info: S.ServerInfo | None = None
        self._info_lock = asyncio.Lock()
        self._in_flight: asyncio.Semaphore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _on_this_loop(self) -> None:
        """A client used from another event loop (a second ``asyncio.run``) gets a connection pool, locks and a
        slot semaphore of that loop: the old ones belong to a loop that is closed ("Event loop is closed")."""
        loop = asyncio.get_running_loop()
        if self._loop is loop:
            return
        if self._loop is not None:
            self._http = None
            self._start_lock, self._info_lock = asyncio.Lock(), asyncio.Lock()
            self._in_flight, self._info = None, None
        self._loop = loop

    async def _client(self) -> httpx.AsyncClient:
        if self._closed:  # it was reopened silently (and an embedded engine's port was dead)
            raise S.closed_error()
        self._on_this_loop()
        if self._http is not None:
            return self._http
        async with self._start_lock:
            if self._http is None:
                if self.url is None:
                    # shielded: a caller that gives up (wait_for, a cancelled task) leaves the start running, and
                    # the engine it makes is this client's (the next call uses it, close() stops it)
                    engine = await asyncio.shield(asyncio.wrap_future(self._start_engine()))
                    if self._closed:  # closed while it started: close() has stopped it, and no pool is made
                        raise S.closed_error()
                    self.url = engine.url
                self._http = httpx.AsyncClient(
                    base_url=self.url, timeout=self._timeout_s, headers=self._headers, limits=self._limits,
                    transport=self._transport,
                )
        return self._http

    def _start_engine(self) -> concurrent.futures.Future[EngineProcess]:
        """The embedded engine's start, once per client, on a thread of its own (not the loop's executor, whose
        threads ``asyncio.run`` waits for and ends): it outlives a caller that gave up and the loop that asked."""
        with self._engine_lock:
            if self._starting is None:
                self._starting = concurrent.futures.Future()
                self._starting.set_running_or_notify_cancel()  # running: an asyncio cancel cannot cancel it
                threading.Thread(target=self._run_start, args=(self._starting,), name="tiankong-engine-start",
                                 daemon=True).start()
            return self._starting

    def _run_start(self, done: concurrent.futures.Future[EngineProcess]) -> None:
        assert self.model is not None
        try:
            engine = start_embedded(self.model, **self._engine_args)  # type: ignore[arg-type]
        except BaseException as exc:  # noqa: BLE001 - handed to the callers
            with self._engine_lock:
                self._starting = None  # a later call may try again
            done.set_exception(exc)
            return
        with self._engine_lock:
            closed = self._closed
            if not closed:
                self.engine = engine
                self._finalizer = weakref.finalize(self, engine.stop)  # stopped when a dropped client is collected
        if closed:  # closed while it started: nobody holds it
            engine.stop()
            done.set_exception(S.closed_error())
            return
        done.set_result(engine)

    async def _send(self, method: str, path: str, body: dict[str, Any] | None,
                    stream: bool = False) -> httpx.Response:
        """Send; again after ``Retry-After`` while the server is busy (429/503, bounded: ``S.retry_delay``)."""
        waited, attempt = 0.0, 0
        while True:
            response = await self._send_once(method, path, body, stream)
            delay = S.retry_delay(response.status_code, response.headers.get("retry-after"), attempt, waited)
            if delay is None:
                return response
            await response.aclose()
            await asyncio.sleep(delay)
            waited, attempt = waited + delay, attempt + 1

    async def server(self) -> S.ServerInfo:
        """A tiankong gateway or an engine, and its slots: asked once per client (``GET /health``, ``/props``)."""
        self._on_this_loop()
        if self._info is None:
            async with self._info_lock:
                if self._info is None:
                    info = await self._detect()
                    if info is None:
                        return S.ServerInfo(False, S.DEFAULT_SLOTS)  # unreachable now: asked again next time
                    self._in_flight = asyncio.Semaphore(info.slots)
                    self._info = info
        return self._info

    async def _detect(self) -> S.ServerInfo | None:
        await self._client()
        if self.engine is not None:
            return S.ServerInfo(False, self.engine.config.slots)
        try:
            health = await self._send_once("GET", "/health", None, False)
            props = await self._send_once("GET", "/props", None, False)
        except httpx.HTTPError:
            return None
        return S.server_info(health.status_code, A.json_or_none(health),
                             A.json_or_none(props) if props.status_code == 200 else None)

    async def _limited(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """``_request`` holding one of the server's slots: a client never has more requests in flight than the
        server has slots, so a request waits here, not in the server's queue (where its timeout would run)."""
        await self.server()
        if self._in_flight is None:
            return await self._request(method, path, body)
        async with self._in_flight:
            return await self._request(method, path, body)

    async def _send_once(self, method: str, path: str, body: dict[str, Any] | None,
                         stream: bool) -> httpx.Response:
        """Send; once more if a reused keep-alive connection was closed before any answer, or if the embedded
        engine was restarted by its watchdog (on a new port) while this request could not connect."""
        http = await self._client()
        if (engine := self.engine) is not None and engine_now(engine) == "wait":  # being restarted: its port
            await self._engine_back(http)  # answers 503 while it loads
        self._follow_engine(http)
        request = S.build_request(http, method, path, body)
        # sent again to an engine its watchdog restarted only when this request cannot have crashed it: refused
        # (it reached no process), or reset on a process that was dead before it was sent (a request that itself
        # crashes the engine is not sent twice: each time would spend a restart of the budget)
        dead_at_send = (engine := self.engine) is not None and not engine.alive()
        try:
            return await http.send(request, stream=stream)
        except httpx.RemoteProtocolError as exc:
            if S.is_stale_connection(exc):
                return await http.send(request, stream=stream)
            if not (dead_at_send and await self._engine_back(http)):
                raise
        except (httpx.ReadError, httpx.WriteError):
            if not (dead_at_send and await self._engine_back(http)):
                raise
        except httpx.ConnectError:
            if not await self._engine_back(http):
                raise
        return await http.send(S.build_request(http, method, path, body), stream=stream)

    def _follow_engine(self, http: httpx.AsyncClient) -> None:
        """An embedded engine restarted by its watchdog listens on another port: requests go there."""
        engine = self.engine  # one read: close() may set it to None from another thread
        if engine is not None and engine.url != self.url:
            self.url = engine.url
            http.base_url = httpx.URL(self.url)

    async def _engine_back(self, http: httpx.AsyncClient) -> bool:
        """Wait for an embedded engine being restarted (``wait_engine_back``); whether it is back, then followed."""
        engine = self.engine  # one read: close() may set it to None from another thread
        if engine is None or not await asyncio.to_thread(wait_engine_back, engine, self.url):
            return False
        self._follow_engine(http)
        return True

    async def _with_lora(self, path: str, body: dict[str, Any] | None) -> dict[str, Any] | None:
        """Adapter names → the engine's ids (the adapter table is read once per client)."""
        if body is None or path not in S.LORA_PATHS:
            return body
        if self._lora is S.UNKNOWN:
            try:
                response = await self._send("GET", "/lora-adapters", None)
            except httpx.HTTPError as exc:
                raise A.connect_error(str(self.url), exc) from None
            data = A.json_or_none(response) if response.status_code == 200 else None
            self._lora = S.read_adapter_table(response.status_code, data, body)
            if self._lora is S.UNKNOWN:  # not ready: plain request goes as it is, the table is read next time
                return body
        return S.with_lora(path, body, self._lora)

    async def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        body = await self._with_lora(path, body)
        if method == "POST" and body is not None and assembles(path, body):
            return await self._assembled(path, body)
        try:
            response = await self._send(method, path, body)
        except httpx.HTTPError as exc:
            raise A.connect_error(str(self.url), exc) from None
        A.check_response(response.status_code, response.text)
        return A.answer_json(response, str(self.url))

    async def _forward(self, path: str, body: dict[str, Any]) -> Any:
        """POST a body exactly as it is (adapter names and long generations left to the server): for a tiankong
        gateway, which maps and assembles them itself."""
        try:
            response = await self._send("POST", path, body)
        except httpx.HTTPError as exc:
            raise A.connect_error(str(self.url), exc) from None
        A.check_response(response.status_code, response.text)
        return A.answer_json(response, str(self.url))

    async def _assembled(self, path: str, body: dict[str, Any]) -> Any:
        """A generation read as a stream (client/assemble.py: so that giving up on it stops the engine)."""
        assembler = StreamAssembler(chat=path.endswith("/chat/completions"))
        try:
            response = await self._send("POST", path, streamed_body(body), stream=True)
            try:
                if response.status_code >= 400:
                    await response.aread()
                    A.check_response(response.status_code, response.text)
                async for chunk in response.aiter_raw():
                    assembler.feed(chunk)
            finally:
                await response.aclose()
            return assembler.result()
        except httpx.HTTPError as exc:
            raise A.connect_error(str(self.url), exc) from None
        except StreamFailed as exc:
            raise A.assembled_error(exc) from None

    async def _stream(self, path: str, body: dict[str, Any]) -> AsyncIterator[S.StreamChunk]:
        body = await self._with_lora(path, body) or body
        try:
            response = await self._send("POST", path, body, stream=True)
            try:
                if response.status_code >= 400:
                    await response.aread()
                    A.check_response(response.status_code, response.text)
                end = A.StreamEnd()
                async for line in response.aiter_lines():
                    event = A.parse_stream_event(line)
                    chunk = S.chunk_from_event(event) if event else None
                    end.see(line, chunk)
                    if chunk is not None:
                        yield chunk
                end.check()
            finally:
                await response.aclose()
        except httpx.HTTPError as exc:
            raise A.connect_error(str(self.url), exc) from None

    async def chat(
        self, messages: str | list[S.Message], *, system: str | None = None, **options: Any
    ) -> S.ChatResult:
        body = S.chat_body(S.as_messages(messages, system), self.model, False, S.generation_options(**options))
        return S.parse_chat(await self._request("POST", "/v1/chat/completions", body))

    async def stream_chat(
        self, messages: str | list[S.Message], *, system: str | None = None, draft: bool = False, **options: Any
    ) -> AsyncIterator[S.StreamChunk]:
        """A streamed chat. ``draft=True`` (a tiankong gateway with ``[cascade]``): the draft model's chunks
        (``phase="draft"``), one ``phase="replace"`` chunk, then the quality model's (docs/cascade.md)."""
        body = S.draft_option(S.chat_body(S.as_messages(messages, system), self.model, True,
                                          S.generation_options(**options)), draft)
        phases = S.DraftPhases(draft)
        async for chunk in self._stream("/v1/chat/completions", body):
            yield phases.mark(chunk)

    async def complete(self, prompt: str, **options: Any) -> S.ChatResult:
        body = S.completion_body(prompt, self.model, False, S.generation_options(**options))
        return S.parse_chat(await self._request("POST", "/v1/completions", body))

    async def stream_complete(self, prompt: str, **options: Any) -> AsyncIterator[S.StreamChunk]:
        body = S.completion_body(prompt, self.model, True, S.generation_options(**options))
        async for chunk in self._stream("/v1/completions", body):
            yield chunk

    async def embed(self, texts: str | list[str]) -> list[list[float]]:
        items = E.embeddings_items(texts)
        if len(items) > E.MAX_INPUTS:  # a gateway takes 2,048 a request: the client sends them in parts
            step = E.MAX_INPUTS
            return [v for at in range(0, len(items), step) for v in await self.embed(items[at:at + step])]
        try:
            data = await self._request("POST", "/v1/embeddings", E.embeddings_body(items, self.model))
        except ServerError as exc:
            if not E.per_token_refused(exc):
                raise E.embeddings_off(exc, self.engine is not None) from None
            try:
                rows = await self._request("POST", "/embeddings", {"content": items})
            except ServerError as again:
                raise E.embeddings_off(again, self.engine is not None) from None
            return E.mean_pooled(rows)[0]
        return [list(map(float, row["embedding"])) for row in A.answer_field(data, "data", str(self.url))]

    async def tokenize(self, text: str) -> list[int]:
        answer = await self._request("POST", "/tokenize", {"content": S.text_arg(text, "text")})
        return [int(t) for t in A.answer_field(answer, "tokens", str(self.url))]

    async def detokenize(self, tokens: list[int]) -> str:
        answer = await self._request("POST", "/detokenize", {"tokens": S.tokens_arg(tokens)})
        return str(A.answer_field(answer, "content", str(self.url)))

    async def health(self) -> dict[str, Any]:
        data = await self._request("GET", "/health")
        return data if isinstance(data, dict) else {"status": data}

    async def models(self) -> list[str]:
        answer = await self._request("GET", "/v1/models")
        return [str(item["id"]) for item in A.answer_field(answer, "data", str(self.url))]

    async def close(self) -> None:
        with self._engine_lock:  # an engine still starting is stopped by its start (_run_start)
            self._closed = True
            engine, self.engine = self.engine, None
            if self._finalizer is not None:
                self._finalizer.detach()
        if self._http is not None:
            if self._loop is asyncio.get_running_loop():  # else its connections died with their loop
                await self._http.aclose()
            self._http = None
        if engine is not None:
            await asyncio.to_thread(engine.stop)

    async def __aenter__(self) -> Self:
        await self._client()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
