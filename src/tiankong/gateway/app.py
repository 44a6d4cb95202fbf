"""The gateway's ASGI app: an OpenAI-compatible front for a managed llama-server.

Routes: ``/health``, ``/metrics``, ``/openapi.json``, ``/ui`` (dashboard), ``/v1/models``, ``/v1/chat/completions``,
``/v1/completions``, ``/v1/embeddings`` (streaming passthrough) and ``/v1/tasks/*``. Every POST goes through
the same pipeline (auth, bounded body, admission, deadline, disconnect, metrics; see ``pipeline.py``), and
everything that goes wrong is an OpenAI-shaped error body (never a traceback, never a bare 500 page).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from ..client import validate_messages
from ..errors import TiankongError
from ..lora.selection import AdapterTables, adapter_group
from ..tasks.bodies import BODIES as TASK_BODIES
from .admission import EngineHandle
from .batch_routes import BatchApi, BatchCollector
from .body import bad_token_budget, default_temperature, log_prompt, read_json, unhonoured_field
from .dashboard import sample_forever, stats_payload, ui_headers
from .dashboard_page import PAGE
from .degrade import Degradation, cap_prompt
from .keys import ApiKey, AuthThrottle, RateLimiter, hash_key
from .metrics import GatewayMetrics, RequestRecord
from .native import (
    NATIVE_GET,
    NATIVE_POST,
    SLOTLESS,
    detokenize_problem,
    native_problem,
    native_refused,
    vocab_size,
)
from .openapi import build_openapi
from .origin import OriginCheck
from .pipeline import Pipeline
from .preempt import forward_preemptible, preemptible
from .responses import engine_unavailable, error_for, error_response, rpm_exceeded, upstream_error
from .state import GatewayState
from .structured_routes import extract_task, structured_chat, tool_chat, wants_structured, wants_tools
from .task_routes import cohere_rerank_answer, cohere_rerank_body, embeddings_answer, run_task
from .upstream import note_json

__all__ = ["GatewayState", "create_app", "error_response", "hash_key"]

PROMETHEUS_TYPE = "text/plain; version=0.0.4; charset=utf-8"
UI_HEADERS = ui_headers(PAGE)  # CSP (its own script only), no framing, no referrer


def model_card(name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "owned_by": "tiankong", "created": 0}


def unauthorized() -> JSONResponse:
    return error_response(401, "missing or invalid API key", "authentication_error", "invalid_api_key")


def create_app(state: GatewayState) -> Starlette:
    metrics = GatewayMetrics(state.engines)
    state.router.pool.subscribe(lambda replica, change: metrics.engine_transitions.labels(
        replica.name, change.new.value).inc())
    pipes: dict[str, Pipeline] = {}
    openapi = build_openapi()
    limiter = RateLimiter()
    auth_throttle = AuthThrottle()
    lora_tables = AdapterTables()
    policy = None
    if state.degradation is not None and state.degradation.enabled:
        policy = Degradation(state.degradation, metrics.live, lambda: [h for h, _ in state.served()],
                             has_fallback=state.fallback is not None)
        policy.on_change = metrics.degradation_level.set

    def pipeline(handle: EngineHandle) -> Pipeline:
        return Pipeline(handle, metrics, timeout_s=state.request_timeout_s, keepalive_s=state.keepalive_s,
                        idle_timeout_s=state.stream_idle_timeout_s, retry_wait_s=state.engine_retry_wait_s,
                        assemble_min_tokens=state.assemble_min_tokens,
                        isolate_prompts=not state.shares_prompt_cache)

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        pipes["p"] = pipes[state.engine.name] = pipeline(state.engine)
        if state.fallback is not None:
            pipes["f"] = pipeline(state.fallback)
        background = [asyncio.ensure_future(sample_forever(metrics, state.engines,
                                                           tick=policy.update if policy else None)),
                      asyncio.ensure_future(state.router.pool.reap_forever())]
        if batch_api is not None:
            background.append(asyncio.ensure_future(batch_api.runner.forever()))
            background.append(asyncio.ensure_future(batch_api.sweep_forever()))
        yield
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        for pipe in set(pipes.values()):
            await pipe.close()

    def pipe_for(call: RequestRecord) -> Pipeline:
        if call.degraded == "fallback":
            return pipes["f"]
        if call.engine and call.engine not in pipes:
            pipes[call.engine] = pipeline(state.router.handles[call.engine])
        return pipes.get(call.engine, pipes["p"])

    def authenticate(request: Request) -> tuple[ApiKey | None, Response | None]:
        """The caller's key, or the answer for a caller without one: 401, or 429 once its address failed too often."""
        address = request.client.host if request.client else "?"
        if state.keys and (wait := auth_throttle.retry_after(address)) is not None:
            metrics.auth_failures.labels("throttled").inc()
            return None, error_response(429, f"too many failed API keys from {address}; retry after {wait} s",
                                        "rate_limit_exceeded", "auth_throttled", headers={"Retry-After": str(wait)})
        key = state.key_of(request)
        if key is None:
            auth_throttle.failed(address)
            metrics.auth_failures.labels("unauthorized").inc()
            return None, unauthorized()
        return key, None

    def admit_key(key: ApiKey) -> Response | None:
        """The key's requests-per-minute (the Batch API's calls count too); None when it may go."""
        rpm = state.rpm_for(key)
        if key.batch or (wait := limiter.admit(key.hash, rpm)) is None:
            return None
        return rpm_exceeded(wait, rpm or 0)

    async def guarded(request: Request, call: RequestRecord, names_engine: bool = True) -> dict[str, Any] | Response:
        """Auth, per-key rate, JSON body, model, degradation and engine checks shared by every POST route.
        ``names_engine`` false: the body's ``model`` names something else (``/v1/rerank``'s ranker), not an engine."""
        key, refusal = authenticate(request)
        if refusal is not None or key is None:
            assert refusal is not None
            return refusal
        call.key, rpm, call.batch = key.name, state.rpm_for(key), key.batch
        if not key.batch and (wait := limiter.admit(key.hash, rpm)) is not None:
            call.rejected = "key_rpm"
            return rpm_exceeded(wait, rpm or 0)
        body = await read_json(request, state.max_body_bytes, state.body_timeout_s)
        if isinstance(body, JSONResponse):
            return body
        if (bad := bad_token_budget(body)) is not None:
            return bad
        if state.log_prompts:
            log_prompt(call.route, key.name, body)
        if policy is not None and policy.update() >= 1 and (refused := cap_prompt(policy, body, call)):
            return refused
        if policy is not None and policy.routes_to_fallback:
            call.degraded = "fallback"
            body["model"] = call.model = state.fallback_model()
            return body
        named = None if names_engine else body.pop("model", None)
        routed = await state.router.route(body, call)
        if named is not None:
            body["model"] = named
        return routed if isinstance(routed, Response) else body

    async def admitted(request: Request, call: RequestRecord,
                       work: Callable[[Pipeline, dict[str, Any]], Awaitable[Response]],
                       names_engine: bool = True) -> Response:
        body = await guarded(request, call, names_engine)
        pipe = pipe_for(call)
        if isinstance(body, Response):
            return pipe.done(call, body)
        return await pipe.run(request, call, lambda: work(pipe, body))

    async def extract(request: Request) -> Response:
        call = RequestRecord("/v1/tasks/extract")
        return await admitted(request, call, lambda pipe, body: pipe.upstream.run_client(
            call, lambda client: extract_task(client, body, call.note_answer)))

    async def task(request: Request) -> Response:
        name = request.path_params["task"]
        if name not in TASK_BODIES:
            return pipes["p"].done(RequestRecord("/v1/tasks/{task}"), error_response(
                404, f"unknown task {name!r}; tasks: extract, {', '.join(TASK_BODIES)}", "invalid_request_error",
                "not_found"))
        call = RequestRecord(f"/v1/tasks/{name}")

        async def work(client: Any, body: dict[str, Any]) -> Response:
            return note_json(call, JSONResponse(await run_task(client, name, body)))

        return await admitted(request, call, lambda pipe, body: pipe.upstream.run_client(
            call, lambda c: work(c, body)))

    async def rerank(request: Request) -> Response:
        """``/v1/rerank``: the Cohere/Jina shape over the rerank task (the same ranking as /v1/tasks/rerank)."""
        call = RequestRecord("/v1/rerank")

        async def work(client: Any, body: dict[str, Any]) -> Response:
            answer = await run_task(client, "rerank", cohere_rerank_body(body))
            return note_json(call, JSONResponse(cohere_rerank_answer(answer, body)))

        return await admitted(request, call, lambda pipe, body: pipe.upstream.run_client(
            call, lambda c: work(c, body)), names_engine=False)

    def proxy(path: str) -> Callable[[Request], Awaitable[Response]]:
        async def handler(request: Request) -> Response:
            call = RequestRecord(path)
            body = await guarded(request, call)
            pipe = pipe_for(call)
            if isinstance(body, Response):
                return pipe.done(call, body)
            default_temperature(path, body, state.default_temperature)  # deterministic unless told (docs/gateway.md)
            if path in NATIVE_POST and (refused := native_refused(path) if pipe.upstream.handle.remote
                                        else native_problem(path, body)):
                return pipe.done(call, refused)
            if path == "/detokenize" and (refused := detokenize_problem(body, await vocab_size(
                    pipe.upstream.http, pipe.upstream.handle.url(), pipe.upstream.handle.pid(),
                    pipe.upstream.handle.auth_headers()))):
                return pipe.done(call, refused)
            if not pipe.upstream.handle.remote and (refused := unhonoured_field(path, body)):
                return pipe.done(call, refused)  # nothing a client asked for is dropped without a word
            if path != "/v1/chat/completions" and body.get("json_schema") is not None:  # never unvalidated
                return pipe.done(call, error_response(
                    400, f"json_schema is not validated on {path}: send a chat request with response_format "
                    "json_schema (answers are validated, fail-closed)", "invalid_request_error", "unsupported_field"))
            if path != "/v1/embeddings":  # LoRA: adapter names → this engine's ids (lora/selection.py)
                try:
                    if path == "/v1/chat/completions":
                        validate_messages(body.get("messages"))  # objects with roles; images: data URL, bytes
                    body = await lora_tables.rewrite(pipe.upstream.http, pipe.upstream.handle.url(),
                                                     pipe.upstream.handle.pid(), body,
                                                     structured=path == "/v1/chat/completions" and
                                                     (wants_structured(body) or wants_tools(body)))
                    call.group = adapter_group(body)
                except TiankongError as exc:
                    return pipe.done(call, error_for(exc))
            if path == "/v1/embeddings":  # per-token engines (tiankong's): pooled by the client's embed()
                return await pipe.run(request, call, lambda: pipe.upstream.run_client(
                    call, lambda client: embeddings_answer(client, body)))  # errors: run_client maps them
            if path == "/v1/chat/completions" and wants_tools(body) and not pipe.upstream.handle.remote:
                return await pipe.run(request, call, lambda: pipe.upstream.run_client(
                    call, lambda client: tool_chat(client, body, body["model"], call.note_answer)))
            if path == "/v1/chat/completions" and wants_structured(body):
                return await pipe.run(request, call, lambda: pipe.upstream.run_client(
                    call, lambda client: structured_chat(client, body, body["model"], call.note_answer)))
            if body.get("stream"):
                return pipe.stream(call, path, body)
            admission = pipe.handle.admission
            if call.batch and admission.preempt and preemptible(path, body):
                return await pipe.run(request, call, lambda: forward_preemptible(pipe.upstream, admission, call,
                                                                                 path, body))
            return await pipe.run(request, call, lambda: pipe.upstream.forward(call, path, body),
                                  slot=path not in SLOTLESS)

        return handler

    def native_get(path: str) -> Callable[[Request], Awaitable[Response]]:
        """llama.cpp's read-only endpoints that tiankong's own flows read (``?model=`` picks the engine)."""
        async def handler(request: Request) -> Response:
            if (refusal := authenticate(request)[1]) is not None:
                return refusal
            call = RequestRecord(path)
            routed = await state.router.route({"model": request.query_params.get("model")}, call)
            if isinstance(routed, Response):
                return routed
            if routed.remote:
                return native_refused(path)
            try:
                answer = await pipe_for(call).upstream.http.get(routed.url() + path, headers=routed.auth_headers())
            except httpx.HTTPError as exc:
                return engine_unavailable(f"the engine did not answer {path}: {type(exc).__name__}")
            if answer.status_code >= 400:
                return upstream_error(answer.status_code, answer.content)
            data = answer.json()
            if isinstance(data, dict):
                data.pop("model_path", None)  # where the file lies on the gateway's machine is not the caller's
            return JSONResponse(data)

        return handler

    async def health(_: Request) -> Response:
        return state.router.health(policy.describe() if policy is not None else {"level": 0, "enabled": False})

    async def models(request: Request) -> Response:
        if (refusal := authenticate(request)[1]) is not None:
            return refusal
        return JSONResponse({"object": "list", "data": [model_card(name) for name in served_names()]})

    def served_names() -> list[str]:
        return state.router.pool.names()

    async def model_route(request: Request) -> Response:  # the openai SDK's models.retrieve
        if (refusal := authenticate(request)[1]) is not None:
            return refusal
        try:  # the names chat accepts (pool.resolve: a name without its ":quant" too)
            entry = state.router.pool.resolve(request.path_params["model"])
        except TiankongError as exc:
            return error_response(404, exc.one_line(), "invalid_request_error", "model_not_found")
        return JSONResponse(model_card(entry.name))

    async def metrics_route(request: Request) -> Response:
        if (refusal := authenticate(request)[1]) is not None:
            return refusal
        return Response(await metrics.scrape(pipes["p"].upstream.http), media_type=PROMETHEUS_TYPE)

    async def openapi_route(_: Request) -> Response:
        return JSONResponse(openapi)

    async def ui(_: Request) -> Response:
        return HTMLResponse(PAGE, headers={"Cache-Control": "no-cache", **UI_HEADERS})

    async def ui_stats(request: Request) -> Response:
        if (refusal := authenticate(request)[1]) is not None:
            return refusal
        engines = state.served()
        if state.fallback is not None:
            engines.append((state.fallback, [state.fallback_model()]))
        level = {"degradation": policy.describe() if policy is not None else {"level": 0, "enabled": False}}
        if batch_api is not None:
            level["batches"] = batch_api.summary(state.router.all())
        return JSONResponse(await stats_payload(metrics, engines, pipes["p"].upstream.http, level),
                            headers={"Cache-Control": "no-store", **UI_HEADERS})

    routes = [
        Route("/", lambda _: RedirectResponse("/ui", status_code=307), methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/metrics", metrics_route, methods=["GET"]),
        Route("/openapi.json", openapi_route, methods=["GET"]),
        Route("/ui", ui, methods=["GET"]),
        Route("/ui/stats", ui_stats, methods=["GET"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/v1/models/{model:path}", model_route, methods=["GET"]),
        Route("/v1/chat/completions", proxy("/v1/chat/completions"), methods=["POST"]),
        Route("/v1/completions", proxy("/v1/completions"), methods=["POST"]),
        Route("/v1/embeddings", proxy("/v1/embeddings"), methods=["POST"]),
        Route("/v1/rerank", rerank, methods=["POST"]),
        Route("/v1/tasks/extract", extract, methods=["POST"]),
        Route("/v1/tasks/{task}", task, methods=["POST"]),
        *(Route(path, proxy(path), methods=["POST"]) for path in NATIVE_POST),
        *(Route(path, native_get(path), methods=["GET"]) for path in NATIVE_GET),
    ]
    batch_api = None
    if state.batches is not None and state.batches.enabled:
        batch_api = BatchApi(state.batches, state.batch_callers, concurrency=lambda: state.router.batch_concurrency(
            state.batches.concurrency if state.batches else None), timeout_s=state.request_timeout_s,
            max_body_bytes=state.max_body_bytes, key_hashes=[key.hash for key in state.keys])
        routes.extend(batch_api.routes(authenticate, admit_key))
        metrics.registry.register(BatchCollector(batch_api))
    app = Starlette(routes=routes, lifespan=lifespan, middleware=[
        Middleware(OriginCheck, keyless=lambda: not state.keys)], exception_handlers={
        404: lambda r, e: error_response(404, f"no route {r.url.path}", "invalid_request_error", "not_found"),
        405: lambda r, e: error_response(405, f"method {r.method} not allowed on {r.url.path}",
                                         "invalid_request_error", "method_not_allowed"),
        TiankongError: lambda r, e: error_response(e.http_status, e.one_line(), e.type, param=e.param),
        Exception: lambda r, e: error_response(500, f"internal error: {type(e).__name__}", "server_error"),
    })
    app.state.metrics = metrics
    if batch_api is not None:
        batch_api.runner.app = app
    return app
