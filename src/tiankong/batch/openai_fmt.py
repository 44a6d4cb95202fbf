"""OpenAI Batch API files: input lines ``{custom_id, method, url, body}`` → output lines
``{id, custom_id, response: {status_code, request_id, body}, error}``.

``url`` is one of OpenAI's ``/v1/chat/completions``, ``/v1/completions``, ``/v1/embeddings`` or one of
tiankong's ``/v1/tasks/<task>`` (the same body as over HTTP). On an engine (``batch run --model`` or ``--url``
of a llama-server) a chat body with ``response_format: {type: json_schema}`` goes through tiankong's structured
path (constrained, validated, retried) and comes back as a ``chat.completion`` whose content is the validated
JSON, a task line runs the task's flow, and every other body is sent to the engine's own endpoint as it is.
Through a tiankong gateway (``passthrough``: the gateway's own Batch API) every body goes to the gateway's route
of that URL, which does all of that itself.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from ..api import AsyncClient
from ..client import validate_messages
from ..client._embeddings import embeddings_items, openai_embeddings
from ..client._shared import token_budget_problem
from ..errors import ConfigError, ServerError, TiankongError
from ..structured.flow import Structured
from ..tasks.bodies import extract_answer, task_answer, usage_json
from ..tasks.specs import SPECS

OPENAI_ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings")
TASK_NAMES = tuple(dict.fromkeys(("extract", *SPECS)))  # (extract is a registered task too: once)
TASK_ENDPOINTS = tuple(f"/v1/tasks/{name}" for name in TASK_NAMES)
ENDPOINTS = (*OPENAI_ENDPOINTS, *TASK_ENDPOINTS)


def _request_id() -> str:
    return uuid.uuid4().hex


def _check(data: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The URL and body of a request line (a streamed body is refused: a batch answer is one JSON body)."""
    method = str(data.get("method", "POST")).upper()
    url = data.get("url")
    body = data.get("body")
    if method != "POST":
        raise ConfigError(f"method {method} is not supported (only POST)")
    if url not in ENDPOINTS:
        raise ConfigError(f"url {url!r} is not supported",
                          hint=f"use {', '.join(OPENAI_ENDPOINTS)} or /v1/tasks/<task> (tasks: "
                               f"{', '.join(TASK_NAMES)})")
    if not isinstance(body, dict):
        raise ConfigError("body must be a JSON object")
    if body.get("stream"):
        raise ConfigError("stream is not supported in a batch (each answer is one JSON body)",
                          hint="leave stream out of the body")
    return str(url), body


def _json_schema(body: dict[str, Any]) -> dict[str, Any] | None:
    fmt = body.get("response_format")
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema":
        return None
    spec = fmt.get("json_schema")
    schema = spec.get("schema") if isinstance(spec, dict) else None
    if not isinstance(schema, dict):
        raise ConfigError("response_format.json_schema.schema must be a JSON Schema object")
    return schema


def _completion(result: Structured[Any], model: str | None) -> dict[str, Any]:
    content = json.dumps(result.data, ensure_ascii=False)
    return {
        "id": f"chatcmpl-{_request_id()}", "object": "chat.completion", "created": int(time.time()),
        "model": model or "default",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                     "finish_reason": result.finish_reason or "stop"}],
        "usage": usage_json(result),
    }


def check_line(data: Any) -> str:
    """The URL of a valid request line; ``ConfigError`` naming what is wrong (``custom_id`` included)."""
    if not isinstance(data, dict):
        raise ConfigError("a request line must be a JSON object {custom_id, method, url, body}")
    custom_id = data.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        raise ConfigError("custom_id must be a non-empty string")
    unknown = sorted(set(data) - {"custom_id", "method", "url", "body"})
    if unknown:
        raise ConfigError(f"unknown request-line field(s) {unknown}", hint="fields: custom_id, method, url, body")
    return _check(data)[0]


async def run_request(client: AsyncClient, data: dict[str, Any], *, passthrough: bool = False) -> dict[str, Any]:
    """The response body for one OpenAI batch request line. A body the gateway would refuse fails here, on its own
    line (as OpenAI fails a line's request, not the upload): a token budget the engine cannot hold (it would wrap
    2**32 + 1 to 1), chat messages that are empty (an empty prompt) or not {role, content} objects."""
    url, body = _check(data)
    if (problem := token_budget_problem(body)) is not None:
        raise ConfigError(f"body.{problem[1]}")
    if url == "/v1/chat/completions":
        validate_messages(body.get("messages"))
    if passthrough:
        answer: dict[str, Any] = await client._forward(url, body)
        return answer
    if url == "/v1/embeddings":
        return await _embeddings(client, body)
    if url == "/v1/completions":
        return await _post(client, url, body)
    if url in TASK_ENDPOINTS:
        return await _task(client, url.removeprefix("/v1/tasks/"), body)
    schema = _json_schema(body) if url == "/v1/chat/completions" else None
    if schema is None:
        return await _post(client, url, body)
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise ConfigError("body.messages must be a list of {role, content} objects")
    max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
    result = await client.generate(messages, schema=schema, max_tokens=max_tokens)
    return _completion(result, body.get("model"))


async def _post(client: AsyncClient, url: str, body: dict[str, Any]) -> dict[str, Any]:
    answer = await client._request("POST", url, body)
    if not isinstance(answer, dict):
        raise ConfigError(f"the engine answered {url} with {str(answer)[:100]}")
    return answer


async def _embeddings(client: AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
    """As the gateway's ``/v1/embeddings``: tiankong's engines pool nothing (``--pooling none``), which llama-server's
    OpenAI endpoint refuses — then every token's vector is read and mean-pooled, as ``--pooling mean`` gives."""
    items = embeddings_items(body.get("input"))
    answer = await openai_embeddings(client._request, {**body, "input": items}, items, body.get("model"))
    if not isinstance(answer, dict):
        raise ConfigError(f"the engine answered /v1/embeddings with {str(answer)[:100]}")
    return answer


async def _task(client: AsyncClient, task: str, body: dict[str, Any]) -> dict[str, Any]:
    """A ``/v1/tasks/<task>`` line on an engine: the body the gateway's route takes, the answer it gives."""
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise ConfigError("model must be a string")
    if task == "extract":
        return (await extract_answer(client, body))[0]
    return await task_answer(client, task, body, model)


def output_line(custom_id: Any, body: dict[str, Any]) -> dict[str, Any]:
    return {"id": f"batch_req_{_request_id()}", "custom_id": custom_id,
            "response": {"status_code": 200, "request_id": _request_id(), "body": body}, "error": None}


def error_line(custom_id: Any, line: int, exc: TiankongError | str) -> dict[str, Any]:
    """An OpenAI-style error line (plus ``line``: where the request was in the input)."""
    answered = _answer_of(exc)
    if answered is not None:  # the server's own answer (a gateway's 4xx), as OpenAI's error lines carry it
        status, body = answered
        error = body["error"]
        code, message = str(error.get("code") or error.get("type") or "error"), str(error.get("message", ""))
    else:
        if isinstance(exc, str):
            code, message, status = "invalid_request", exc, 400
        else:
            code, message, status = exc.type, exc.one_line(), exc.http_status
        body = {"error": {"message": message, "type": code, "code": code}}
    return {"id": f"batch_req_{_request_id()}", "custom_id": custom_id,
            "response": {"status_code": status, "request_id": _request_id(), "body": body},
            "error": {"code": code, "message": message}, "line": line}


def _answer_of(exc: TiankongError | str) -> tuple[int, dict[str, Any]] | None:
    if not isinstance(exc, ServerError):
        return None
    try:
        body = json.loads(exc.body)
    except ValueError:
        return None
    if not isinstance(body, dict) or not isinstance(body.get("error"), dict):
        return None
    return exc.status, body
