"""``Client``: the synchronous OpenAI-compatible client (llama.cpp extensions included)."""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Iterator
from typing import Any, Self

import httpx

from ..engine import EngineProcess
from ..errors import ConfigError, ServerError
from . import _embeddings as E
from . import _shared as S
from . import answers as A
from ._engine import engine_now, start_embedded, wait_engine_back
from .assemble import StreamAssembler, StreamFailed, assembles, streamed_body


class BaseClient:
    """Talk to a llama-server or tiankong gateway at ``url`` (or ``TIANKONG_URL``), or start one.

    ``Client(model="smollm2-135m-instruct")`` starts an embedded managed engine for an installed model
    and stops it on :meth:`close` (or at the end of a ``with`` block); ``adapters=["formal"]`` loads registered
    LoRA adapters into it, chosen per request with ``chat(…, adapter="formal")``.
    """

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
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.engine: EngineProcess | None = None
        self._closed = False
        self._finalizer: weakref.finalize[Any, Any] | None = None
        resolved = S.base_url(url)
        S.check_client_args(model, api_key, timeout_s, adapters)
        limits = S.http_limits(S.check_max_connections(max_connections))
        if url is not None:  # given here (TIANKONG_URL is a default: callers that start engines pass their settings)
            S.check_engine_args(url, ctx=ctx, slots=slots, llama_server=llama_server, adapters=adapters,
                                embeddings=embeddings)
        elif resolved is not None and adapters:  # TIANKONG_URL's server: adapters cannot be loaded into it
            S.check_engine_args(f"{resolved} (from TIANKONG_URL)", adapters=adapters)
        if resolved is None:
            if not model:
                raise ConfigError("no server to talk to", hint="pass url=…, set TIANKONG_URL, or pass model=…")
            self.engine = start_embedded(model, ctx=ctx, slots=slots, llama_server=llama_server, adapters=adapters,
                                         embeddings=embeddings)
            # a client dropped without close() stops its engine when collected (it ran until the interpreter
            # exited: the engine's watchdog thread holds the engine, not the client)
            self._finalizer = weakref.finalize(self, self.engine.stop)
            resolved = self.engine.url
        self.url = resolved
        self.model = model
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        try:
            self._http = httpx.Client(base_url=resolved, timeout=timeout_s, headers=headers, limits=limits,
                                      transport=transport)
        except BaseException:
            self.close()  # the engine started above has no other owner
            raise
        self._lora: Any = S.UNKNOWN
        self._info: S.ServerInfo | None = None
        self._info_lock = threading.Lock()
        self._in_flight: threading.BoundedSemaphore | None = None

    # --- plumbing -------------------------------------------------------------------------------

    def _send(self, method: str, path: str, body: dict[str, Any] | None, stream: bool = False) -> httpx.Response:
        """Send; again after ``Retry-After`` while the server is busy (429/503, bounded: ``S.retry_delay``)."""
        waited, attempt = 0.0, 0
        while True:
            response = self._send_once(method, path, body, stream)
            delay = S.retry_delay(response.status_code, response.headers.get("retry-after"), attempt, waited)
            if delay is None:
                return response
            response.close()
            time.sleep(delay)
            waited, attempt = waited + delay, attempt + 1

    def _send_once(self, method: str, path: str, body: dict[str, Any] | None, stream: bool) -> httpx.Response:
        """Send; once more if a reused keep-alive connection was closed before any answer, or if the embedded
        engine was restarted by its watchdog (on a new port) while this request could not connect."""
        if self._closed:
            raise S.closed_error()
        if (engine := self.engine) is not None and engine_now(engine) == "wait":  # being restarted: its port
            self._engine_back()  # answers 503 while it loads
        self._follow_engine()
        request = S.build_request(self._http, method, path, body)
        # sent again to an engine its watchdog restarted only when this request cannot have crashed it: refused
        # (it reached no process), or reset on a process that was dead before it was sent (a request that itself
        # crashes the engine is not sent twice: each time would spend a restart of the budget)
        dead_at_send = (engine := self.engine) is not None and not engine.alive()
        try:
            return self._http.send(request, stream=stream)
        except httpx.RemoteProtocolError as exc:
            if S.is_stale_connection(exc):
                return self._http.send(request, stream=stream)
            if not (dead_at_send and self._engine_back()):
                raise
        except (httpx.ReadError, httpx.WriteError):
            if not (dead_at_send and self._engine_back()):
                raise
        except httpx.ConnectError:
            if not self._engine_back():
                raise
        return self._http.send(S.build_request(self._http, method, path, body), stream=stream)

    def _follow_engine(self) -> None:
        """An embedded engine restarted by its watchdog listens on another port: requests go there."""
        engine = self.engine  # one read: close() may set it to None from another thread
        if engine is not None and engine.url != self.url:
            self.url = engine.url
            self._http.base_url = httpx.URL(self.url)

    def _engine_back(self) -> bool:
        """Wait for an embedded engine being restarted (``wait_engine_back``); whether it is back, then followed."""
        engine = self.engine  # one read: close() may set it to None from another thread
        if engine is None or not wait_engine_back(engine, self.url):
            return False
        self._follow_engine()
        return True

    def server(self) -> S.ServerInfo:
        """A tiankong gateway or an engine, and its slots: asked once per client (``GET /health``, ``/props``)."""
        if self._info is None:
            with self._info_lock:
                if self._info is None:
                    info = self._detect()
                    if info is None:
                        return S.ServerInfo(False, S.DEFAULT_SLOTS)  # unreachable now: asked again next time
                    self._in_flight = threading.BoundedSemaphore(info.slots)
                    self._info = info
        return self._info

    def _detect(self) -> S.ServerInfo | None:
        if self.engine is not None:
            return S.ServerInfo(False, self.engine.config.slots)
        try:
            health = self._send_once("GET", "/health", None, False)
            props = self._send_once("GET", "/props", None, False)
        except httpx.HTTPError:
            return None
        return S.server_info(health.status_code, A.json_or_none(health),
                             A.json_or_none(props) if props.status_code == 200 else None)

    def _limited(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """``_request`` holding one of the server's slots: a client never has more requests in flight than the
        server has slots, so a request waits here, not in the server's queue (where its timeout would run)."""
        self.server()
        if self._in_flight is None:
            return self._request(method, path, body)
        with self._in_flight:
            return self._request(method, path, body)

    def _with_lora(self, path: str, body: dict[str, Any] | None) -> dict[str, Any] | None:
        """Adapter names → the engine's ids (the adapter table is read once per client)."""
        if body is None or path not in S.LORA_PATHS:
            return body
        if self._lora is S.UNKNOWN:
            try:
                response = self._send("GET", "/lora-adapters", None)
            except httpx.HTTPError as exc:
                raise A.connect_error(self.url, exc) from None
            data = A.json_or_none(response) if response.status_code == 200 else None
            self._lora = S.read_adapter_table(response.status_code, data, body)
            if self._lora is S.UNKNOWN:  # not ready: plain request goes as it is, the table is read next time
                return body
        return S.with_lora(path, body, self._lora)

    def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        body = self._with_lora(path, body)
        if method == "POST" and body is not None and assembles(path, body):
            return self._assembled(path, body)
        try:
            response = self._send(method, path, body)
        except httpx.HTTPError as exc:
            raise A.connect_error(self.url, exc) from None
        A.check_response(response.status_code, response.text)
        return A.answer_json(response, str(self.url))

    def _assembled(self, path: str, body: dict[str, Any]) -> Any:
        """A generation read as a stream (client/assemble.py: so that giving up on it stops the engine)."""
        assembler = StreamAssembler(chat=path.endswith("/chat/completions"))
        try:
            response = self._send("POST", path, streamed_body(body), stream=True)
            try:
                if response.status_code >= 400:
                    response.read()
                    A.check_response(response.status_code, response.text)
                for chunk in response.iter_raw():
                    assembler.feed(chunk)
            finally:
                response.close()
            return assembler.result()
        except httpx.HTTPError as exc:
            raise A.connect_error(self.url, exc) from None
        except StreamFailed as exc:
            raise A.assembled_error(exc) from None

    def _stream(self, path: str, body: dict[str, Any]) -> Iterator[S.StreamChunk]:
        body = self._with_lora(path, body) or body
        try:
            response = self._send("POST", path, body, stream=True)
            try:
                if response.status_code >= 400:
                    response.read()
                    A.check_response(response.status_code, response.text)
                end = A.StreamEnd()
                for line in response.iter_lines():
                    event = A.parse_stream_event(line)
                    chunk = S.chunk_from_event(event) if event else None
                    end.see(line, chunk)
                    if chunk is not None:
                        yield chunk
                end.check()
            finally:
                response.close()
        except httpx.HTTPError as exc:
            raise A.connect_error(self.url, exc) from None

    # --- API ------------------------------------------------------------------------------------

    def chat(self, messages: str | list[S.Message], *, system: str | None = None, **options: Any) -> S.ChatResult:
        """One chat completion at temperature 0 with a fixed seed unless told otherwise."""
        body = S.chat_body(S.as_messages(messages, system), self.model, False, S.generation_options(**options))
        return S.parse_chat(self._request("POST", "/v1/chat/completions", body))

    def stream_chat(
        self, messages: str | list[S.Message], *, system: str | None = None, draft: bool = False, **options: Any
    ) -> Iterator[S.StreamChunk]:
        """A streamed chat. ``draft=True`` (a tiankong gateway with ``[cascade]``): the draft model's chunks
        (``phase="draft"``), one ``phase="replace"`` chunk, then the quality model's (docs/cascade.md)."""
        body = S.draft_option(S.chat_body(S.as_messages(messages, system), self.model, True,
                                          S.generation_options(**options)), draft)
        phases = S.DraftPhases(draft)
        for chunk in self._stream("/v1/chat/completions", body):
            yield phases.mark(chunk)

    def complete(self, prompt: str, **options: Any) -> S.ChatResult:
        """A raw text completion (no chat template): for base models such as gemma3-270m."""
        body = S.completion_body(prompt, self.model, False, S.generation_options(**options))
        return S.parse_chat(self._request("POST", "/v1/completions", body))

    def stream_complete(self, prompt: str, **options: Any) -> Iterator[S.StreamChunk]:
        body = S.completion_body(prompt, self.model, True, S.generation_options(**options))
        yield from self._stream("/v1/completions", body)

    def embed(self, texts: str | list[str]) -> list[list[float]]:
        """Embeddings (the engine must run with embeddings enabled); mean-pooled here when the engine gives
        every token's vector (``--pooling none``, tiankong's engines with embeddings on)."""
        items = E.embeddings_items(texts)
        if len(items) > E.MAX_INPUTS:  # a gateway takes 2,048 a request: the client sends them in parts
            return [v for at in range(0, len(items), E.MAX_INPUTS) for v in self.embed(items[at:at + E.MAX_INPUTS])]
        try:
            data = self._request("POST", "/v1/embeddings", E.embeddings_body(items, self.model))
        except ServerError as exc:
            if not E.per_token_refused(exc):
                raise E.embeddings_off(exc, self.engine is not None) from None
            try:
                rows = self._request("POST", "/embeddings", {"content": items})
            except ServerError as again:
                raise E.embeddings_off(again, self.engine is not None) from None
            return E.mean_pooled(rows)[0]
        return [list(map(float, row["embedding"])) for row in A.answer_field(data, "data", self.url)]

    def tokenize(self, text: str) -> list[int]:
        answer = self._request("POST", "/tokenize", {"content": S.text_arg(text, "text")})
        tokens = A.answer_field(answer, "tokens", self.url)
        return [int(t) for t in tokens]

    def detokenize(self, tokens: list[int]) -> str:
        return str(A.answer_field(self._request("POST", "/detokenize", {"tokens": S.tokens_arg(tokens)}), "content",
                                  self.url))

    def health(self) -> dict[str, Any]:
        data = self._request("GET", "/health")
        return data if isinstance(data, dict) else {"status": data}

    def models(self) -> list[str]:
        return [str(item["id"]) for item in A.answer_field(self._request("GET", "/v1/models"), "data",
                                                           self.url)]

    def close(self) -> None:
        self._closed = True
        if self._finalizer is not None:
            self._finalizer.detach()
        if hasattr(self, "_http"):
            self._http.close()
        if self.engine is not None:
            self.engine.stop()
            self.engine = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
