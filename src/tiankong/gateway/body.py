"""Reading a request body: size-bounded, UTF-8, standard JSON (``jsonsafe``), an object, sane token budgets."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from .. import jsonsafe
from .responses import error_response


async def read_json(request: Request, limit: int) -> dict[str, Any] | JSONResponse:
    """The body as a JSON object, read no further than ``limit`` bytes."""
    too_large = error_response(413, f"request body larger than {limit} bytes", "invalid_request_error",
                               "body_too_large")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        return too_large
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return too_large
        chunks.append(chunk)
    try:
        body = jsonsafe.loads(b"".join(chunks).decode("utf-8"))
    except UnicodeDecodeError:
        return error_response(400, "request body is not valid UTF-8", "invalid_request_error", "invalid_utf8")
    except jsonsafe.UnsafeJSON as exc:
        return error_response(400, f"request body is refused: {exc}", "invalid_request_error", "invalid_json")
    except ValueError as exc:
        return error_response(400, f"request body is not valid JSON: {exc}", "invalid_request_error", "invalid_json")
    if not isinstance(body, dict):
        return error_response(400, "request body must be a JSON object", "invalid_request_error", "invalid_body")
    return body


def bad_token_budget(body: dict[str, Any]) -> JSONResponse | None:
    """``max_tokens`` must be a positive integer (llama-server reads -1 or 0 as "until the context is full")."""
    for key in ("max_tokens", "max_completion_tokens", "n_predict"):
        value = body.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            return error_response(400, f"{key} must be a positive integer, got {json.dumps(value)[:40]}",
                                  "invalid_request_error", "invalid_max_tokens")
    return None
