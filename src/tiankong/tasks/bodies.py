"""The request bodies of ``/v1/tasks/<task>`` and their answers, for every caller that takes such a body: the
gateway's task routes and OpenAI-batch lines run on an engine (``batch/openai_fmt.py``).

Each registered task's body is its arguments model (``tasks.specs``, ``extra="forbid"``) plus ``model``;
``extract`` takes ``{text, schema, instructions?, model?}``. The answer is the task result's JSON
(``spec.to_json``), the same shape the CLI prints with ``--json``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field, ValidationError, create_model

from ..errors import ConfigError, InvalidSchema
from ..structured.drivers import run_async
from .specs import SPECS, TaskSpec, invalid_request

if TYPE_CHECKING:
    from ..client import AsyncBaseClient
    from ..structured import Structured


def _body(spec: TaskSpec[Any, Any]) -> type[BaseModel]:
    """The HTTP body of a task: its arguments and the model to run it on."""
    return create_model(f"{spec.name.capitalize()}Body", __base__=spec.args,
                        model=(str | None, Field(None, description="A served model (default: the first).")))


BODIES: dict[str, type[BaseModel]] = {name: _body(spec) for name, spec in SPECS.items()}


async def task_answer(client: AsyncBaseClient, task: str, body: dict[str, Any],
                      model: str | None = None) -> dict[str, Any]:
    """Validate a registered task's body, run its flow on the client's engine (as ``model``, default the
    client's), return its JSON."""
    spec = SPECS[task]
    try:
        args = BODIES[task].model_validate(body)
    except ValidationError as exc:
        raise invalid_request(task, exc) from None
    # the body model extends the task's arguments, so it is the flow's arguments as it is
    answer: dict[str, Any] = spec.to_json(await run_async(spec.flow(args, model or client.model), client._request))
    return answer


async def extract_answer(client: Any, body: dict[str, Any]) -> tuple[dict[str, Any], Structured[Any]]:
    """An extract body's answer ``{data, attempts, usage, enforced_by_validation, minimal, tiankong}`` and its
    result (``tiankong``: the decoding path, tokens decoded and fast-forwarded)."""
    text, schema = body.get("text"), body.get("schema")
    if not isinstance(text, str) or not text.strip():
        raise ConfigError("'text' must be a non-empty string")
    if schema is None:
        raise InvalidSchema("'schema' is required", hint="pass a JSON Schema object")
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise ConfigError("'instructions' must be a string")
    result = await client.extract_result(text, schema, instructions=instructions)
    return {"data": result.data, "attempts": result.attempts, "usage": usage_json(result),
            "enforced_by_validation": result.unenforced, "minimal": result.minimal,
            "tiankong": result.evidence()}, result


def usage_json(result: Structured[Any]) -> dict[str, int]:
    """A structured result's token usage in OpenAI's shape."""
    usage = result.usage
    return {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.total_tokens}
