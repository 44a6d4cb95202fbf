"""OpenAI Batch API files: input lines ``{custom_id, method, url, body}`` → output lines
``{id, custom_id, response: {status_code, request_id, body}, error}``.

A body with ``response_format: {type: json_schema}`` goes through tiankong's structured path (constrained,
validated, retried) and comes back as a ``chat.completion`` whose content is the validated JSON; every other
body is sent to the engine's own endpoint as it is.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from ..api import AsyncClient
from ..errors import ConfigError, TiankongError
from ..structured.flow import Structured

ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings")


def _request_id() -> str:
    return uuid.uuid4().hex


def _check(data: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    method = str(data.get("method", "POST")).upper()
    url = data.get("url")
    body = data.get("body")
    if method != "POST":
        raise ConfigError(f"method {method} is not supported (only POST)")
    if url not in ENDPOINTS:
        raise ConfigError(f"url {url!r} is not supported", hint=f"use one of {', '.join(ENDPOINTS)}")
    if not isinstance(body, dict):
        raise ConfigError("body must be a JSON object")
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
    usage = result.usage
    return {
        "id": f"chatcmpl-{_request_id()}", "object": "chat.completion", "created": int(time.time()),
        "model": model or "default",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                     "finish_reason": result.finish_reason or "stop"}],
        "usage": {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
                  "total_tokens": usage.total_tokens},
    }


async def run_request(client: AsyncClient, data: dict[str, Any]) -> dict[str, Any]:
    """The response body for one OpenAI batch request line."""
    url, body = _check(data)
    schema = _json_schema(body) if url == "/v1/chat/completions" else None
    if schema is None:
        answer = await client._request("POST", url, body)
        if not isinstance(answer, dict):
            raise ConfigError(f"the engine answered {url} with {str(answer)[:100]}")
        return answer
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise ConfigError("body.messages must be a list of {role, content} objects")
    max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
    result = await client.generate(messages, schema=schema, max_tokens=max_tokens)
    return _completion(result, body.get("model"))


def output_line(custom_id: Any, body: dict[str, Any]) -> dict[str, Any]:
    return {"id": f"batch_req_{_request_id()}", "custom_id": custom_id,
            "response": {"status_code": 200, "request_id": _request_id(), "body": body}, "error": None}


def error_line(custom_id: Any, line: int, exc: TiankongError | str) -> dict[str, Any]:
    """An OpenAI-style error line (plus ``line``: where the request was in the input)."""
    if isinstance(exc, str):
        code, message, status = "invalid_request", exc, 400
    else:
        code, message, status = exc.type, exc.one_line(), exc.http_status
    error = {"message": message, "type": code, "code": code}
    return {"id": f"batch_req_{_request_id()}", "custom_id": custom_id,
            "response": {"status_code": status, "request_id": _request_id(), "body": {"error": error}},
            "error": {"code": code, "message": message}, "line": line}
