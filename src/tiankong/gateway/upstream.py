"""Talking to an engine (a local llama-server or a remote upstream): forward a request, relay a stream, run a
task client, survive an engine restart.

One retry policy (``Upstream.retried``) for every path: when the engine fails under a request before anything
reached the client (crash, wedge restart, closed connection), the request waits up to ``retry_wait_s`` for the
engine to be ready again and is sent once more (generation requests have no side effects); otherwise the client
gets a 503 ``engine_error``. (``ConnectionPool`` retries once more only a keep-alive connection that the engine
had already closed: that is the connection's failure, not the engine's.)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any, TypeVar

import httpx
from starlette.responses import JSONResponse, Response

from ..api import AsyncClient
from ..client._shared import Usage, http_limits
from ..client.assemble import (
    MIN_TOKENS,
    StreamAssembler,
    StreamFailed,
    assembles,
    several_prompts,
    streamed_body,
)
from ..errors import InputTooLong, OutputError, ServerError, TiankongError, TransportError, Unreachable
from .admission import Lane
from .body import OPENAI_SAMPLED
from .cache_isolation import IsolatingTransport, isolated
from .engine_http import ConnectionPool, EngineHTTPError, EngineResponse, EngineTimeout
from .metrics import RequestRecord
from .responses import engine_unavailable, error_for, error_response, upstream_error, upstream_unreachable
from .streaming import Item, SSEInspector

T = TypeVar("T")
#: prompts in one /v1/completions request (each answered in turn in the request's slot: a long list holds it)
MAX_PROMPTS = 256


class Upstream:
    """One engine's HTTP side: the lean pool for proxied requests, httpx for probes, task clients per URL."""

    def __init__(self, lane: Lane, timeout_s: float, retry_wait_s: float,
                 assemble_min_tokens: int = MIN_TOKENS, isolate_prompts: bool = False) -> None:
        self.replica = replica = lane.replica  # where the engine is now (a restarted one's new port), its key
        # several keys share this engine: no request reuses a prompt another left in its cache (cache_isolation.py);
        # a remote upstream keeps its own cache policy (and may refuse llama.cpp's fields)
        self.isolate_prompts = isolate_prompts and not replica.remote
        self.assemble_min_tokens = assemble_min_tokens
        self.timeout_s = timeout_s
        self.retry_wait_s = retry_wait_s
        self.pool = ConnectionPool(timeout_s)
        self.http = httpx.AsyncClient(timeout=10.0, headers=replica.auth_headers())  # /health, /slots, /lora-…
        self._clients: dict[tuple[str, str | None], AsyncClient] = {}

    async def close(self) -> None:
        await self.pool.close()
        await self.http.aclose()
        for client in self._clients.values():
            await client.close()

    def client(self, model: str | None = None) -> AsyncClient:
        """The task client for the engine's current URL (a restarted engine may have a new port). A remote
        upstream is also sent the model's name (OpenAI-compatible servers require it)."""
        key = (self.replica.url(), model if self.replica.remote else None)
        if key not in self._clients:
            transport = IsolatingTransport(httpx.AsyncHTTPTransport(limits=http_limits())) \
                if self.isolate_prompts else None
            client = AsyncClient(key[0], model=key[1], timeout_s=self.timeout_s, api_key=self.replica.api_key,
                                 transport=transport)
            # a remote upstream may be any OpenAI-compatible server: no llama.cpp /completion to fast-forward on
            client.fast_forward = not self.replica.remote
            self._clients[key] = client
        return self._clients[key]

    def as_sent(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return isolated(path, body) if self.isolate_prompts else body

    async def wait_for_engine(self) -> bool:
        """True once the engine is ready and answers ``/health`` again, within ``retry_wait_s``."""
        deadline = time.monotonic() + self.retry_wait_s
        while time.monotonic() < deadline:
            if self.replica.ready():
                try:
                    if (await self.http.get(self.replica.url() + "/health", timeout=1.0,
                                            headers=self.replica.auth_headers())).status_code == 200:
                        self.replica.mark_reachable()
                        return True
                except httpx.HTTPError:
                    pass
            await asyncio.sleep(0.1)
        return False

    async def retried(self, call: RequestRecord, work: Callable[[], Awaitable[T]],
                      unavailable: Callable[[TransportError], Response]) -> T | Response:
        """The one retry policy: ``work`` once more when the engine failed under it (a ``TransportError`` that
        is not an HTTP answer: crash, wedge restart, closed connection) and is ready again within
        ``retry_wait_s``; otherwise ``unavailable(error)``. Nothing has reached the client when ``work`` raises.

        A server tiankong does not run is marked unreachable when no connection can be made and reachable on any
        answer (``engine/replica.py``); a remote OpenAI-compatible upstream is not restarting under us, so its
        refusal is answered at once (503 with ``Retry-After``), not after ``retry_wait_s`` of polling."""
        replica = self.replica
        if replica.remote and replica.open_circuit():
            return upstream_unreachable(replica.name, replica.unreachable)
        if not replica.ready() and not await self.wait_for_engine():  # (re)starting: wait, bounded
            return engine_unavailable(f"engine {replica.state().value}")
        for attempt in (0, 1):
            try:
                result = await work()
            except ServerError:
                replica.mark_reachable()
                raise  # the engine answered: not a failure of the engine
            except TransportError as exc:
                if isinstance(exc, Unreachable):
                    replica.mark_unreachable(exc.one_line())
                    if replica.remote:
                        return upstream_unreachable(replica.name, replica.unreachable)
                if attempt == 1 or not await self.wait_for_engine():
                    return unavailable(exc)
                call.retried = True
            else:
                replica.mark_reachable()
                return result
        raise AssertionError("unreachable")

    async def send(self, call: RequestRecord, path: str, body: dict[str, Any],
                   stream: bool) -> EngineResponse | Response:
        """POST to the engine (retried once). Errors come back as OpenAI-style responses."""
        payload = json.dumps(self.as_sent(path, body), ensure_ascii=False).encode()

        async def post() -> EngineResponse | Response:
            try:
                return await self.pool.post(self.replica.url() + path, payload, stream=stream,
                                            headers=self.replica.auth_headers())
            except EngineTimeout:
                return error_response(504, "the engine did not answer in time", "timeout_error", "engine_timeout")

        return await self.retried(call, post, lambda exc: engine_unavailable(str(exc)))

    async def forward(self, call: RequestRecord, path: str, body: dict[str, Any]) -> Response:
        if assembles(path, body, self.assemble_min_tokens):
            return await self.forward_assembled(call, path, body)
        if path == "/v1/completions" and not self.replica.remote and several_prompts(body.get("prompt")):
            return await self.forward_each(call, path, body)
        upstream = await self.send(call, path, body, stream=False)
        if isinstance(upstream, Response):
            return upstream
        if upstream.status_code >= 400:
            return upstream_error(upstream.status_code, upstream.content, upstream.headers)
        with contextlib.suppress(ValueError):
            call.note_answer(json.loads(upstream.content))
        return Response(upstream.content, status_code=upstream.status_code, media_type="application/json")

    async def forward_each(self, call: RequestRecord, path: str, body: dict[str, Any]) -> Response:
        """A completions request of several prompts, one prompt at a time in the slot it holds, the answers joined
        (choice ``index`` = the prompt's place): llama-server answered them at once with the ``usage`` of the first
        prompt alone (two prompts of 5 and 17 tokens said 5), which the token counters took, and ran them on
        slots the gateway had not granted."""
        if len(body["prompt"]) > MAX_PROMPTS:
            return error_response(400, f"prompt holds {len(body['prompt'])} prompts, more than {MAX_PROMPTS} in one "
                                  "request: send them in several", "invalid_request_error", "invalid_value",
                                  param="prompt")
        choices: list[Any] = []
        usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
        answer: dict[str, Any] = {}
        for index, prompt in enumerate(body["prompt"]):
            upstream = await self.send(call, path, {**body, "prompt": prompt}, stream=False)
            if isinstance(upstream, Response):
                return upstream
            if upstream.status_code >= 400:
                return upstream_error(upstream.status_code, upstream.content, upstream.headers)
            try:
                answer = json.loads(upstream.content)
                one = answer["choices"][0]
            except (ValueError, KeyError, IndexError, TypeError):
                return error_response(502, "the engine's answer had no choices", "engine_error", "engine_error")
            choices.append({**one, "index": index})
            for key in usage:
                value = (answer.get("usage") or {}).get(key)
                usage[key] += value if isinstance(value, int) else 0
        answer = {**answer, "choices": choices, "usage": usage}
        answer.pop("timings", None)  # the last prompt's alone
        call.note_answer(answer)
        return JSONResponse(answer)

    async def forward_assembled(self, call: RequestRecord, path: str, body: dict[str, Any]) -> Response:
        """A non-streamed answer read from the engine as a stream (assemble.py says why); retried once when
        the engine fails mid-answer, since nothing has reached the client yet."""

        payload = json.dumps(streamed_body(self.as_sent(path, body)), ensure_ascii=False).encode()

        async def read() -> Response:
            try:
                upstream = await self.pool.post(self.replica.url() + path, payload, stream=True,
                                                headers=self.replica.auth_headers())
            except EngineTimeout:
                return error_response(504, "the engine did not answer in time", "timeout_error", "engine_timeout")
            try:
                if upstream.status_code >= 400:
                    return upstream_error(upstream.status_code, await upstream.aread(), upstream.headers)
                assembler = StreamAssembler(chat=path.endswith("/chat/completions"))
                async for chunk in upstream.aiter_raw():
                    assembler.feed(chunk)
                    if assembler.content and call.ttft_s is None:
                        call.first_token()
                answer = assembler.result()
            except StreamFailed as exc:
                return stream_failed(exc)
            finally:
                await upstream.aclose()  # also when cancelled (client gone, deadline): the engine stops
            call.note_answer(answer)
            return JSONResponse(answer)

        return await self.retried(call, read, lambda exc: engine_unavailable(str(exc)))

    async def relay(self, call: RequestRecord, path: str, body: dict[str, Any]) -> AsyncGenerator[Item, None]:
        """The engine's SSE bytes as they come; an error response instead when it fails."""
        upstream = await self.send(call, path, body, stream=True)
        if isinstance(upstream, Response):
            yield upstream
            return
        inspector = SSEInspector(call.first_token)
        try:
            if upstream.status_code >= 400:
                yield upstream_error(upstream.status_code, await upstream.aread(), upstream.headers)
                return
            async for chunk in upstream.aiter_raw():
                inspector.feed(chunk)
                yield chunk
        except EngineHTTPError as exc:
            yield engine_unavailable(f"the stream broke off: {exc}")
        finally:
            await upstream.aclose()  # also on client disconnect: llama-server cancels the generation
            call.usage, call.timings = inspector.usage, inspector.timings

    async def run_client(self, call: RequestRecord, work: Callable[[AsyncClient], Awaitable[Response]]) -> Response:
        """A task or structured-output request through the library client (retried once)."""

        def unavailable(exc: TransportError) -> Response:
            return engine_unavailable(exc.one_line()) if not self.replica.ready() else error_for(exc)

        try:
            return await self.retried(call, lambda: work(self.client(call.model)), unavailable)
        except OutputError as exc:
            call.schema_failed = True
            # its attempts and the tokens they decoded count (schema retries, token counters): only answered
            # requests' were counted
            attempts, usage = getattr(exc, "attempts", None), getattr(exc, "usage", None)
            call.attempts = attempts if isinstance(attempts, int) else call.attempts
            if isinstance(usage, Usage):
                call.usage = {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
                              "total_tokens": usage.total_tokens}
            return error_for(exc)
        except InputTooLong as exc:
            if call.route in OPENAI_SAMPLED:  # the OpenAI routes answer as a plain chat does (a task route: 413)
                return error_response(400, exc.one_line(), "invalid_request_error", "context_length_exceeded")
            return error_for(exc)
        except TiankongError as exc:
            return error_for(exc)


def stream_failed(exc: StreamFailed) -> Response:
    """The error event of an engine's stream as the answer: its own status when it carries one, else 500."""
    code = exc.error.get("code")
    status = code if isinstance(code, int) and 400 <= code < 600 else 500
    return upstream_error(status, json.dumps({"error": exc.error}).encode())


def note_json(call: RequestRecord, response: Response) -> Response:
    """Record usage and attempts from a JSON answer built here (structured chat, tasks)."""
    if isinstance(response, JSONResponse):
        with contextlib.suppress(ValueError):
            call.note_answer(json.loads(bytes(response.body)))
    return response
