"""The gateway's ASGI app: an OpenAI-compatible front for managed llama-servers.

Routes: ``/health``, ``/metrics``, ``/openapi.json``, ``/ui`` (dashboard), ``/v1/models``, ``/v1/chat/completions``,
``/v1/completions``, ``/v1/embeddings`` (streaming passthrough), ``/v1/rerank``, ``/v1/tasks/*``, llama.cpp's own
endpoints and the Batch API. :class:`Gateway` has one method per route family; every POST goes through the same
steps — the :class:`~tiankong.gateway.guard.Guard` (auth, rate, body), the degradation policy (prompt cap, the
pool's fallback), the router (model → replica lane), then the lane's pipeline (admission, deadline, disconnect,
metrics; ``pipeline.py``). Everything that goes wrong is an OpenAI-shaped error body (never a traceback, never a
bare 500 page). :func:`create_app` is the public factory.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from ..client import validate_messages
from ..errors import ConfigError, TiankongError
from ..lora.selection import AdapterTables, adapter_group
from ..tasks.specs import SPECS
from .admission import Lane
from .batch_routes import BatchApi, BatchCollector
from .body import default_temperature, unhonoured_field
from .cascade import CascadeMetrics, check_cascade, draft_then_replace, shape_chat
from .dashboard import sample_forever, stats_payload, ui_headers
from .dashboard_page import PAGE
from .degrade import Degradation, cap_prompt
from .guard import Guard, unauthorized
from .keys import hash_key
from .metrics import GatewayMetrics, RequestRecord
from .native import NATIVE_GET, NATIVE_POST, SLOTLESS, native_get, native_post
from .openapi import build_openapi
from .pipeline import Pipeline
from .preempt import forward_preemptible, preemptible
from .responses import error_for, error_response
from .shutdown import ShutdownAnswer
from .state import GatewayState
from .structured_routes import structured_chat, tool_chat, wants_structured, wants_tools
from .task_routes import OWN_RANKER, cohere_rerank_answer, cohere_rerank_body, embeddings_answer, run_task
from .upstream import note_json

__all__ = ["Gateway", "GatewayState", "create_app", "error_response", "hash_key", "unauthorized"]

PROMETHEUS_TYPE = "text/plain; version=0.0.4; charset=utf-8"
UI_HEADERS = ui_headers(PAGE)  # CSP (its own script only), no framing, no referrer
CHAT, COMPLETIONS, EMBEDDINGS = "/v1/chat/completions", "/v1/completions", "/v1/embeddings"
Work = Callable[[Pipeline, dict[str, Any]], Awaitable[Response]]
Prepared = tuple[RequestRecord, Pipeline, dict[str, Any]]


def model_card(name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "owned_by": "tiankong", "created": 0}


class Gateway:
    """One gateway: its state (engines, settings, callers), guard, metrics, degradation policy and the pipelines
    of its lanes; :meth:`app` is its ASGI app."""

    def __init__(self, state: GatewayState) -> None:
        self.state = state
        self.metrics = metrics = GatewayMetrics(state.engines)
        state.router.pool.subscribe(lambda replica, change: metrics.engine_transitions.labels(
            replica.name, change.new.value).inc())
        self.guard = Guard(state, metrics)
        self.lora_tables = AdapterTables()
        self.pipes: dict[str, Pipeline] = {}
        self.policy: Degradation | None = None
        if state.degradation is not None and state.degradation.enabled:
            self.policy = Degradation(state.degradation, metrics.live, lambda: [h for h, _ in state.served()],
                                      has_fallback=state.fallback is not None)
            self.policy.on_change = metrics.degradation_level.set
        check_cascade(state.cascade, state.pool)
        self.cascade_metrics = CascadeMetrics(metrics.registry) if state.cascade is not None else None
        self.batch_api: BatchApi | None = None
        batches = state.batches
        if batches is not None and batches.enabled:
            self.batch_api = BatchApi(batches, state.batch_callers, concurrency=lambda: state.router.batch_concurrency(
                batches.concurrency), timeout_s=state.server.request_timeout_s,
                max_body_bytes=state.server.max_body_bytes, key_hashes=[key.hash for key in state.keys])
            metrics.registry.register(BatchCollector(self.batch_api))
        self.openapi = build_openapi(batches=self.batch_api is not None)

    # --- lanes and their pipelines ---------------------------------------------------------------------

    def pipeline(self, lane: Lane) -> Pipeline:
        server = self.state.server
        return Pipeline(lane, self.metrics, timeout_s=server.request_timeout_s, keepalive_s=server.keepalive_s,
                        idle_timeout_s=server.stream_idle_timeout_s, retry_wait_s=server.engine_retry_wait_s,
                        assemble_min_tokens=server.assemble_min_tokens,
                        isolate_prompts=not self.state.shares_prompt_cache)

    @property
    def first(self) -> Pipeline:
        """The first engine's pipeline (answers for requests refused before any engine was chosen)."""
        return self.pipes["p"]

    def pipe_for(self, call: RequestRecord) -> Pipeline:
        router = self.state.router
        if call.degraded == "fallback" and router.fallback is not None:
            return self.pipes.setdefault(router.fallback.name, self.pipeline(router.fallback))
        if call.engine and call.engine not in self.pipes:
            self.pipes[call.engine] = self.pipeline(router.handles[call.engine])
        return self.pipes.get(call.engine, self.first)

    @asynccontextmanager
    async def lifespan(self, _: Starlette) -> AsyncIterator[None]:
        state, policy = self.state, self.policy
        self.pipes["p"] = self.pipes[state.engine.name] = self.pipeline(state.engine)
        background = [asyncio.ensure_future(sample_forever(self.metrics, state.engines,
                                                           tick=policy.update if policy else None)),
                      asyncio.ensure_future(state.router.pool.reap_forever()),
                      asyncio.ensure_future(state.router.reprobe_forever())]
        if self.batch_api is not None:
            background.append(asyncio.ensure_future(self.batch_api.runner.forever()))
            background.append(asyncio.ensure_future(self.batch_api.sweep_forever()))
        yield
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        for pipe in set(self.pipes.values()):
            await pipe.close()

    # --- the steps every POST takes ----------------------------------------------------------------------

    async def guarded(self, request: Request, call: RequestRecord,
                      names_engine: bool = True) -> dict[str, Any] | Response:
        """The guard (auth, rate, body), the degradation policy (prompt cap; the pool's fallback at L3) and the
        router. ``names_engine`` false: the body's ``model`` names something else (``/v1/rerank``'s ranker)."""
        body = await self.guard.admit(request, call)
        if isinstance(body, Response):
            return body
        policy = self.policy
        if policy is not None and policy.update() >= 1 and (refused := cap_prompt(policy, body, call)):
            return refused
        if call.route == CHAT and (refused := shape_chat(body, call, self.state.cascade, self.state.pool)):
            return refused  # tiankong.draft asked for and not possible
        named = None if names_engine else body.pop("model", None)
        if named is not None and not isinstance(named, str):
            return error_response(400, f"model must be a string, got {json.dumps(named)[:40]}",
                                  "invalid_request_error", "invalid_model", param="model")
        if named and named != OWN_RANKER:  # another name must be one the pool serves (the fallback's route too)
            try:
                self.state.router.pool.resolve(named)
            except TiankongError as exc:
                return error_response(404, f"{exc.message} (or {OWN_RANKER}, or none)", "invalid_request_error",
                                      "model_not_found", param="model")
            body["model"] = named
        if policy is not None and policy.routes_to_fallback:
            routed = await self.state.router.route(body, call, fallback=True)
        else:
            routed = await self.state.router.route(body, call)
        if not names_engine:  # the answer names what the client named (or nothing: the ranker's own name)
            body.pop("model", None)
            if named:
                body["model"] = named
        return routed if isinstance(routed, Response) else body

    async def admitted(self, request: Request, call: RequestRecord, work: Work, names_engine: bool = True) -> Response:
        body = await self.guarded(request, call, names_engine)
        pipe = self.pipe_for(call)
        if isinstance(body, Response):
            return pipe.done(call, body)
        return await pipe.run(request, call, lambda: work(pipe, body))

    async def prepared(self, request: Request, path: str) -> Prepared | Response:
        """A generation request past the guard and the router, with the server's default temperature."""
        call = RequestRecord(path)
        body = await self.guarded(request, call)
        pipe = self.pipe_for(call)
        if isinstance(body, Response):
            return pipe.done(call, body)
        default_temperature(path, body, self.state.default_temperature)  # deterministic unless told (docs/gateway.md)
        return call, pipe, body

    async def checked(self, path: str, prepared: Prepared, adapters: bool = True) -> dict[str, Any] | Response:
        """Fields the engine would drop, a json_schema nobody validates, LoRA adapter names (→ the engine's ids)."""
        call, pipe, body = prepared
        if not pipe.upstream.replica.remote and (refused := unhonoured_field(path, body)):
            return pipe.done(call, refused)  # nothing a client asked for is dropped without a word
        if path != CHAT and body.get("json_schema") is not None:  # never unvalidated
            return pipe.done(call, error_response(
                400, f"json_schema is not validated on {path}: send a chat request with response_format "
                "json_schema (answers are validated, fail-closed)", "invalid_request_error", "unsupported_field"))
        if not adapters:
            return body
        try:
            if path == CHAT:
                validate_messages(body.get("messages"))  # objects with roles; images: data URL, bytes
                first = body["messages"][0]  # OpenAI's newer name of the opening system message, which local
                if first["role"] == "developer" and not pipe.upstream.replica.remote:  # templates lack
                    body["messages"] = [{**first, "role": "system"}, *body["messages"][1:]]
            body = await self.lora_tables.rewrite(pipe.upstream.http, pipe.upstream.replica.url(),
                                                  pipe.upstream.replica.pid(), body, structured=path == CHAT and
                                                  (wants_structured(body) or wants_tools(body)))
            call.group = adapter_group(body)
        except TiankongError as exc:
            return pipe.done(call, error_for(exc))
        return body

    async def generated(self, request: Request, path: str, prepared: Prepared) -> Response:
        """Streamed, stepped aside for interactive traffic (a batch line), or forwarded in one piece."""
        call, pipe, body = prepared
        if body.get("stream"):
            return pipe.stream(call, path, body)
        admission = pipe.lane.admission
        if call.batch and admission.preempt and preemptible(path, body):
            return await pipe.run(request, call, lambda: forward_preemptible(pipe.upstream, admission, call,
                                                                             path, body))
        return await pipe.run(request, call, lambda: pipe.upstream.forward(call, path, body),
                              slot=path not in SLOTLESS)

    # --- OpenAI generation routes ------------------------------------------------------------------------

    async def chat_completions(self, request: Request) -> Response:
        prepared = await self.prepared(request, CHAT)
        if isinstance(prepared, Response):
            return prepared
        body = await self.checked(CHAT, prepared)
        if isinstance(body, Response):
            return body
        call, pipe, _ = prepared
        if call.draft and call.degraded != "fallback" and self.state.cascade and self.cascade_metrics:
            return await draft_then_replace(request, self.state.router, self.pipe_for, self.cascade_metrics,
                                            self.state.cascade, (call, pipe, body))
        if wants_tools(body) and not pipe.upstream.replica.remote:
            return await pipe.run(request, call, lambda: pipe.upstream.run_client(
                call, lambda client: tool_chat(client, body, body["model"], call.note_answer)))
        if wants_structured(body):
            return await pipe.run(request, call, lambda: pipe.upstream.run_client(
                call, lambda client: structured_chat(client, body, body["model"], call.note_answer)))
        return await self.generated(request, CHAT, (call, pipe, body))

    async def completions(self, request: Request) -> Response:
        prepared = await self.prepared(request, COMPLETIONS)
        if isinstance(prepared, Response):
            return prepared
        body = await self.checked(COMPLETIONS, prepared)
        if isinstance(body, Response):
            return body
        return await self.generated(request, COMPLETIONS, (prepared[0], prepared[1], body))

    async def embeddings(self, request: Request) -> Response:
        """Per-token engines (tiankong's): pooled by the client's embed(); errors: run_client maps them."""
        prepared = await self.prepared(request, EMBEDDINGS)
        if isinstance(prepared, Response):
            return prepared
        body = await self.checked(EMBEDDINGS, prepared, adapters=False)
        if isinstance(body, Response):
            return body
        call, pipe, _ = prepared
        return await pipe.run(request, call, lambda: pipe.upstream.run_client(
            call, lambda client: embeddings_answer(client, body)))

    # --- tasks ---------------------------------------------------------------------------------------------

    async def task(self, request: Request) -> Response:
        """``/v1/tasks/<task>``: every registered task (``tasks/specs.py``; bodies, answers: ``tasks/bodies.py``)."""
        name = request.path_params["task"]
        if name not in SPECS:
            return self.first.done(RequestRecord("/v1/tasks/{task}"), error_response(
                404, f"unknown task {name!r}; tasks: {', '.join(SPECS)}", "invalid_request_error", "not_found"))
        call = RequestRecord(f"/v1/tasks/{name}")

        async def work(client: Any, body: dict[str, Any]) -> Response:
            return note_json(call, JSONResponse(await run_task(client, name, body, self.state.route_threshold)))

        return await self.admitted(request, call, lambda pipe, body: pipe.upstream.run_client(
            call, lambda c: work(c, body)))

    async def rerank(self, request: Request) -> Response:
        """``/v1/rerank``: the Cohere/Jina shape over the rerank task (the same ranking as /v1/tasks/rerank)."""
        call = RequestRecord("/v1/rerank")

        async def work(client: Any, body: dict[str, Any]) -> Response:
            answer = await run_task(client, "rerank", cohere_rerank_body(body))
            return note_json(call, JSONResponse(cohere_rerank_answer(answer, body)))

        return await self.admitted(request, call, lambda pipe, body: pipe.upstream.run_client(
            call, lambda c: work(c, body)), names_engine=False)

    # --- models, health, metrics, OpenAPI --------------------------------------------------------------------

    def degradation(self) -> dict[str, Any]:
        return self.policy.describe() if self.policy is not None else {"level": 0, "enabled": False}

    async def health(self, _: Request) -> Response:
        return self.state.router.health(self.degradation())

    async def models(self, request: Request) -> Response:
        if (refusal := self.guard.refusal(request)) is not None:
            return refusal
        return JSONResponse({"object": "list", "data": [model_card(n) for n in self.state.router.pool.names()]})

    async def model(self, request: Request) -> Response:  # the openai SDK's models.retrieve
        if (refusal := self.guard.refusal(request)) is not None:
            return refusal
        name = request.path_params["model"]
        try:  # the names chat accepts (pool.resolve: a name without its ":quant" too; "" is no name here)
            if not name.strip():
                raise ConfigError("no model id given: GET /v1/models lists them")
            entry = self.state.router.pool.resolve(name)
        except TiankongError as exc:
            return error_response(404, exc.one_line(), "invalid_request_error", "model_not_found", param="model")
        return JSONResponse(model_card(entry.name))

    async def metrics_route(self, request: Request) -> Response:
        if (refusal := self.guard.refusal(request)) is not None:
            return refusal
        return Response(await self.metrics.scrape(self.first.upstream.http), media_type=PROMETHEUS_TYPE)

    async def openapi_route(self, _: Request) -> Response:
        return JSONResponse(self.openapi)

    # --- the dashboard -------------------------------------------------------------------------------------

    async def ui(self, _: Request) -> Response:
        return HTMLResponse(PAGE, headers={"Cache-Control": "no-cache", **UI_HEADERS})

    async def ui_stats(self, request: Request) -> Response:
        if (refusal := self.guard.refusal(request)) is not None:
            return refusal
        state = self.state
        engines = state.served()
        if state.fallback is not None:
            engines.append((state.fallback, [state.fallback_model()]))
        level: dict[str, Any] = {"degradation": self.degradation()}
        if self.batch_api is not None:
            level["batches"] = self.batch_api.summary(state.router.all())
        return JSONResponse(await stats_payload(self.metrics, engines, self.first.upstream.http, level),
                            headers={"Cache-Control": "no-store", **UI_HEADERS})

    # --- the app ---------------------------------------------------------------------------------------------

    def routes(self) -> list[Route]:
        routes = [
            Route("/", lambda _: RedirectResponse("/ui", status_code=307), methods=["GET"]),
            Route("/health", self.health, methods=["GET"]),
            Route("/metrics", self.metrics_route, methods=["GET"]),
            Route("/openapi.json", self.openapi_route, methods=["GET"]),
            Route("/ui", self.ui, methods=["GET"]),
            Route("/ui/stats", self.ui_stats, methods=["GET"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/v1/models/{model:path}", self.model, methods=["GET"]),
            Route(CHAT, self.chat_completions, methods=["POST"]),
            Route(COMPLETIONS, self.completions, methods=["POST"]),
            Route(EMBEDDINGS, self.embeddings, methods=["POST"]),
            Route("/v1/rerank", self.rerank, methods=["POST"]),
            Route("/v1/tasks/{task}", self.task, methods=["POST"]),
            *(Route(path, native_post(self, path), methods=["POST"]) for path in NATIVE_POST),
            *(Route(path, native_get(self, path), methods=["GET"]) for path in NATIVE_GET),
        ]
        if self.batch_api is not None:
            routes.extend(self.batch_api.routes(self.guard.authenticate, self.guard.admit_key))
        return routes

    def app(self) -> Starlette:
        middleware = [Middleware(ShutdownAnswer), self.guard.middleware()]  # the first is the outermost
        app = Starlette(routes=self.routes(), lifespan=self.lifespan, middleware=middleware,
                        exception_handlers={
            404: lambda r, e: error_response(404, f"no route {r.url.path}", "invalid_request_error", "not_found"),
            405: lambda r, e: error_response(405, f"method {r.method} not allowed on {r.url.path}",
                                             "invalid_request_error", "method_not_allowed"),
            TiankongError: lambda r, e: error_response(e.http_status, e.one_line(), e.type, param=e.param),
            Exception: lambda r, e: error_response(500, f"internal error: {type(e).__name__}", "server_error"),
        })
        app.state.metrics = self.metrics
        app.state.gateway = self
        if self.batch_api is not None:
            self.batch_api.runner.app = app
        return app


def create_app(state: GatewayState) -> Starlette:
    """The gateway's ASGI app for ``state`` (a :class:`Gateway`'s)."""
    return Gateway(state).app()
