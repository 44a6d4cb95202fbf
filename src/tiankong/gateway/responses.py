"""OpenAI-shaped error bodies: ``{"error": {"message", "type", "code", "param"}}`` for every failure, on every
route (``param``: the request field at fault, else null)."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from typing import Any

from starlette.responses import JSONResponse

from ..engine.pool import REPROBE_S
from ..errors import ServerError, TiankongError, Unreachable

log = logging.getLogger("tiankong.gateway")


def error_body(message: str, type_: str, code: str | None = None,
               param: str | None = None) -> dict[str, dict[str, str | None]]:
    return {"error": {"message": message, "type": type_, "code": code or type_, "param": param}}


def error_response(status: int, message: str, type_: str, code: str | None = None,
                   headers: dict[str, str] | None = None, param: str | None = None) -> JSONResponse:
    return JSONResponse(error_body(message, type_, code, param), status_code=status, headers=headers)


def sse_error(message: str, type_: str, code: str) -> bytes:
    """An error as one SSE event (what a stream that already answered 200 can still say)."""
    return f"data: {json.dumps(error_body(message, type_, code))}\n\n".encode()


def engine_unavailable(why: str) -> JSONResponse:
    return error_response(503, f"the engine is unavailable ({why}); retry shortly", "engine_error",
                          "engine_unavailable", headers={"Retry-After": "2"})


def upstream_unreachable(name: str, error: str) -> JSONResponse:
    """A remote upstream no connection could be made to (``engine/replica.py``): 503 at once, retried later."""
    return error_response(503, f"the upstream {name} cannot be reached ({error}); it is tried again within "
                          f"{REPROBE_S:g} s", "engine_error", "engine_unavailable",
                          headers={"Retry-After": str(math.ceil(REPROBE_S))})


def deadline_exceeded(timeout_s: float, where: str) -> JSONResponse:
    return error_response(504, f"request deadline of {timeout_s:g} s passed {where}", "timeout_error",
                          "deadline_exceeded")


def queue_full(retry_after_s: int, waiting: int) -> JSONResponse:
    return error_response(429, f"the engine queue is full ({waiting} requests waiting); retry after "
                          f"{retry_after_s} s", "rate_limit_exceeded", "queue_full",
                          headers={"Retry-After": str(retry_after_s)})


def rpm_exceeded(retry_after_s: int, rpm: int) -> JSONResponse:
    return error_response(429, f"this API key may start {rpm} requests per minute; retry after {retry_after_s} s",
                          "rate_limit_exceeded", "rpm_exceeded", headers={"Retry-After": str(retry_after_s)})


def upstream_error(status: int, content: bytes, headers: Mapping[str, str] | None = None) -> JSONResponse:
    """An engine's or a remote upstream's error answer, re-shaped (its 4xx stay 4xx with their OpenAI type, code
    and param — a tiankong or OpenAI upstream's ``queue_full``, ``unsupported_field``/``n`` —, a 429 keeps its
    ``Retry-After``; 501 becomes 400 ``not_supported``, other 5xx become engine errors)."""
    err: dict[str, Any] = {}
    try:
        found = json.loads(content).get("error", {})
        err = found if isinstance(found, dict) else {"message": str(found)}
        message = err.get("message")
    except (ValueError, AttributeError):
        message = content.decode("utf-8", "replace")[:300]
    kind = err.get("type")
    if kind == "exceed_context_size_error":  # OpenAI's code, which clients check to shorten and retry
        return error_response(400, message or "the request does not fit the context", "invalid_request_error",
                              "context_length_exceeded")
    if status == 501:  # e.g. embeddings from an engine started without --embeddings: the request can't be served
        return error_response(400, message or "not supported by this engine", "invalid_request_error", "not_supported")
    if status >= 500 and "mmproj" in (message or ""):  # a text-only engine was sent an image: the request's fault
        return error_response(400, f"this model takes no images ({message})", "invalid_request_error",
                              "image_not_supported")
    if status >= 500:  # the engine's own failure text (C++ exceptions, internals) stays in the gateway's log
        log.warning("engine answered HTTP %d: %s", status, (message or "")[:300])
        return error_response(status, f"the engine could not answer this request (HTTP {status}); the gateway's "
                              "log has its message", "engine_error")
    if status in (401, 403):  # the upstream refused the gateway's own credentials: not the client's key
        return error_response(502, f"the upstream refused this gateway's credentials (HTTP {status}: {message}); "
                              "check the pool model's api_key_env", "upstream_error", "upstream_auth")
    type_ = kind if isinstance(kind, str) and kind else ("rate_limit_exceeded" if status == 429
                                                          else "invalid_request_error")
    code, param = err.get("code"), err.get("param")
    retry = (headers or {}).get("retry-after") if status == 429 else None
    return error_response(status, message or f"engine answered HTTP {status}", type_,
                          code if isinstance(code, str) and code else type_,
                          headers={"Retry-After": retry} if retry else None,
                          param=param if isinstance(param, str) else None)


def tiankong_error_response(exc: TiankongError) -> JSONResponse:
    return error_response(exc.http_status, exc.one_line(), exc.type, exc.type, param=exc.param)


def error_for(exc: TiankongError) -> JSONResponse:
    if isinstance(exc, ServerError) and 400 <= exc.status < 500:
        return error_response(400, exc.one_line(), "invalid_request_error", "upstream_rejected")
    if isinstance(exc, Unreachable):  # no connection (not a timeout, an odd answer, a stream's error event)
        # no connection, no answer in time: a down remote upstream is what a down engine is on the OpenAI routes
        # (503 engine_unavailable, Retry-After), not a 502 carrying the library's advice ("pass model= …")
        return engine_unavailable(exc.message)
    return tiankong_error_response(exc)
