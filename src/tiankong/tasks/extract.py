"""``extract``: fields from a text as JSON valid against a JSON Schema — the registered task's parts beyond its
arguments (``ExtractArgs`` in ``tasks/args.py``) and its entry in ``tasks/specs.py``.

Unlike the other tasks, a client runs it with its own decoding settings (grammars, fast-forward, slot leases:
``Client.extract_result``), and its answer carries more than the result: ``{data, attempts, usage,
enforced_by_validation, minimal, tiankong}`` (``tiankong``: the decoding path, tokens decoded and fast-forwarded).
Its gateway route reads the body itself (:func:`extract_answer`; the OpenAPI schemas below); the command reads the
schema from a file (``--schema``) and prints the data as one line.
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import ConfigError, InvalidSchema
from ..structured.flow import Flow, Structured
from .args import ExtractArgs


def extract_flow(a: ExtractArgs, model: str | None) -> Flow[Structured[Any]]:
    """The flow with the default decoding (what a batch worker without a client's settings runs)."""
    from ..structured.extract_flow import extract_flow as _extract_flow

    return _extract_flow(model, a.text, a.schema_, a.instructions, False, None, 2)


def client_call(client: Any, a: ExtractArgs) -> Any:
    """The client's own extraction (its decoding settings; one call at a tiankong gateway): a ``Structured`` from
    a ``Client``, an awaitable of it from an ``AsyncClient``."""
    return client.extract_result(a.text, a.schema_, instructions=a.instructions)


def usage_json(result: Structured[Any]) -> dict[str, int]:
    """A structured result's token usage in OpenAI's shape."""
    usage = result.usage
    return {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.total_tokens}


def extract_json(result: Structured[Any]) -> dict[str, Any]:
    """The answer: the data, attempts, usage, the keywords only validation enforced, whether the answer is the
    minimal one, and the decoding evidence."""
    return {"data": result.data, "attempts": result.attempts, "usage": usage_json(result),
            "enforced_by_validation": result.unenforced, "minimal": result.minimal, "tiankong": result.evidence()}


def extract_line(result: Structured[Any]) -> str:
    """The data as one line of JSON."""
    return json.dumps(result.data, ensure_ascii=False)


async def extract_answer(client: Any, body: dict[str, Any]) -> tuple[dict[str, Any], Structured[Any]]:
    """An extract body's answer (:func:`extract_json`) and its result."""
    unknown = sorted(set(body) - set(BODY["properties"]))
    if unknown:  # refused, not dropped: a client's field the task would ignore is a mistake it should hear of
        raise ConfigError(f"invalid extract request: {unknown[0]}: not a field of this task", param=unknown[0],
                          hint=f"fields: {', '.join(sorted(BODY['properties']))} (docs/tasks.md#extract-parameters)")
    text, schema = body.get("text"), body.get("schema")
    if not isinstance(text, str) or not text.strip():
        raise ConfigError("'text' must be a non-empty string", param="text")
    if schema is None:
        raise InvalidSchema("'schema' is required", hint="pass a JSON Schema object", param="schema")
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise ConfigError("'instructions' must be a string", param="instructions")
    result: Structured[Any] = await client.extract_result(text, schema, instructions=instructions)
    return extract_json(result), result


async def http_answer(client: Any, body: dict[str, Any]) -> dict[str, Any]:
    """``POST /v1/tasks/extract``'s answer."""
    return (await extract_answer(client, body))[0]


#: the route's OpenAPI schemas (the body is read by :func:`extract_answer`, not by the arguments model)
BODY: dict[str, Any] = {"type": "object", "required": ["text", "schema"], "additionalProperties": False,
                        "properties": {"text": {"type": "string", "minLength": 1},
                                       "schema": {"type": "object", "description": "a JSON Schema"},
                                       "instructions": {"type": "string"}, "model": {"type": "string"}}}
ANSWER: dict[str, Any] = {"type": "object", "required": ["data", "attempts", "usage"],
                          "properties": {"data": {}, "attempts": {"type": "integer"}, "usage": {"type": "object"}}}
