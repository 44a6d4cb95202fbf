"""The engine part of ``tiankong cascade eval``: labelled records → both sides' answers → a score table → a curve.

Tasks (``TASKS``): ``classify`` (zero-shot over the labels, or — ``decider=`` — a tuned decider as the small side,
the large model zero-shot over the decider's labels) and ``route`` (records labelled by route name: both sides
make route's own local decision over the routes, its descriptions in the prompt, or the decider's). The small
side's **confidence** is its calibrated top-label probability — exactly what route compares with its threshold
and what a decider abstains below. Each side runs in its own embedded engine, one after the other, so two engines
never share the cores; an engine-free decider (``tfidf``) runs with no engine. The same model as small and large is
allowed: it runs once and the curve is flat (escalating buys nothing) — useful to check the plumbing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from .curve import Curve, Score, build_curve

if TYPE_CHECKING:
    from ..api import Client
    from ..deciders.registry import Decider
    from ..tasks.route import Route

TASKS = ("classify", "route")
Log = Callable[[str], None]
#: one side's way to run a task: (task name, its arguments) → the task's result
Ask = Callable[[str, dict[str, Any]], Any]


@dataclass(frozen=True)
class Record:
    text: str
    label: str


@dataclass(frozen=True)
class Answer:
    """One side's decision on one record: the label it chose and its probability."""

    label: str
    confidence: float


@dataclass
class CascadeEval:
    """Everything ``tiankong cascade eval`` prints: the curve plus what was measured and how."""

    task: str
    small: str
    large: str
    labels: list[str]
    curve: Curve
    records: list[Record] = field(default_factory=list)
    small_answers: list[Answer] = field(default_factory=list)
    large_answers: list[Answer] = field(default_factory=list)
    decider: str | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def route_threshold(self) -> float:
        """The chosen threshold as route and a decider take it (0 to 1: a chosen 1 + ε, everything escalated while
        some confidence is exactly 1, keeps those)."""
        return min(1.0, self.curve.chosen.threshold)

    @property
    def command(self) -> str:
        """The route command using the threshold explicitly (after ``--write`` it is route's default)."""
        side = f"--decider {self.decider}" if self.decider else f"--model {self.small}"
        return f"tiankong route {side} --threshold {self.route_threshold:.6g} --routes ROUTES.json"

    def to_json(self, items: bool = False) -> dict[str, Any]:
        data: dict[str, Any] = {"task": self.task, "small": self.small, "large": self.large, "n": self.curve.n,
                                "labels": self.labels, **self.curve.to_json(),
                                "route": {"threshold": self.route_threshold, "command": self.command},
                                "decider": self.decider, "warnings": self.warnings}
        if items:
            data["items"] = [{"text": r.text, "label": r.label, "small": s.label,
                              "small_confidence": s.confidence, "large": g.label, "large_confidence": g.confidence}
                             for r, s, g in zip(self.records, self.small_answers, self.large_answers, strict=True)]
        return data


def load_records(path: str | Path, labels: Sequence[str] | None = None,
                 what: str = "--labels") -> tuple[list[Record], list[str]]:
    """JSONL ``{"text", "label"}`` records and the label set (``labels``, else the data's labels, first seen first).

    Every problem is a ``ConfigError`` naming the line: an unreadable or empty file, a line that is not a JSON
    object, a missing or empty text or label, a label outside ``labels``, fewer than two labels."""
    try:
        raw = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}", hint="give --data an existing JSONL file") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not UTF-8", hint="convert it first, e.g. `iconv -f GBK -t UTF-8`") from None
    wanted = list(labels) if labels else None
    if wanted is not None and (len(set(wanted)) != len(wanted) or len(wanted) < 2):
        raise ConfigError(f"--labels needs at least two distinct labels, got {wanted}", hint="e.g. --labels spam,ham")
    records: list[Record] = []
    for number, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        records.append(_record(path, number, line, wanted, what))
    if not records:
        raise ConfigError(f"{path} has no records", hint='write one {"text": …, "label": …} object per line')
    found = list(dict.fromkeys(r.label for r in records))
    names = wanted or found
    if len(names) < 2:
        raise ConfigError(f"{path} has only the label {names[0]!r}: a decision needs at least two",
                          hint="add records of another label, or give every label with --labels a,b")
    return records, names


def _record(path: str | Path, number: int, line: str, labels: list[str] | None, what: str) -> Record:
    where = f"{path} line {number}"
    try:
        data = json.loads(line)
    except ValueError as exc:
        raise ConfigError(f"{where} is not JSON: {exc}", hint='one {"text": …, "label": …} object per line') from None
    if not isinstance(data, dict):
        raise ConfigError(f"{where} is not a JSON object", hint='one {"text": …, "label": …} object per line')
    text, label = data.get("text"), data.get("label")
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"{where} has no text", hint='every record needs a non-empty "text" string')
    if not isinstance(label, str) or not label.strip():
        raise ConfigError(f"{where} has no label", hint='every record needs a non-empty "label" string')
    if labels is not None and label not in labels:
        raise ConfigError(f"{where}: label {label!r} is not one of {what} {','.join(labels)}",
                          hint=f"add it to {what}, or fix the record")
    return Record(text, label)


def ask_args(task: str, text: str, labels: list[str], *, routes: list[Route] | None = None,
             decider: str | None = None) -> dict[str, Any]:
    """The task arguments one record is answered with: never abstaining, never escalating by red line (the
    curve is over the confidence alone; ``threshold=0`` makes the answer the best label whatever is configured)."""
    if task == "route":
        return {"text": text, "routes": routes, "threshold": 0.0, "redline": False, "decider": decider}
    if decider is not None:
        return {"text": text, "decider": decider, "threshold": 0.0}
    return {"text": text, "labels": labels}


def answer_all(ask: Ask, task: str, records: Sequence[Record], labels: list[str], log: Log | None = None,
               name: str = "", *, routes: list[Route] | None = None, decider: str | None = None) -> list[Answer]:
    """The decision task on every record with one side: each answer and its confidence."""
    check_task(task)
    answers = []
    for index, record in enumerate(records, 1):
        result = ask(task, ask_args(task, record.text, labels, routes=routes, decider=decider))
        answers.append(Answer(result.route, result.confidence) if task == "route" else
                       Answer(result.label, result.confidence))
        if log and (index % 25 == 0 or index == len(records)):
            log(f"{name}: {index}/{len(records)}")
    return answers


def check_task(task: str) -> None:
    if task not in TASKS:
        raise ConfigError(f"task {task!r} is not supported by cascade eval", hint=f"use --task {' or '.join(TASKS)}")


def score_table(records: Sequence[Record], small: Sequence[Answer], large: Sequence[Answer]) -> list[Score]:
    return [Score(s.confidence, s.label == r.label, g.label == r.label)
            for r, s, g in zip(records, small, large, strict=True)]


def load_routes(routes: str | Path | Sequence[Any]) -> list[Route]:
    """Routes from a JSON file (``[{name, description, target}, …]``) or given as objects, checked as route
    checks them."""
    from ..tasks.route import check_routes

    if isinstance(routes, (str, Path)):
        try:
            routes = json.loads(Path(routes).read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"cannot read {routes}: {exc.strerror}", hint="give --routes a JSON file") from None
        except ValueError as exc:
            raise ConfigError(f"{routes} is not JSON: {exc}",
                              hint="--routes is a JSON list of {name, description, target} objects") from None
    return check_routes(routes)


def cascade_eval(data: str | Path, small: str | None, large: str, *, task: str = "classify",
                 labels: Sequence[str] | None = None, target: float = 0.95,
                 routes: str | Path | Sequence[Any] | None = None, decider: str | None = None,
                 llama_server: str | None = None, log: Log | None = None,
                 client_for: Callable[[str], Client] | None = None) -> CascadeEval:
    """Run the small side and ``large`` on the labelled records of ``data`` and build the cascade curve.

    ``task="route"`` needs ``routes`` (a JSON file or the route objects; the records are labelled by route name).
    ``decider``: the small side is this tuned decider (on ``small``, default its base model; an engine-free one
    runs without an engine); the records are labelled with its labels. ``client_for(model)``: how to reach a
    model (default: an embedded engine, one slot, started and stopped here).
    """
    check_task(task)
    if not 0.0 < target <= 1.0:
        raise ConfigError(f"target {target} must be in (0, 1]: a fraction of always-large accuracy",
                          hint="e.g. --target 0.95 for 95 % of the large model's accuracy")
    if not large or not large.strip():
        raise ConfigError("no large model given", hint="pass --large NAME (`tiankong models list`)")
    if decider is None and (not small or not small.strip()):
        raise ConfigError("no small model given", hint="pass --small NAME, or --decider NAME (a tuned decider)")
    found = _decider(decider) if decider is not None else None
    route_list: list[Route] | None = None
    if task == "route":
        if routes is None:
            raise ConfigError("--task route needs the routes", hint="pass --routes ROUTES.json "
                              "([{name, description, target}, …]; the records are labelled by route name)")
        if labels:
            raise ConfigError("--task route takes its labels from the routes", hint="leave out --labels")
        route_list = load_routes(routes)
        names = [r.name for r in route_list]
        if found is not None:
            from ..tasks.classify import decider_labels

            decider_labels(found.labels, names, found.ref)
        records, names = load_records(data, names, what="the route names")
    else:
        if routes is not None:
            raise ConfigError("--routes is for --task route", hint="leave out --routes, or pass --task route")
        if found is not None and labels and list(labels) != found.labels:
            raise ConfigError(f"decider {found.ref} has the labels {','.join(found.labels)}",
                              hint="leave out --labels (the decider's are used)")
        records, names = load_records(data, found.labels if found is not None else labels,
                                      what=f"decider {found.ref}'s labels" if found is not None else "--labels")
    warnings = []
    if found is not None and found.examples.get("sha256") == records_sha256(records):
        warnings.append(f"the records are decider {found.ref}'s own training examples: its confidences on them are "
                        "optimistic, and so is the threshold (measure on held-out records)")
    connect = client_for or (lambda model: _embedded(model, llama_server))
    small_name = _small_name(small, found)
    answers: dict[str, list[Answer]] = {}
    sides = [("small", small_name, found), ("large", large, None)]
    for role, name, side_decider in sides:
        key = f"{role}:{name}" if side_decider is not None else name
        if key in answers:  # the same model twice runs once
            continue
        if log:
            log(f"{name}: {task} on {len(records)} records")
        engine = None if side_decider is None else _decider_engine(side_decider, small)
        ref = side_decider.ref if side_decider is not None else None
        with _asker(connect, name if side_decider is None else engine, side_decider, llama_server) as ask:
            answers[key] = answer_all(ask, task, records, names, log, name, routes=route_list, decider=ref)
    small_key = f"small:{small_name}" if found is not None else small_name
    curve = build_curve(score_table(records, answers[small_key], answers[large]), target)
    return CascadeEval(task, small_name, large, names, curve, records, answers[small_key], answers[large],
                       decider=found.ref if found is not None else None, warnings=warnings)


def records_sha256(records: Sequence[Record]) -> str:
    """The hash a decider records of its examples (``tuning.Examples.sha256``): the same for the same records."""
    lines = sorted(json.dumps([r.text, r.label], ensure_ascii=False) for r in records)
    return hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()


def _decider(ref: str) -> Decider:
    from ..deciders.registry import load_decider

    found = load_decider(ref)
    if found.task != "classify":
        raise ConfigError(f"decider {found.ref} is a {found.task} decider", hint="give a classify decider "
                          "(`tiankong tune classify`)")
    return found


def _decider_engine(decider: Decider, small: str | None) -> str | None:
    """The model the decider's engine runs (None: the decider needs no engine)."""
    from ..deciders.runtime import engine_needs

    needs = engine_needs(decider)
    return (small or needs.model or None) if needs.engine else None


def _small_name(small: str | None, decider: Decider | None) -> str:
    if decider is None:
        return str(small)
    engine = _decider_engine(decider, small)
    return f"decider {decider.ref}" + (f" on {engine}" if engine else "")


@contextmanager
def _asker(connect: Callable[[str], Client], model: str | None, decider: Decider | None,
           llama_server: str | None) -> Iterator[Ask]:
    """One side's ``Ask``: a client of ``model`` (a decider's engine with what the decider reads), or — an
    engine-free decider — the flow run here with no engine."""
    if decider is not None and model is None:
        from ..structured.drivers import run_sync
        from ..tasks.specs import SPECS

        yield lambda task, args: run_sync(SPECS[task].flow(args), _no_engine)
        return
    if model is None:
        raise ConfigError(f"decider {decider.ref if decider else ''} needs an engine but names no base model",
                          hint="pass --small MODEL (the model it was tuned on)")
    client = connect(model) if decider is None else _decider_client(connect, model, decider, llama_server)
    with client:
        yield lambda task, args: client.task(task, **args)


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
                      hint="pass --small MODEL so an engine answers")


def _embedded(model: str, llama_server: str | None) -> Client:
    from ..api import Client

    return Client(model=model, llama_server=llama_server, slots=1, ctx=4096)
