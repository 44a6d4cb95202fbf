"""Validated, fail-closed structured output over HTTP.

* ``/v1/chat/completions`` with ``response_format`` ``json_schema`` (or ``json_object``) runs through
  ``tiankong.structured``: the answer is validated against the schema, retried once with the validator's
  message, and an answer that cannot be made valid is a 4xx/5xx OpenAI-style error — never a 200 with
  invalid content.
* ``POST /v1/tasks/extract {text, schema, instructions?, model?}`` → ``{data, attempts, usage}``.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.responses import JSONResponse, Response, StreamingResponse

from ..api import AsyncClient
from ..errors import ConfigError, InvalidSchema
from ..structured import Structured
from ..tasks.bodies import extract_answer, usage_json
from .responses import tiankong_error_response

__all__ = ["extract_task", "structured_chat", "tiankong_error_response", "wants_structured"]
#: told about every validated answer: {"usage": {...}, "attempts": n} (for metrics)
Observer = Callable[[dict[str, Any]], None]


def wants_structured(body: dict[str, Any]) -> bool:
    """``response_format`` json_schema/json_object, or llama.cpp's own top-level ``json_schema`` field (validated
    the same way: the engine alone would return whatever its grammar let through, unchecked)."""
    response_format = body.get("response_format")
    return (isinstance(response_format, dict) and response_format.get("type") in ("json_schema", "json_object")) \
        or body.get("json_schema") is not None


def request_schema(body: dict[str, Any]) -> Any:
    if body.get("json_schema") is not None:
        if body.get("response_format") is not None:
            raise InvalidSchema("give the schema once: response_format or json_schema, not both")
        return body["json_schema"]
    return schema_from_response_format(body["response_format"])


def schema_from_response_format(response_format: dict[str, Any]) -> Any:
    if response_format.get("type") == "json_object":
        return {"type": "object"}
    spec = response_format.get("json_schema")
    if not isinstance(spec, dict):
        raise InvalidSchema("response_format.json_schema must be an object with a 'schema' field")
    schema = spec.get("schema", spec.get("schema_"))
    if schema is None:
        raise InvalidSchema("response_format.json_schema.schema is missing", hint="put the JSON Schema there")
    return schema


def _sampling(body: dict[str, Any]) -> dict[str, Any]:
    """The request's ``temperature`` and ``seed`` (tiankong's defaults: 0 and a fixed seed). ``stop`` is not
    applied: the schema's grammar decides where the answer ends."""
    sampling: dict[str, Any] = {}
    temperature = body.get("temperature")
    if temperature is not None:
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not 0 <= temperature <= 2:
            raise ConfigError("temperature must be a number from 0 to 2")
        sampling["temperature"] = float(temperature)
    seed = body.get("seed")
    if seed is not None:
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ConfigError("seed must be an integer")
        sampling["seed"] = seed
    return sampling


def _observe(observe: Observer | None, result: Structured[Any]) -> None:
    if observe is not None:
        observe({"usage": usage_json(result), "attempts": result.attempts})


async def structured_chat(client: AsyncClient, body: dict[str, Any], model_name: str,
                          observe: Observer | None = None) -> Response:
    schema = request_schema(body)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ConfigError("messages must be a non-empty list of {role, content} objects")
    max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
    if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
        raise ConfigError("max_tokens must be a positive integer")
    result = await client.generate(messages, schema=schema, max_tokens=max_tokens, **_sampling(body))
    _observe(observe, result)
    content = json.dumps(result.data, ensure_ascii=False, separators=(",", ":"))
    created = int(time.time())
    completion_id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
    extension = {"attempts": result.attempts, "validated": True, "enforced_by_validation": result.unenforced,
                 "minimal": result.minimal, **result.evidence()}
    if body.get("stream"):
        return _stream_once(completion_id, created, model_name, content, usage_json(result), extension)
    return JSONResponse({
        "id": completion_id, "object": "chat.completion", "created": created, "model": model_name,
        "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                     "message": {"role": "assistant", "content": content, "refusal": None}}],
        "usage": usage_json(result), "tiankong": extension,
    })


def _stream_once(completion_id: str, created: int, model: str, content: str, usage: dict[str, int],
                 extension: dict[str, Any]) -> Response:
    """A validated answer as SSE: one content chunk, a finish chunk, [DONE]."""

    def chunk(delta: dict[str, Any], finish: str | None, **extra: Any) -> bytes:
        data = {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}
        return f"data: {json.dumps(data, ensure_ascii=False)}\n\n".encode()

    async def events() -> AsyncIterator[bytes]:
        yield chunk({"role": "assistant", "content": content}, None)
        yield chunk({}, "stop", usage=usage, tiankong=extension)
        yield b"data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")


async def extract_task(client: AsyncClient, body: dict[str, Any], observe: Observer | None = None) -> Response:
    answer, result = await extract_answer(client, body)
    _observe(observe, result)
    return JSONResponse(answer)

