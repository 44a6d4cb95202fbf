"""Run one record through the job's task on an ``AsyncClient``; count the tokens every call used."""

from __future__ import annotations

import contextvars
import json
import string
from dataclasses import dataclass
from typing import Any

from ..api import AsyncClient
from ..errors import ConfigError
from .job import BatchJob


class MissingField(ConfigError):
    """A record lacks a field the task (or the chat template) uses."""


@dataclass
class Meter:
    """Tokens and engine calls of one item (all of its calls, retries included)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls: int = 0

    def add(self, answer: dict[str, Any]) -> None:
        self.calls += 1
        usage = answer.get("usage")
        if isinstance(usage, dict):
            self.prompt_tokens += int(usage.get("prompt_tokens") or 0)
            self.completion_tokens += int(usage.get("completion_tokens") or 0)
        elif "tokens_evaluated" in answer or "tokens_predicted" in answer:  # llama.cpp /completion
            self.prompt_tokens += int(answer.get("tokens_evaluated") or 0)
            self.completion_tokens += int(answer.get("tokens_predicted") or 0)

    def to_json(self) -> dict[str, int]:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "total_tokens": self.prompt_tokens + self.completion_tokens}


METER: contextvars.ContextVar[Meter | None] = contextvars.ContextVar("tiankong_batch_meter", default=None)


class MeteredClient(AsyncClient):
    """``AsyncClient`` that adds every answer's token counts to the current item's ``Meter``."""

    async def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        return _metered(await super()._request(method, path, body))

    async def _forward(self, path: str, body: dict[str, Any]) -> Any:
        return _metered(await super()._forward(path, body))


def _metered(answer: Any) -> Any:
    meter = METER.get()
    if meter is not None and isinstance(answer, dict):
        meter.add(answer)
    return answer


def field_text(data: dict[str, Any], name: str) -> str:
    if name not in data or data[name] is None:
        raise MissingField(f"the record has no field {name!r}")
    value = data[name]
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def render(template: str, data: dict[str, Any]) -> str:
    """Fill ``{field}`` placeholders from the record (format specs and conversions are not evaluated)."""
    parts: list[str] = []
    for literal, name, _, _ in string.Formatter().parse(template):
        parts.append(literal)
        if name is not None:
            try:
                parts.append(field_text(data, name))
            except MissingField:
                raise MissingField(f"the record has no field {name!r} used by the template") from None
    return "".join(parts)


async def run_task(client: AsyncClient, job: BatchJob, data: dict[str, Any]) -> Any:
    """The task's JSON result for one record."""
    if job.task == "chat":
        return await _chat(client, job, data)
    if job.kind == "normalize":
        from .kinds import normalize_record  # noqa: PLC0415

        return await normalize_record(client, job, data)
    spec = job.spec
    answer = spec.to_json(await spec.run_async(client, job.task_args(field_text(data, job.text_field))))
    return spec.record(answer) if spec.record is not None else answer


async def _chat(client: AsyncClient, job: BatchJob, data: dict[str, Any]) -> Any:
    assert job.template is not None
    prompt = render(job.template, data)
    result = await client.chat(prompt, system=job.system, max_tokens=job.max_tokens)
    return {"text": result.text, "finish_reason": result.finish_reason}
