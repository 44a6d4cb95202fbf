"""The engine part of ``tiankong cascade eval``: labelled records → both models' answers → a score table → a curve.

Each model runs the decision task on every record in its own embedded engine (one after the other, so two
engines never share the cores); the small model's confidence is its calibrated top-label probability
(``classify`` returns the probability of every label). The same model given as small and large is allowed: it
runs once and the curve is flat (escalating buys nothing) — useful to check the plumbing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from .curve import Curve, Score, build_curve

if TYPE_CHECKING:
    from ..api import Client

TASKS = ("classify",)
Log = Callable[[str], None]


@dataclass(frozen=True)
class Record:
    text: str
    label: str


@dataclass(frozen=True)
class Answer:
    """One model's decision on one record: the label it chose and its probability."""

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

    @property
    def route_threshold(self) -> float:
        """The chosen threshold as ``route --threshold`` takes it (route accepts 0 to 1)."""
        return min(1.0, self.curve.chosen.threshold)

    def to_json(self, items: bool = False) -> dict[str, Any]:
        data: dict[str, Any] = {"task": self.task, "small": self.small, "large": self.large, "n": self.curve.n,
                                "labels": self.labels, **self.curve.to_json(),
                                "route": {"threshold": self.route_threshold,
                                          "command": f"tiankong route --model {self.small} "
                                                     f"--threshold {self.route_threshold:.6g} --routes ROUTES.json"}}
        if items:
            data["items"] = [{"text": r.text, "label": r.label, "small": s.label,
                              "small_confidence": s.confidence, "large": g.label, "large_confidence": g.confidence}
                             for r, s, g in zip(self.records, self.small_answers, self.large_answers, strict=True)]
        return data


def load_records(path: str | Path, labels: Sequence[str] | None = None) -> tuple[list[Record], list[str]]:
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
        records.append(_record(path, number, line, wanted))
    if not records:
        raise ConfigError(f"{path} has no records", hint='write one {"text": …, "label": …} object per line')
    found = list(dict.fromkeys(r.label for r in records))
    names = wanted or found
    if len(names) < 2:
        raise ConfigError(f"{path} has only the label {names[0]!r}: a decision needs at least two",
                          hint="add records of another label, or give every label with --labels a,b")
    return records, names


def _record(path: str | Path, number: int, line: str, labels: list[str] | None) -> Record:
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
        raise ConfigError(f"{where}: label {label!r} is not one of --labels {','.join(labels)}",
                          hint="add it to --labels, or fix the record")
    return Record(text, label)


def answer_all(client: Client, task: str, records: Sequence[Record], labels: list[str],
               log: Log | None = None, name: str = "") -> list[Answer]:
    """The decision task on every record with one client (an engine or a server): each answer and confidence."""
    if task not in TASKS:
        raise ConfigError(f"task {task!r} is not supported by cascade eval", hint=f"use --task {' or '.join(TASKS)}")
    answers = []
    for index, record in enumerate(records, 1):
        result = client.classify(record.text, labels)
        answers.append(Answer(result.label, result.confidence))
        if log and (index % 25 == 0 or index == len(records)):
            log(f"{name}: {index}/{len(records)}")
    return answers


def score_table(records: Sequence[Record], small: Sequence[Answer], large: Sequence[Answer]) -> list[Score]:
    return [Score(s.confidence, s.label == r.label, g.label == r.label)
            for r, s, g in zip(records, small, large, strict=True)]


def cascade_eval(data: str | Path, small: str, large: str, *, task: str = "classify",
                 labels: Sequence[str] | None = None, target: float = 0.95, llama_server: str | None = None,
                 log: Log | None = None,
                 client_for: Callable[[str], Client] | None = None) -> CascadeEval:
    """Run ``small`` and ``large`` on the labelled records of ``data`` and build the cascade curve.

    ``client_for(model)``: how to reach a model (default: an embedded engine, one slot, started and stopped here).
    """
    if task not in TASKS:
        raise ConfigError(f"task {task!r} is not supported by cascade eval", hint=f"use --task {' or '.join(TASKS)}")
    if not 0.0 < target <= 1.0:
        raise ConfigError(f"target {target} must be in (0, 1]: a fraction of always-large accuracy",
                          hint="e.g. --target 0.95 for 95 % of the large model's accuracy")
    for role, name in (("small", small), ("large", large)):
        if not name or not name.strip():
            raise ConfigError(f"no {role} model given", hint=f"pass --{role} NAME (`tiankong models list`)")
    records, names = load_records(data, labels)
    connect = client_for or (lambda model: _embedded(model, llama_server))
    answers: dict[str, list[Answer]] = {}
    for model in dict.fromkeys((small, large)):  # the same model twice runs once
        if log:
            log(f"{model}: {task} on {len(records)} records")
        with connect(model) as client:
            answers[model] = answer_all(client, task, records, names, log, model)
    curve = build_curve(score_table(records, answers[small], answers[large]), target)
    return CascadeEval(task, small, large, names, curve, records, answers[small], answers[large])


def _embedded(model: str, llama_server: str | None) -> Client:
    from ..api import Client

    return Client(model=model, llama_server=llama_server, slots=1, ctx=4096)
