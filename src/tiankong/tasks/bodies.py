"""The request bodies of ``/v1/tasks/<task>`` and their answers, for every caller that takes such a body: the
gateway's task routes and OpenAI-batch lines run on an engine (``batch/openai_fmt.py``).

Each registered task's body is its arguments model (``tasks.specs``, ``extra="forbid"``) plus ``model``, and the
answer is the task result's JSON (``spec.to_json``), the same shape the CLI prints with ``--json``; a spec with an
``http`` part reads the body itself (``extract``: ``{text, schema, instructions?, model?}``, ``tasks/extract.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field, ValidationError, create_model

from ..structured.drivers import run_async
from .extract import extract_answer, usage_json
from .specs import SPECS, TaskSpec, invalid_request

if TYPE_CHECKING:
    from ..client import AsyncBaseClient

__all__ = ["BODIES", "extract_answer", "task_answer", "usage_json"]


def _body(spec: TaskSpec[Any, Any]) -> type[BaseModel]:
    """The HTTP body of a task: its arguments and the model to run it on."""
    return create_model(f"{spec.name.capitalize()}Body", __base__=spec.args,
                        model=(str | None, Field(None, description="A served model (default: the first).")))


#: the body model of every task whose route validates its body with its arguments (not the ``http`` ones)
BODIES: dict[str, type[BaseModel]] = {name: _body(spec) for name, spec in SPECS.items() if spec.http is None}


async def task_answer(client: AsyncBaseClient, task: str, body: dict[str, Any],
                      model: str | None = None) -> dict[str, Any]:
    """Validate a registered task's body, run its flow on the client's engine (as ``model``, default the
    client's), return its JSON; a task with an ``http`` part answers the body its own way (on the client's
    model)."""
    spec = SPECS[task]
    if spec.http is not None:
        return await spec.http.answer(client, body)
    try:
        # strict: a JSON body says what it means (`"top_n": true` is not 1, `"near": "0.5"` not 0.5); the Python and
        # CLI surfaces keep Pydantic's conversions (a tuple of documents, a flag's text)
        args = BODIES[task].model_validate(body, strict=True)
    except ValidationError as exc:
        raise invalid_request(task, exc) from None
    # the body model extends the task's arguments, so it is the flow's arguments as it is
    answer: dict[str, Any] = spec.to_json(await run_async(spec.flow(args, model or client.model), client._request))
    return answer
