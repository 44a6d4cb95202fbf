"""``TaskSpec``: one task declared once — arguments, flow, JSON, command line, batch and eval parts (the registry
of every task is ``tasks/specs.py``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import ValidationError

from ..errors import ConfigError
from ..structured.flow import Flow
from .args import TaskArgs
from .cli_part import CliPart

A = TypeVar("A", bound=TaskArgs)
R = TypeVar("R")


def _to_json(result: Any) -> dict[str, Any]:
    return result.to_json()  # type: ignore[no-any-return]


@dataclass(frozen=True)
class HttpPart:
    """How ``POST /v1/tasks/<name>`` answers when it is more than "validate the body with the arguments model, run
    the flow, ``to_json``" (extract: the client's own decoding, with usage and the decoding evidence).

    ``answer(client, body)`` reads the body itself and returns the answer's JSON (``usage`` and ``attempts`` at its
    top level are what the gateway's metrics record); ``body`` and ``result`` are the route's OpenAPI schemas."""

    answer: Callable[[Any, dict[str, Any]], Awaitable[dict[str, Any]]]
    summary: str
    body: dict[str, Any]
    result: dict[str, Any]


@dataclass(frozen=True)
class TaskSpec(Generic[A, R]):
    """One task: its name, its arguments, how its flow is built and how its result becomes JSON; how the command
    line reads its inputs and prints its answer (``cli``); whether batch jobs and eval items run it
    (``batchable``, over the record's text in the ``text`` field) and how an eval scorer reads its answer."""

    name: str
    args: type[A]
    build: Callable[[A, str | None], Flow[R]]
    help: str
    text: str = "text"  # the field holding the text the task reads first (a batch record's text goes there)
    to_json: Callable[[R], dict[str, Any]] = _to_json
    cli: CliPart | None = None
    batchable: bool = False
    #: a batch output line's ``result`` from the JSON answer (default: the answer itself)
    record: Callable[[dict[str, Any]], Any] | None = None
    #: evals: the text a text scorer (label, exact, similarity, key_points) reads in a batch result
    answer_text: Callable[[Any], str | None] | None = None
    #: evals: the scorer an item of this task gets when it names none (None: by the reference's type)
    scorer: str | None = None
    #: how a client runs the task when its flow alone is not the whole story (extract: the client's decoding
    #: settings and a gateway's own route): the result on a ``Client``, an awaitable of it on an ``AsyncClient``;
    #: default: the flow on the client's engine
    client_call: Callable[[Any, A], Any] | None = None
    #: the gateway's route when its answer is more than ``to_json`` of the flow's result (None: the generic one)
    http: HttpPart | None = None
    #: the result from its JSON: a client at a tiankong gateway sends the task as one call and reads the answer
    #: back (``tasks/remote.py``; None there and here: the client runs the flow itself)
    from_json: Callable[[dict[str, Any]], R] | None = None

    def parse(self, data: dict[str, Any]) -> A:
        """Validated arguments; every problem becomes one ``ConfigError`` naming the field."""
        try:
            return self.args.model_validate(data)
        except ValidationError as exc:
            raise invalid_request(self.name, exc) from None

    def flow(self, args: A | dict[str, Any], model: str | None = None) -> Flow[R]:
        """The task's flow for ``args`` (validated first when given as a dict)."""
        return self.build(args if isinstance(args, self.args) else self.parse(dict(args)), model)

    def defaults(self) -> dict[str, Any]:
        """Every optional field with its default (the documented defaults)."""
        return {name: info.default for name, info in self.args.model_fields.items() if not info.is_required()}

    def wire_names(self) -> dict[str, str]:
        """Field name → the key it has in a body, a job's or an eval item's ``args`` (its alias: tag's ``schema``)."""
        return {name: info.alias or name for name, info in self.args.model_fields.items()}

    def with_text(self, text: Any, args: dict[str, Any] | None) -> A:
        """Arguments for one record: ``args`` (a job's or an eval item's table) with the record's text."""
        if args and self.text in args:
            raise ConfigError(f"{self.name}: {self.text!r} comes from each record, not from args")
        return self.parse({**(args or {}), self.text: text})

    async def run_async(self, client: Any, args: A) -> R:
        """The task on an ``AsyncClient`` (what a batch worker does for each record)."""
        if self.client_call is not None:
            result: R = await self.client_call(client, args)
            return result
        from ..structured.drivers import run_async

        return await run_async(self.flow(args, client.model), client._request)


def invalid_request(task: str, exc: ValidationError) -> ConfigError:
    """One ``ConfigError`` for every problem of a task's arguments; ``param`` names the first field at fault."""
    error = ConfigError(f"invalid {task} request: {describe(exc)}", hint=f"see docs/tasks.md#{task}")
    first = exc.errors()[0]["loc"] if exc.errors() else ()
    error.param = str(first[0]) if first else None
    return error


def describe(exc: ValidationError) -> str:
    problems = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"]) or "body"
        problems.append(f"{where}: {str(error['msg']).removeprefix('Value error, ')}")
    return "; ".join(problems)
