"""Reading a request body: size-bounded, UTF-8, standard JSON (``jsonsafe``), an object, sane token budgets."""

from __future__ import annotations

import asyncio
import json
import logging
import math
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse

from .. import jsonsafe
from ..client._shared import token_budget_problem
from .responses import error_response

BODY_TIMEOUT_S = 30.0
log = logging.getLogger("tiankong.gateway")


async def read_json(request: Request, limit: int, timeout_s: float = BODY_TIMEOUT_S) -> dict[str, Any] | JSONResponse:
    """The body as a JSON object, read no further than ``limit`` bytes and for no longer than ``timeout_s``
    (a client that trickles its body, or leaves mid-body, gets one log line, not a traceback)."""
    too_large = error_response(413, f"request body larger than {limit} bytes", "invalid_request_error",
                               "body_too_large")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        return too_large
    chunks, size = [], 0
    client = f"{request.client.host}:{request.client.port}" if request.client else "a client"
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    return too_large
                chunks.append(chunk)
    except TimeoutError:
        log.warning("%s %s from %s: body not received within %.0f s", request.method, request.url.path, client,
                    timeout_s)
        return error_response(408, f"the request body did not arrive within {timeout_s:g} s", "invalid_request_error",
                              "body_timeout", headers={"Connection": "close"})
    except ClientDisconnect:
        log.warning("%s %s from %s: the client left before sending its whole body", request.method, request.url.path,
                    client)
        return error_response(400, "the client left before sending its body", "invalid_request_error",
                              "client_disconnected")
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


#: the OpenAI routes, where temperature is OpenAI's 0..2 (llama.cpp's own /completion reads < 0 as greedy with
#: probabilities and takes any finite value)
OPENAI_SAMPLED = frozenset({"/v1/chat/completions", "/v1/completions"})


def temperature_problem(temperature: Any, path: str) -> str | None:
    """Why ``temperature`` is refused, or ``None``: not a finite number (``1e999`` parses as infinity, ``"hot"`` is
    no number: both went to the engine), or outside 0..2 on the OpenAI routes."""
    low, high = (0.0, 2.0) if path in OPENAI_SAMPLED else (-math.inf, math.inf)
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not math.isfinite(temperature) \
            or not low <= temperature <= high:
        where = "a number from 0 to 2" if path in OPENAI_SAMPLED else "a finite number"
        return f"temperature must be {where}, got {json.dumps(temperature)[:40]}"
    return None


def bad_generation_fields(body: dict[str, Any], path: str = "") -> JSONResponse | None:
    """A 400 when the token budget is not a positive integer the engine can hold (``token_budget_problem``) or the
    temperature is refused (:func:`temperature_problem`)."""
    problem = token_budget_problem(body)
    if problem is not None:
        return error_response(400, problem[1], "invalid_request_error", "invalid_max_tokens", param=problem[0])
    if body.get("temperature") is not None and (why := temperature_problem(body["temperature"], path)):
        return error_response(400, why, "invalid_request_error", "invalid_temperature", param="temperature")
    return None


PROMPT_FIELDS = ("messages", "prompt", "input", "text", "query", "documents", "question", "questions")
prompt_log = logging.getLogger("tiankong.prompts")


def log_prompt(route: str, key: str, body: dict[str, Any]) -> None:
    """``server.log_prompts``: the request's prompt fields as one JSON line (off by default; docs/security.md)."""
    fields = {name: body[name] for name in PROMPT_FIELDS if name in body}
    prompt_log.info(json.dumps({"route": route, "key": key or None, "model": body.get("model"), **fields},
                               ensure_ascii=False, default=str)[:20000])


def _one(value: Any) -> bool:
    return value is None or (value == 1 and not isinstance(value, bool))  # `true` passed as 1


LEGACY_FUNCTIONS = "functions/function_call are OpenAI's deprecated form: send tools and tool_choice instead"
#: OpenAI request fields a local llama-server would drop without a word: refused, naming the field, so nothing a
#: client asked for is silently ignored (a remote upstream gets them: it may honour them). value → still fine.
UNHONOURED: dict[str, dict[str, tuple[str, Any]]] = {
    "/v1/chat/completions": {
        "functions": (LEGACY_FUNCTIONS, lambda v: v in (None, [])),
        "function_call": (LEGACY_FUNCTIONS, lambda v: v in (None, "none", "auto")),
        "n": ("one choice per request is served: send n requests (seeds differ) instead", _one),
        "audio": ("audio output is not served", lambda v: v is None),
        "modalities": ("only text output is served", lambda v: v in (None, ["text"])),
        "prediction": ("predicted outputs are not served", lambda v: v is None),
        "store": ("answers are not stored here", lambda v: v in (None, False)),
        "web_search_options": ("web search is not served", lambda v: v is None),
        "stream": ("must be true or false (a string or a number was read by its truth: \"false\" streamed)",
                   lambda v: v is None or isinstance(v, bool)),
        "response_format": ('must be an object: {"type": "json_object"}, {"type": "json_schema", "json_schema": '
                            '{"schema": …}} or {"type": "text"} (a string was answered as plain text)',
                            lambda v: v is None or isinstance(v, dict)),
    },
    "/v1/completions": {
        "n": ("one choice per request is served: send n requests instead", _one),
        "best_of": ("best_of is not served: send several requests and pick", _one),
        "echo": ("echo is not served", lambda v: v in (None, False)),
        "suffix": ("suffix (insertion) is not served on /v1/completions", lambda v: v in (None, "")),
        "stream": ("must be true or false (a string or a number was read by its truth: \"false\" streamed)",
                   lambda v: v is None or isinstance(v, bool)),
    },
}


def _int(value: Any) -> bool:
    return value is None or (isinstance(value, int) and not isinstance(value, bool))


def _stop(value: Any) -> bool:
    return value is None or isinstance(value, str) or (
        isinstance(value, list) and all(isinstance(item, str) for item in value))


#: fields whose value of the wrong type the engine ignored (`"stop": 5` ran to max_tokens) or refused in its own
#: words (`"seed": "x"`: "[json.exception.type_error.302] …", no param): a 400 naming the field
TYPED: dict[str, tuple[str, Any]] = {
    "stop": ("must be a string or a list of strings", _stop),
    "seed": ("must be an integer", _int),
    "top_logprobs": ("must be an integer", _int),
}
TYPED_BY_PATH: dict[str, dict[str, tuple[str, Any]]] = {
    "/v1/chat/completions": {**TYPED, "logprobs": ("must be true or false", lambda v: v is None or
                                                   isinstance(v, bool)),
                             "response_format": ('type must be "text", "json_object" or "json_schema"',
                                                 lambda v: not isinstance(v, dict) or v.get("type") in
                                                 (None, "text", "json_object", "json_schema"))},
    "/v1/completions": {**TYPED, "logprobs": ("must be an integer (how many top tokens) or a boolean",
                                              lambda v: _int(v) or isinstance(v, bool)),  # Client.complete: true
                        "prompt": ("is required: a string or a list of strings", lambda v: v is not None)},
}


def unhonoured_field(path: str, body: dict[str, Any]) -> JSONResponse | None:
    """A 400 naming the first field of ``body`` a local engine would silently ignore (see ``UNHONOURED``) or
    that has the wrong type (``TYPED_BY_PATH``; a missing ``prompt`` on ``/v1/completions``)."""
    for field, (why, fine) in UNHONOURED.get(path, {}).items():
        if field in body and not fine(body[field]):
            return error_response(400, f"{field}: {why}", "invalid_request_error", "unsupported_field", param=field)
    for field, (why, fine) in TYPED_BY_PATH.get(path, {}).items():
        if not fine(body.get(field)):
            return error_response(400, f"{field} {why}, got {json.dumps(body.get(field))[:40]}",
                                  "invalid_request_error", "invalid_value", param=field)
    return None


#: generation routes whose requests get the gateway's default temperature when they name none
SAMPLED_PATHS = frozenset({"/v1/chat/completions", "/v1/completions", "/completion"})


def default_temperature(path: str, body: dict[str, Any], temperature: float | None) -> None:
    """A generation that names no temperature gets ``temperature`` (0: greedy, deterministic like ``Client``;
    ``server.sampling = "openai"``: 1, OpenAI's default); ``None`` leaves it to the engine."""
    if temperature is not None and path in SAMPLED_PATHS and body.get("temperature") is None:
        body["temperature"] = temperature
