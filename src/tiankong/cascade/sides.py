"""The two sides of a cascade and how each answers one record of a task.

A **side** is a model (zero-shot; an embedded engine, or a remote OpenAI-compatible upstream at ``url``) or a tuned
**decider** (on its engine model with what it reads — embeddings, adapters — or with no engine at all when it
needs none). Either side may be either: ``--decider`` makes the small side a decider, ``--large-decider`` the
large one. Per task (``TASKS``) a side answers a record with a label and the calibrated probability of it:

* ``classify``: zero-shot classify over the labels, or the decider's decision (``threshold=0``: never abstaining);
* ``route``: route's own local decision over the routes (``threshold=0``, no red-line check), or the decider's;
* ``guard``: the guard task — the shipped ``guard`` decider (or the one named) alone, or with a model its
  noisy-OR with the model's yes/no judgement (``use_model``). The label is ``attack`` when the verdict is flag or
  block (score ≥ the decider's ``flag_at``), else ``benign``; the confidence is the calibrated probability of that
  label: the score for ``attack``, 1 − score for ``benign``;
* ``extract``: extract against the schema; the answer is the JSON object, the confidence a validation score
  (``extract.py``: the share of its values found in the text).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from .answer import Answer

if TYPE_CHECKING:
    from ..api import Client
    from ..deciders.registry import Decider
    from ..tasks.route import Route

TASKS = ("classify", "route", "guard", "extract")
#: the labels of ``--task guard`` records
GUARD_LABELS = ["attack", "benign"]
Log = Callable[[str], None]
#: one side's way to run a task: (task name, its arguments) → the task's result
Ask = Callable[[str, dict[str, Any]], Any]


@dataclass(frozen=True)
class Side:
    """One side of the cascade: ``model`` (the engine model; None: an engine-free decider), ``decider`` (a tuned
    decider answering on that engine), ``url`` (the model is served by this OpenAI-compatible upstream)."""

    model: str | None
    decider: Decider | None = None
    url: str | None = None
    #: how the decider is named when loaded again (a shipped one by its name, a file by its path)
    given: str | None = None

    @classmethod
    def of_decider(cls, decider: Decider, given: str, model: str | None) -> Side:
        """A decider's side: on ``model`` (default its base model) when it needs an engine, else on none."""
        loadable = given if decider.source == "file" else decider.name if decider.source == "builtin" else decider.ref
        return cls(decider_engine(decider, model), decider, given=loadable)

    @property
    def name(self) -> str:
        where = f" at {self.url}" if self.url else ""
        if self.decider is None:
            return f"{self.model}{where}"
        return f"decider {self.ref}" + (f" on {self.model}{where}" if self.model else "")

    @property
    def ref(self) -> str | None:
        return None if self.decider is None else self.given or self.decider.ref


def check_task(task: str) -> None:
    if task not in TASKS:
        raise ConfigError(f"task {task!r} is not supported by cascade eval", hint=f"use --task {' or '.join(TASKS)}")


def ask_args(task: str, text: str, labels: list[str], *, routes: list[Route] | None = None,
             decider: str | None = None, model: bool = True, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    """The task arguments one record is answered with: never abstaining, never escalating by red line (the
    curve is over the confidence alone; ``threshold=0`` makes the answer the best label whatever is configured).
    ``model``: the side has a chat model (guard: its judgement joins the decider's)."""
    if task == "route":
        return {"text": text, "routes": routes, "threshold": 0.0, "redline": False, "decider": decider}
    if task == "guard":
        return {"text": text, "decider": decider or "guard", "use_model": model and decider is None}
    if task == "extract":
        return {"text": text, "schema": schema}
    if decider is not None:
        return {"text": text, "decider": decider, "threshold": 0.0}
    return {"text": text, "labels": labels}


def to_answer(task: str, result: Any) -> Answer:
    """A task's result as (label, confidence)."""
    if task == "route":
        return Answer(result.route, result.confidence)
    if task == "guard":
        score = float(result.score)
        return Answer("benign", 1.0 - score) if result.verdict == "allow" else Answer("attack", score)
    return Answer(result.label, result.confidence)


def answer_all(ask: Ask, task: str, records: Sequence[Any], labels: list[str], log: Log | None = None,
               name: str = "", *, routes: list[Route] | None = None, decider: str | None = None,
               model: bool = True, schema: dict[str, Any] | None = None) -> list[Answer]:
    """The task on every record with one side: each answer and its confidence."""
    from .extract import extract_answer

    check_task(task)
    answers = []
    for index, record in enumerate(records, 1):
        args = ask_args(task, record.text, labels, routes=routes, decider=decider, model=model, schema=schema)
        answers.append(extract_answer(partial(ask, task, args), record.text) if task == "extract" else
                       to_answer(task, ask(task, args)))
        if log and (index % 25 == 0 or index == len(records)):
            log(f"{name}: {index}/{len(records)}")
    return answers


def decider_engine(decider: Decider, model: str | None) -> str | None:
    """The model the decider's engine runs (None: the decider needs no engine)."""
    from ..deciders.runtime import engine_needs

    needs = engine_needs(decider)
    if model is not None and not needs.engine:  # it was taken and never used, without a word
        raise ConfigError(f"decider {decider.name} needs no engine, so no model runs it (got {model})",
                          hint="leave out --small / --large for this side")
    return (model or needs.model or None) if needs.engine else None


@contextmanager
def asker(side: Side, connect: Callable[[str], Client], llama_server: str | None) -> Iterator[Ask]:
    """One side's ``Ask``: a client of its model (a decider's engine with what the decider reads; a remote
    upstream), or — an engine-free decider — the flow run here with no engine."""
    if side.decider is not None and side.model is None:
        from ..structured.drivers import run_sync
        from ..tasks.specs import SPECS

        yield lambda task, args: run_sync(SPECS[task].flow(args), _no_engine)
        return
    if side.model is None:
        raise ConfigError(f"decider {side.ref or ''} needs an engine but names no base model",
                          hint="pass the model it was tuned on (--small / --large)")
    if side.url is not None:
        from ..api import Client

        client = Client(side.url, model=side.model)
    elif side.decider is None:
        client = connect(side.model)
    else:
        client = _decider_client(connect, side.model, side.decider, llama_server)
    with client:
        yield lambda task, args: client.extract_result(args["text"], args["schema"]) if task == "extract" else \
            client.task(task, **args)


def _decider_client(connect: Callable[[str], Client], model: str, decider: Decider,
                    llama_server: str | None) -> Client:
    from ..api import Client
    from ..deciders.runtime import engine_needs

    needs = engine_needs(decider)
    if not needs.embeddings and not needs.adapters:
        return connect(model)
    return Client(model=model, llama_server=llama_server, slots=1, ctx=4096, embeddings=needs.embeddings,
                  adapters=needs.adapters)


def _no_engine(method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    raise ConfigError(f"an engine-free decider called the engine ({method} {path})",
                      hint="name the model it runs on (--small / --large)")
