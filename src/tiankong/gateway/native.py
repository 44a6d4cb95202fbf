"""llama.cpp's own endpoints on the gateway: what tiankong's client flows call (``/props``, ``/tokenize``,
``/apply-template``, ``/completion``, …), so ``Client(url=<gateway>)`` and ``tiankong <task> --url <gateway>``
work through a gateway. They go through the same pipeline as every route (``app.py``); their handlers, made
here for a :class:`~tiankong.gateway.app.Gateway`, are that route family."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import httpx
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .metrics import RequestRecord
from .responses import engine_unavailable, error_response, upstream_error

if TYPE_CHECKING:
    from .app import Gateway

Handler = Callable[[Request], Awaitable[Response]]

#: llama.cpp's own endpoints, passed through to the engine (auth, admission, deadline, metrics as every route):
#: what tiankong's client flows call, so ``Client(url=<gateway>)`` and ``tiankong <task> --url`` work through a
#: gateway. Not validated beyond what the engine's grammar enforces; a top-level json_schema is refused there.
NATIVE_POST = {"/completion": ("prompt", (str, list)), "/tokenize": ("content", (str,)),
               "/detokenize": ("tokens", (list,)), "/apply-template": ("messages", (list,)),
               "/embeddings": ("content", (str, list))}  # path → the field it needs and its JSON types
NATIVE_GET = ("/props", "/lora-adapters")
#: native paths llama-server answers without a slot (on its HTTP thread): the gateway does not queue them
SLOTLESS = frozenset({"/tokenize", "/detokenize", "/apply-template"})
MAX_DETOKENIZE = 65536  # token ids in one /detokenize
_VOCAB: dict[tuple[str, int | None], int] = {}  # (engine URL, pid) → its vocabulary size


def native_problem(path: str, body: dict[str, Any]) -> JSONResponse | None:
    """A 400 when the field a native endpoint reads is missing or of the wrong type (llama-server would answer
    an empty 200 for some)."""
    name, types = NATIVE_POST[path]
    if isinstance(body.get(name), types):
        return None
    kinds = " or ".join({"str": "a string", "list": "an array"}[t.__name__] for t in types)
    return error_response(400, f"{path} needs {name!r} as {kinds}", "invalid_request_error", "invalid_value",
                          param=name)


def native_refused(path: str) -> JSONResponse:
    return error_response(400, f"{path} is llama.cpp's own endpoint: this model is a remote OpenAI-compatible "
                          "upstream (use /v1/chat/completions or /v1/tasks/*)", "invalid_request_error",
                          "unsupported_endpoint")


async def vocab_size(http: httpx.AsyncClient, url: str, pid: int | None, headers: dict[str, str]) -> int | None:
    """The engine's vocabulary size (its ``/v1/models`` ``meta.n_vocab``), asked once per engine process."""
    if (url, pid) not in _VOCAB:
        try:
            answer = await http.get(url + "/v1/models", headers=headers, timeout=10)
            _VOCAB[(url, pid)] = int(answer.json()["data"][0]["meta"]["n_vocab"])
        except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError):
            return None
    return _VOCAB[(url, pid)]


def detokenize_problem(body: dict[str, Any], n_vocab: int | None) -> JSONResponse | None:
    """A 400 for token ids the engine does not have (llama-server would fail with its C++ message)."""
    tokens = body.get("tokens")
    top = f" below {n_vocab}" if n_vocab else ""
    if isinstance(tokens, list) and len(tokens) <= MAX_DETOKENIZE and all(
            type(t) is int and t >= 0 and (n_vocab is None or t < n_vocab) for t in tokens):
        return None
    return error_response(400, f"/detokenize needs 'tokens' as at most {MAX_DETOKENIZE} token ids (whole numbers "
                          f"from 0{top})", "invalid_request_error", "invalid_value", param="tokens")


def native_post(gateway: Gateway, path: str) -> Handler:
    """A POST passthrough: the gateway's guard, router and checks, the field it needs, valid token ids."""
    async def handler(request: Request) -> Response:
        prepared = await gateway.prepared(request, path)
        if isinstance(prepared, Response):
            return prepared
        call, pipe, body = prepared
        upstream = pipe.upstream
        if refused := native_refused(path) if upstream.replica.remote else native_problem(path, body):
            return pipe.done(call, refused)
        if path == "/detokenize" and (refused := detokenize_problem(body, await vocab_size(
                upstream.http, upstream.replica.url(), upstream.replica.pid(), upstream.replica.auth_headers()))):
            return pipe.done(call, refused)
        checked = await gateway.checked(path, prepared)
        if isinstance(checked, Response):
            return checked
        return await gateway.generated(request, path, (call, pipe, checked))

    return handler


def native_get(gateway: Gateway, path: str) -> Handler:
    """llama.cpp's read-only endpoints that tiankong's own flows read (``?model=`` picks the engine)."""
    async def handler(request: Request) -> Response:
        if (refusal := gateway.guard.refusal(request)) is not None:
            return refusal
        call = RequestRecord(path)
        routed = await gateway.state.router.route({"model": request.query_params.get("model")}, call)
        if isinstance(routed, Response):
            return routed
        replica = routed.replica
        if replica.remote:
            return native_refused(path)
        try:
            answer = await gateway.pipe_for(call).upstream.http.get(replica.url() + path,
                                                                    headers=replica.auth_headers())
        except httpx.HTTPError as exc:
            return engine_unavailable(f"the engine did not answer {path}: {type(exc).__name__}")
        if answer.status_code >= 400:
            return upstream_error(answer.status_code, answer.content)
        data = answer.json()
        if isinstance(data, dict):
            data.pop("model_path", None)  # where the file lies on the gateway's machine is not the caller's
        return JSONResponse(data)

    return handler
