"""The engine part of ``tiankong cascade eval``: labelled records → both sides' answers → a score table → a curve.

Tasks (``sides.TASKS``): ``classify`` (zero-shot over the labels, or a tuned decider's), ``route`` (records
labelled by route name: route's own local decision over the routes, its descriptions in the prompt, or the
decider's) and ``guard`` (records labelled ``attack`` / ``benign``: the guard task's calibrated score). Either
side is a model or a tuned decider (``decider=`` small, ``large_decider=`` large); the large model may be remote
(``large_url=``, an OpenAI-compatible upstream). The small side's **confidence** is its calibrated top-label
probability — exactly what route compares with its threshold and what a decider abstains below. Each side runs in
its own embedded engine, one after the other, so two engines never share the cores; an engine-free decider
(``tfidf``) runs with no engine. The same side as small and large is allowed: it runs once and the curve is flat
(escalating buys nothing) — useful to check the plumbing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from .answer import Answer
from .curve import Curve, Score, build_curve
from .sides import GUARD_LABELS, TASKS, Log, Side, answer_all, asker, check_task

if TYPE_CHECKING:
    from ..api import Client
    from ..deciders.registry import Decider
    from ..tasks.route import Route

__all__ = ["TASKS", "Answer", "CascadeEval", "Record", "cascade_eval", "load_records", "load_routes",
           "records_sha256", "score_table"]


@dataclass(frozen=True)
class Record:
    text: str
    label: str


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
    large_decider: str | None = None

    @property
    def route_threshold(self) -> float:
        """The chosen threshold as route and a decider take it (0 to 1: a chosen 1 + ε, everything escalated while
        some confidence is exactly 1, keeps those)."""
        return min(1.0, self.curve.chosen.threshold)

    @property
    def command(self) -> str | None:
        """The route command using the threshold explicitly (after ``--write`` it is route's default); None for
        guard and extract, which route cannot run (it printed one that failed)."""
        if self.task not in ("classify", "route"):
            return None
        side = f"--decider {self.decider}" if self.decider else f"--model {self.small}"
        return f"tiankong route {side} --threshold {self.route_threshold:.6g} --routes ROUTES.json"

    def to_json(self, items: bool = False) -> dict[str, Any]:
        data: dict[str, Any] = {"task": self.task, "small": self.small, "large": self.large, "n": self.curve.n,
                                "labels": self.labels, **self.curve.to_json(),
                                "route": {"threshold": self.route_threshold, "command": self.command}
                                if self.command else None, "threshold": self.route_threshold,
                                "decider": self.decider, "large_decider": self.large_decider,
                                "warnings": self.warnings}
        if items:
            data["items"] = [{"text": r.text, "label": r.label, "small": s.label,
                              "small_confidence": s.confidence, "large": g.label, "large_confidence": g.confidence}
                             for r, s, g in zip(self.records, self.small_answers, self.large_answers, strict=True)]
        return data


def load_records(path: str | Path, labels: Sequence[str] | None = None, what: str = "--labels", *,
                 extract: bool = False) -> tuple[list[Record], list[str]]:
    """JSONL ``{"text", "label"}`` records and the label set (``labels``, else the data's labels, first seen first).
    ``extract``: ``{"text", "expected": {…}}`` records, the label the expected object's canonical JSON (no label
    set: an empty list).

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
        records.append(_record(path, number, line, wanted, what, extract))
    if not records:
        raise ConfigError(f"{path} has no records", hint='write one {"text": …, "label": …} object per line')
    if extract:
        return records, []
    found = list(dict.fromkeys(r.label for r in records))
    names = wanted or found
    if len(names) < 2:
        raise ConfigError(f"{path} has only the label {names[0]!r}: a decision needs at least two",
                          hint="add records of another label, or give every label with --labels a,b")
    return records, names


def _record(path: str | Path, number: int, line: str, labels: list[str] | None, what: str,
            extract: bool = False) -> Record:
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
    if extract:
        from .extract import expected_of

        return Record(text, expected_of(data, where))
    if not isinstance(label, str) or not label.strip():
        raise ConfigError(f"{where} has no label", hint='every record needs a non-empty "label" string')
    if labels is not None and label not in labels:
        raise ConfigError(f"{where}: label {label!r} is not one of {what} {','.join(labels)}",
                          hint=f"add it to {what}, or fix the record")
    return Record(text, label)


def score_table(records: Sequence[Record], small: Sequence[Answer], large: Sequence[Answer],
                same: Callable[[str, str], bool] | None = None) -> list[Score]:
    """Per record: the small side's confidence and whether each side was right (``same(expected, answer)``,
    default: the labels are equal)."""
    right = same or (lambda expected, answer: expected == answer)
    return [Score(s.confidence, right(r.label, s.label), right(r.label, g.label))
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


def _check_reachable(url: str, model: str | None) -> None:
    """Before the small side runs (minutes): an upstream that does not answer at all (any HTTP answer will do —
    a key it wants is the large side's own error, named there) was found only after the whole small side."""
    from ..api import Client
    from ..errors import ServerError, TransportError

    try:
        with Client(url, model=model) as client:
            client.health()  # any answer: a server is there (an upstream without /health answers 404)
    except ServerError:
        pass
    except TransportError as exc:
        raise ConfigError(f"cannot reach the large side's server {url} ({exc.message})",
                          hint="start it, or leave out --large-url to run the large model here") from None


def cascade_eval(data: str | Path, small: str | None, large: str | None, *, task: str = "classify",
                 labels: Sequence[str] | None = None, target: float = 0.95,
                 routes: str | Path | Sequence[Any] | None = None, decider: str | None = None,
                 large_decider: str | None = None, large_url: str | None = None,
                 schema: str | Path | dict[str, Any] | None = None, llama_server: str | None = None,
                 log: Log | None = None,
                 client_for: Callable[[str], Client] | None = None) -> CascadeEval:
    """Run the small side and the large side on the labelled records of ``data`` and build the cascade curve.

    ``task="route"`` needs ``routes`` (a JSON file or the route objects; the records are labelled by route name);
    ``task="guard"``: records labelled ``attack`` / ``benign``, the small side by default the shipped ``guard``
    decider (no engine). ``decider`` / ``large_decider``: that side is this tuned decider (on ``small`` / ``large``,
    default its base model; an engine-free one runs without an engine); the records are labelled with its labels.
    ``task="extract"`` needs ``schema`` (a JSON Schema object or file; records ``{"text", "expected": {…}}``).
    ``large_url``: the large model is served there (an OpenAI-compatible upstream, e.g. another tiankong
    gateway). ``client_for(model)``: how to reach a model (default: an embedded engine, one slot, started and
    stopped here).
    """
    check_task(task)
    if not 0.0 < target <= 1.0:
        raise ConfigError(f"target {target} must be in (0, 1]: a fraction of always-large accuracy",
                          hint="e.g. --target 0.95 for 95 % of the large model's accuracy")
    if large_decider is None and (not large or not large.strip()):
        raise ConfigError("no large model given", hint="pass --large NAME (`tiankong models list`), or "
                          "--large-decider NAME (a tuned decider)")
    if large_url is not None and large_decider is not None:
        raise ConfigError("--large-url is for a model as the large side", hint="leave out --large-url or "
                          "--large-decider")
    if task == "guard" and decider is None and not small:
        decider = "guard"  # the shipped guard: its calibrated score, no engine
    if decider is None and (not small or not small.strip()):
        raise ConfigError("no small model given", hint="pass --small NAME, or --decider NAME (a tuned decider)")
    json_schema = _extract_schema(task, schema, decider, large_decider)
    found = _decider(decider, task) if decider is not None else None
    found_large = _decider(large_decider, task) if large_decider is not None else None
    records, names, route_list = _records(data, task, labels, routes, found, found_large)
    warnings = [f"the records are decider {d.ref}'s own training examples: its confidences on them are "
                "optimistic, and so is the threshold (measure on held-out records)"
                for d in (found, found_large) if d is not None and d.examples.get("sha256") == records_sha256(records)]
    connect = client_for or (lambda model: _embedded(model, llama_server))
    small_side = Side.of_decider(found, str(decider), small) if found is not None else Side(small)
    large_side = Side.of_decider(found_large, str(large_decider), large) if found_large is not None else \
        Side(large, url=large_url)
    if large_url is not None:
        _check_reachable(large_url, large)
    answers: dict[str, list[Answer]] = {}  # by side name: the same side twice runs once
    for side in (small_side, large_side):
        if side.name in answers:
            continue
        if log:
            log(f"{side.name}: {task} on {len(records)} records")
        with asker(side, connect, llama_server) as ask:
            answers[side.name] = answer_all(ask, task, records, names, log, side.name, routes=route_list,
                                       decider=side.ref, model=side.decider is None, schema=json_schema)
    same: Callable[[str, str], bool] | None = None
    if task == "extract":
        from .extract import fields_match

        same = fields_match
    curve = build_curve(score_table(records, answers[small_side.name], answers[large_side.name], same), target)
    return CascadeEval(task, small_side.name, large_side.name, names, curve, records, answers[small_side.name],
                       answers[large_side.name], decider=small_side.ref, warnings=warnings,
                       large_decider=large_side.ref)


def _records(data: str | Path, task: str, labels: Sequence[str] | None, routes: str | Path | Sequence[Any] | None,
             *deciders: Decider | None) -> tuple[list[Record], list[str], list[Route] | None]:
    """The records, their label set and (route) the routes, every label checked against the deciders'."""
    from ..tasks.classify import decider_labels

    found = [d for d in deciders if d is not None]
    if task != "route" and routes is not None:
        raise ConfigError("--routes is for --task route", hint="leave out --routes, or pass --task route")
    if task == "route":
        if routes is None:
            raise ConfigError("--task route needs the routes", hint="pass --routes ROUTES.json "
                              "([{name, description, target}, …]; the records are labelled by route name)")
        if labels:
            raise ConfigError("--task route takes its labels from the routes", hint="leave out --labels")
        route_list = load_routes(routes)
        names = [r.name for r in route_list]
        for decider in found:
            decider_labels(decider.labels, names, decider.ref)
        records, names = load_records(data, names, what="the route names")
        return records, names, route_list
    if task == "extract":
        if labels:
            raise ConfigError("--task extract records carry their expected fields", hint="leave out --labels")
        records, names = load_records(data, extract=True)
        return records, names, None
    if task == "guard":
        if labels and sorted(labels) != sorted(GUARD_LABELS):
            raise ConfigError(f"--task guard records are labelled {' or '.join(GUARD_LABELS)}",
                              hint="leave out --labels")
        records, names = load_records(data, GUARD_LABELS, what="the guard labels")
        return records, names, None
    if len(found) == 2 and found[0].labels != found[1].labels:
        raise ConfigError(f"deciders {found[0].ref} and {found[1].ref} have different labels "
                          f"({','.join(found[0].labels)} / {','.join(found[1].labels)})",
                          hint="tune both on the same labels")
    if found and labels and list(labels) != found[0].labels:
        raise ConfigError(f"decider {found[0].ref} has the labels {','.join(found[0].labels)}",
                          hint="leave out --labels (the decider's are used)")
    records, names = load_records(data, found[0].labels if found else labels,
                                  what=f"decider {found[0].ref}'s labels" if found else "--labels")
    return records, names, None




def records_sha256(records: Sequence[Record]) -> str:
    """The hash a decider records of its examples (``tuning.Examples.sha256``): the same for the same records."""
    lines = sorted(json.dumps([r.text, r.label], ensure_ascii=False) for r in records)
    return hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()


def _extract_schema(task: str, schema: str | Path | dict[str, Any] | None, *deciders: str | None
                    ) -> dict[str, Any] | None:
    if task != "extract":
        if schema is not None:
            raise ConfigError("--schema is for --task extract", hint="leave out --schema, or pass --task extract")
        return None
    if schema is None:
        raise ConfigError("--task extract needs the schema", hint="pass --schema SCHEMA.json (a JSON Schema object)")
    if any(d is not None for d in deciders):
        raise ConfigError("a decider answers classify decisions, not extract", hint="give models as both sides")
    from .extract import load_schema

    return load_schema(schema)


def _decider(ref: str, task: str) -> Decider:
    from ..deciders.registry import load_decider

    found = load_decider(ref)
    if found.task != "classify":
        raise ConfigError(f"decider {found.ref} is a {found.task} decider", hint="give a classify decider "
                          "(`tiankong tune classify`)")
    if task == "guard":
        from ..tasks.guard import positive_label

        positive_label(found)
    return found


def _embedded(model: str, llama_server: str | None) -> Client:
    from ..api import Client

    return Client(model=model, llama_server=llama_server, slots=1, ctx=4096)
