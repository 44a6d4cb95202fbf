"""The gateway's ASGI app: an OpenAI-compatible front for a managed llama-server.

Thin on purpose for now: ``/health``, ``/v1/models``, ``/v1/chat/completions``, ``/v1/completions``,
``/v1/embeddings`` with streaming passthrough, API-key auth, and OpenAI-shaped error bodies for
everything that goes wrong (never a traceback, never a bare 500 page).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ..api import AsyncClient
from ..client._shared import is_stale_connection
from ..errors import ServerError, TiankongError
from .structured_routes import extract_task, structured_chat, tiankong_error_response, wants_structured
from .task_routes import BODIES as TASK_BODIES
from .task_routes import run_task

MAX_BODY_BYTES = 8 * 1024 * 1024


def error_response(status: int, message: str, type_: str, code: str | None = None,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    body = {"error": {"message": message, "type": type_, "code": code or type_}}
    return JSONResponse(body, status_code=status, headers=headers)


def hash_key(key: str) -> str:
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


@dataclass
class GatewayState:
    """What the routes need: where the engine is, what it serves, who may call."""

    upstream_url: str
    model_name: str
    aliases: list[str] = field(default_factory=list)
    api_key_hashes: list[str] = field(default_factory=list)
    engine_state: Callable[[], str] = lambda: "ready"
    request_timeout_s: float = 600.0

    def serves(self, model: Any) -> bool:
        if model in (None, ""):
            return True
        names = [self.model_name, *self.aliases]
        return isinstance(model, str) and any(model == n or n.startswith(model + ":") for n in names)

    def authorized(self, request: Request) -> bool:
        if not self.api_key_hashes:
            return True
        header = request.headers.get("authorization", "")
        token = header[7:].strip() if header.lower().startswith("bearer ") else request.headers.get("x-api-key", "")
        offered = hash_key(token)
        return bool(token) and any(hmac.compare_digest(offered, known) for known in self.api_key_hashes)


async def _json_body(request: Request) -> dict[str, Any] | JSONResponse:
    raw = await request.body()
    if len(raw) > MAX_BODY_BYTES:
        return error_response(413, f"request body larger than {MAX_BODY_BYTES} bytes", "invalid_request_error",
                              "body_too_large")
    try:
        body = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        return error_response(400, "request body is not valid UTF-8", "invalid_request_error", "invalid_utf8")
    except ValueError as exc:
        return error_response(400, f"request body is not valid JSON: {exc}", "invalid_request_error", "invalid_json")
    if not isinstance(body, dict):
        return error_response(400, "request body must be a JSON object", "invalid_request_error", "invalid_body")
    return body


def create_app(state: GatewayState) -> Starlette:
    http: dict[str, httpx.AsyncClient] = {}
    clients: dict[str, AsyncClient] = {}

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        limits = httpx.Limits(max_connections=256, max_keepalive_connections=64, keepalive_expiry=2.0)
        http["c"] = httpx.AsyncClient(base_url=state.upstream_url, timeout=state.request_timeout_s, limits=limits)
        clients["c"] = AsyncClient(state.upstream_url, timeout_s=state.request_timeout_s)
        yield
        await http["c"].aclose()
        await clients["c"].close()

    async def guarded(request: Request) -> dict[str, Any] | Response:
        """Auth, JSON body, model and engine checks shared by every POST route."""
        if not state.authorized(request):
            return error_response(401, "missing or invalid API key", "authentication_error", "invalid_api_key")
        body = await _json_body(request)
        if isinstance(body, JSONResponse):
            return body
        if not state.serves(body.get("model")):
            return error_response(404, f"model {body.get('model')!r} is not served here; available: "
                                  f"{state.model_name}", "invalid_request_error", "model_not_found")
        if state.engine_state() != "ready":
            return error_response(503, "the engine is not ready; retry shortly", "engine_error",
                                  "engine_unavailable", headers={"Retry-After": "2"})
        body["model"] = state.model_name
        return body

    async def extract(request: Request) -> Response:
        body = await guarded(request)
        if isinstance(body, Response):
            return body
        try:
            return await extract_task(clients["c"], body)
        except TiankongError as exc:
            return _error_for(exc)

    async def task(request: Request) -> Response:
        name = request.path_params["task"]
        if name not in TASK_BODIES:
            return error_response(404, f"unknown task {name!r}; tasks: extract, {', '.join(TASK_BODIES)}",
                                  "invalid_request_error", "not_found")
        body = await guarded(request)
        if isinstance(body, Response):
            return body
        try:
            return JSONResponse(await run_task(clients["c"], name, body))
        except TiankongError as exc:
            return _error_for(exc)

    async def health(_: Request) -> Response:
        engine = state.engine_state()
        return JSONResponse({"status": "ok" if engine == "ready" else "unavailable", "engine": engine,
                             "model": state.model_name}, status_code=200 if engine == "ready" else 503)

    async def models(request: Request) -> Response:
        if not state.authorized(request):
            return error_response(401, "missing or invalid API key", "authentication_error", "invalid_api_key")
        data = [{"id": name, "object": "model", "owned_by": "tiankong", "created": 0}
                for name in [state.model_name, *state.aliases]]
        return JSONResponse({"object": "list", "data": data})

    def proxy(path: str) -> Callable[[Request], Any]:
        async def handler(request: Request) -> Response:
            body = await guarded(request)
            if isinstance(body, Response):
                return body
            if path == "/v1/chat/completions" and wants_structured(body):
                try:
                    return await structured_chat(clients["c"], body, state.model_name)
                except TiankongError as exc:
                    return _error_for(exc)
            if body.get("stream"):
                return await _stream(http["c"], path, body)
            return await _forward(http["c"], path, body)

        return handler

    routes = [
        Route("/health", health, methods=["GET"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/v1/chat/completions", proxy("/v1/chat/completions"), methods=["POST"]),
        Route("/v1/completions", proxy("/v1/completions"), methods=["POST"]),
        Route("/v1/embeddings", proxy("/v1/embeddings"), methods=["POST"]),
        Route("/v1/tasks/extract", extract, methods=["POST"]),
        Route("/v1/tasks/{task}", task, methods=["POST"]),
    ]
    return Starlette(routes=routes, lifespan=lifespan, exception_handlers={
        404: lambda r, e: error_response(404, f"no route {r.url.path}", "invalid_request_error", "not_found"),
        405: lambda r, e: error_response(405, f"method {r.method} not allowed on {r.url.path}",
                                         "invalid_request_error", "method_not_allowed"),
        TiankongError: lambda r, e: error_response(e.http_status, e.one_line(), e.type),
        Exception: lambda r, e: error_response(500, f"internal error: {type(e).__name__}", "server_error"),
    })


def _error_for(exc: TiankongError) -> JSONResponse:
    if isinstance(exc, ServerError) and 400 <= exc.status < 500:
        return error_response(400, exc.one_line(), "invalid_request_error", "upstream_rejected")
    return tiankong_error_response(exc)


async def _send(http: httpx.AsyncClient, path: str, body: dict[str, Any], stream: bool) -> httpx.Response:
    """Send once more when a reused keep-alive connection was closed before any answer (it was never read)."""
    request = http.build_request("POST", path, json=body)
    try:
        return await http.send(request, stream=stream)
    except httpx.RemoteProtocolError as exc:
        if not is_stale_connection(exc):
            raise
        return await http.send(request, stream=stream)


async def _forward(http: httpx.AsyncClient, path: str, body: dict[str, Any]) -> Response:
    try:
        upstream = await _send(http, path, body, stream=False)
    except httpx.TimeoutException:
        return error_response(504, "the engine did not answer in time", "engine_error", "engine_timeout")
    except httpx.HTTPError as exc:
        return error_response(503, f"the engine is unreachable ({type(exc).__name__}); retry shortly",
                              "engine_error", "engine_unavailable", headers={"Retry-After": "2"})
    if upstream.status_code >= 400:
        return _upstream_error(upstream.status_code, upstream.content)
    return Response(upstream.content, status_code=upstream.status_code, media_type="application/json")


def _upstream_error(status: int, content: bytes) -> JSONResponse:
    try:
        err = json.loads(content).get("error", {})
        message = err.get("message") if isinstance(err, dict) else str(err)
    except (ValueError, AttributeError):
        message = content.decode("utf-8", "replace")[:300]
    type_ = "invalid_request_error" if status < 500 else "engine_error"
    return error_response(status, message or f"engine answered HTTP {status}", type_)


async def _stream(http: httpx.AsyncClient, path: str, body: dict[str, Any]) -> Response:
    try:
        upstream = await _send(http, path, body, stream=True)
    except httpx.HTTPError as exc:
        return error_response(503, f"the engine is unreachable ({type(exc).__name__}); retry shortly",
                              "engine_error", "engine_unavailable", headers={"Retry-After": "2"})
    if upstream.status_code >= 400:
        content = await upstream.aread()
        await upstream.aclose()
        return _upstream_error(upstream.status_code, content)

    async def relay() -> AsyncIterator[bytes]:
        try:
            async for chunk in upstream.aiter_raw():
                yield chunk
        except httpx.HTTPError:
            error = {"error": {"message": "the engine stream broke off", "type": "engine_error",
                               "code": "engine_unavailable"}}
            yield f"data: {json.dumps(error)}\n\n".encode()
        finally:
            await upstream.aclose()  # also runs when the client disconnects: cancels the engine request

    return StreamingResponse(relay(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
