"""Validated, fail-closed structured output over HTTP.

* ``/v1/chat/completions`` with ``response_format`` ``json_schema`` (or ``json_object``) runs through
  ``tiankong.structured``: the answer is validated against the schema, retried once with the validator's
  message, and an answer that cannot be made valid is a 4xx/5xx OpenAI-style error — never a 200 with
  invalid content.
* ``/v1/chat/completions`` with ``tools`` runs ``tiankong.structured.tools``: the decision to call (with its
  probability), the call's arguments under a grammar and validated (fail-closed), OpenAI's ``tool_calls`` and
  ``finish_reason: "tool_calls"`` (streamed: one delta holding every call, once they are validated).

``POST /v1/tasks/extract`` is a registered task's route (``app.py``; its answer: ``tasks/extract.py``).
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
from ..structured.drivers import run_async
from ..structured.tools import ToolCalls, call_flow, field_error, parse_tool_choice, parse_tools
from ..tasks.bodies import usage_json
from .body import temperature_problem
from .responses import tiankong_error_response

__all__ = ["structured_chat", "tiankong_error_response", "tool_chat", "wants_structured",
           "wants_tools"]
#: told about every validated answer: {"usage": {...}, "attempts": n} (for metrics)
Observer = Callable[[dict[str, Any]], None]


def wants_structured(body: dict[str, Any]) -> bool:
    """``response_format`` json_schema/json_object, or llama.cpp's own top-level ``json_schema`` field (validated
    the same way: the engine alone would return whatever its grammar let through, unchecked)."""
    response_format = body.get("response_format")
    return (isinstance(response_format, dict) and response_format.get("type") in ("json_schema", "json_object")) \
        or body.get("json_schema") is not None


def wants_tools(body: dict[str, Any]) -> bool:
    """A chat request with tools (an empty list is no tools; ``tool_choice`` alone is refused by ``tool_chat``).
    ``tools`` that is not a list — ``{}``, ``""``, ``0`` too — is for ``tool_chat`` to refuse (400 naming it): the
    engine answered it with a 500."""
    tools = body.get("tools")
    return bool(tools) or (tools is not None and not isinstance(tools, list)) or \
        body.get("tool_choice") not in (None, "none", "auto")


def request_schema(body: dict[str, Any]) -> tuple[Any, bool]:
    """The schema the answer must match, and whether it was read from the system prompt (``json_object``)."""
    if body.get("json_schema") is not None:
        if body.get("response_format") is not None:
            raise InvalidSchema("give the schema once: response_format or json_schema, not both")
        return body["json_schema"], False
    schema = schema_from_response_format(body["response_format"])
    if body["response_format"].get("type") == "json_object":
        found = schema_in_system_prompt(body.get("messages"))
        if found is not None and _usable(found):
            return found, True
    return schema, False


MAX_SCAN_CHARS = 100_000


def _usable(schema: dict[str, Any]) -> bool:
    from ..structured.constraints import schema_constraint  # noqa: PLC0415

    try:
        schema_constraint(schema)
    except ConfigError:  # InvalidSchema, SchemaNotSupported: then any JSON object, as asked
        return False
    return True


def schema_in_system_prompt(messages: Any) -> dict[str, Any] | None:
    """The largest JSON Schema object (``type: object`` with ``properties``) written in a system message.

    ``json_object`` clients that want a shape put its schema in the prompt (instructor's JSON mode, many
    hand-written prompts: "answer with JSON matching this schema"); a small model then often writes the schema
    back. Constraining the answer to that schema is what such a prompt asks for; the answer says so
    (``tiankong.schema_from_prompt``) and is validated like any other."""
    found: dict[str, Any] | None = None
    decoder = json.JSONDecoder()
    for message in messages if isinstance(messages, list) else []:
        if not isinstance(message, dict) or message.get("role") not in ("system", "developer"):
            continue
        text = message.get("content")
        if not isinstance(text, str):
            continue
        text = text[:MAX_SCAN_CHARS]
        start = text.find("{")
        while start != -1:
            try:
                value, end = decoder.raw_decode(text, start)
            except ValueError:
                start = text.find("{", start + 1)
                continue
            if isinstance(value, dict) and isinstance(value.get("properties"), dict) and \
                    value.get("type", "object") == "object" and (found is None or len(str(value)) > len(str(found))):
                found = value
            start = text.find("{", end)
    return found


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


#: fields a validated answer (response_format, tools) does not apply, with why: a 400 naming them when they would
#: change the answer — they were dropped without a word (the contract: honoured, passed on, or a 400 naming it)
NOT_APPLIED = {
    "logprobs": "log probabilities are not returned with response_format or tools (the answer is validated and "
                "may be a retry's): ask without logprobs",
    "top_logprobs": "log probabilities are not returned with response_format or tools: ask without top_logprobs",
    "stop": "stop is not applied with response_format or tools (the grammar decides where the answer ends): leave "
            "it out",
    "logit_bias": "logit_bias is not applied with response_format or tools: leave it out",
    "presence_penalty": "penalties are not applied with response_format or tools: leave presence_penalty out",
    "frequency_penalty": "penalties are not applied with response_format or tools: leave frequency_penalty out",
    "repeat_penalty": "penalties are not applied with response_format or tools: leave repeat_penalty out",
}
_NEUTRAL: dict[str, tuple[Any, ...]] = {"logprobs": (None, False), "top_logprobs": (None, 0), "stop": (None, [], ""),
                                        "logit_bias": (None, {}), "presence_penalty": (None, 0, 0.0),
                                        "frequency_penalty": (None, 0, 0.0), "repeat_penalty": (None, 1, 1.0)}
#: truncation of the sampled distribution, with the value that truncates nothing: nothing to apply to greedy
#: answers (temperature 0, the default); another value with a temperature above 0 is refused
TRUNCATION: dict[str, tuple[Any, ...]] = {"top_p": (None, 1, 1.0), "top_k": (None, 0), "min_p": (None, 0, 0.0),
                                          "typical_p": (None, 1, 1.0)}


def check_applied(body: dict[str, Any]) -> None:
    """A 400 for a field of ``body`` the validated answer would not apply (:data:`NOT_APPLIED`)."""
    for name, why in NOT_APPLIED.items():
        if name in body and body[name] not in _NEUTRAL[name]:
            raise _not_applied(why, name)
    temperature = body.get("temperature")
    if isinstance(temperature, (int, float)) and not isinstance(temperature, bool) and temperature > 0:
        for name, neutral in TRUNCATION.items():
            if body.get(name) not in neutral:
                raise _not_applied(f"{name} is not applied to answers sampled under response_format or tools "
                                   f"(temperature {temperature}: the request's, or the gateway's default): leave it "
                                   "out, or ask at temperature 0", name)


def _not_applied(message: str, param: str) -> ConfigError:
    error = ConfigError(message, hint="see docs/structured.md#fields-a-validated-answer-does-not-apply")
    error.param = param
    return error


def _sampling(body: dict[str, Any]) -> dict[str, Any]:
    """The request's ``temperature`` and ``seed`` (tiankong's defaults: 0 and a fixed seed); the fields that
    would change the answer and are not applied are refused first (:func:`check_applied`)."""
    check_applied(body)
    sampling: dict[str, Any] = {}
    temperature = body.get("temperature")
    if temperature is not None:
        if why := temperature_problem(temperature, "/v1/chat/completions"):  # the admission's rule (body.py)
            raise ConfigError(why)
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
    schema, from_prompt = request_schema(body)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ConfigError("messages must be a non-empty list of {role, content} objects")
    max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
    if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
        raise ConfigError("max_tokens must be a positive integer")
    result = await client.generate(messages, schema=schema, max_tokens=max_tokens, **_sampling(body))
    _observe(observe, result)
    content = json.dumps(result.data, ensure_ascii=False, separators=(",", ":"))
    extension = {"attempts": result.attempts, "validated": True, "enforced_by_validation": result.unenforced,
                 "minimal": result.minimal, **result.evidence(), **({"schema_from_prompt": True} if from_prompt
                                                                     else {})}
    return _completion(body, model_name, {"role": "assistant", "content": content, "refusal": None}, "stop",
                       usage_json(result), extension)


def _completion(body: dict[str, Any], model: str, message: dict[str, Any], finish: str, usage: dict[str, int],
                extension: dict[str, Any]) -> Response:
    """One finished answer as OpenAI's chat completion, or (``stream``) as SSE: the message in one delta, a
    finish chunk with the usage, [DONE]."""
    created, completion_id = int(time.time()), f"chatcmpl-{uuid.uuid4().hex[:24]}"
    if not body.get("stream"):
        return JSONResponse({
            "id": completion_id, "object": "chat.completion", "created": created, "model": model,
            "choices": [{"index": 0, "finish_reason": finish, "logprobs": None, "message": message}],
            "usage": usage, "tiankong": extension,
        })

    def chunk(delta: dict[str, Any], finish: str | None, **extra: Any) -> bytes:
        data = {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}
        return f"data: {json.dumps(data, ensure_ascii=False)}\n\n".encode()

    delta = {k: v for k, v in message.items() if k != "refusal"}
    if "tool_calls" in delta:  # streamed calls carry their index
        delta["tool_calls"] = [{"index": i, **call} for i, call in enumerate(delta["tool_calls"])]

    async def events() -> AsyncIterator[bytes]:
        yield chunk(delta, None)
        yield chunk({}, finish, usage=usage, tiankong=extension)
        yield b"data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")


async def tool_chat(client: AsyncClient, body: dict[str, Any], model_name: str,
                    observe: Observer | None = None) -> Response:
    """A chat request with ``tools``: validated calls (``finish_reason: "tool_calls"``) or a reply."""
    if body.get("tools") in (None, []):
        raise field_error("tool_choice needs tools: declare the functions in tools", "tool_choice")
    if wants_structured(body):
        raise field_error("tools and response_format together are not served: ask for the calls (tools) or for "
                           "one structured answer (response_format), in two requests", "response_format")
    tools = parse_tools(body["tools"])
    mode, name = parse_tool_choice(body.get("tool_choice"), tools)
    parallel = body.get("parallel_tool_calls", True)
    if not isinstance(parallel, bool):
        raise field_error("parallel_tool_calls must be true or false", "parallel_tool_calls")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ConfigError("messages must be a non-empty list of {role, content} objects")
    max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
    result: ToolCalls = await run_async(call_flow(messages, tools, tool_choice=mode, function=name,
                                                  parallel=parallel, max_tokens=max_tokens,
                                                  options=_sampling(body)), client._request)
    usage = result.to_json()["usage"]
    if observe is not None:
        observe({"usage": usage, "attempts": result.attempts})
    if result.calls:
        message: dict[str, Any] = {"role": "assistant", "content": None, "refusal": None,
                                   "tool_calls": [call.to_openai() for call in result.calls]}
        return _completion(body, model_name, message, "tool_calls", usage, result.evidence())
    message = {"role": "assistant", "content": result.content, "refusal": None}
    return _completion(body, model_name, message, result.finish_reason, usage, result.evidence())
