"""The eval set format: items with an input, a task, a reference and a scorer; loaded from JSONL or YAML.

Every problem in a set (a missing reference, an unknown scorer, a label that is not among the labels, a
duplicate id) is found when the set is loaded — before any engine starts — and reported with its line
number. See docs/evals.md for the fields.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..errors import ConfigError
from ..tasks.specs import TASK_SPECS, TaskSpec

#: what an item can ask: every task a batch job runs (the ``batchable`` specs, ``tasks/specs.py``) and chat
TASKS = (*(name for name, spec in TASK_SPECS.items() if spec.batchable), "chat")
#: item keys of the flat layout (before ``args``), still read: a key the item's task does not take is refused
LEGACY_KEYS = ("labels", "decider", "instructions", "words", "schema", "json_schema")
#: the request (and so the cache key) of an item keeps these task arguments at its top level, as before ``args``
_TOP_LEVEL = {"classify": ("labels", "instructions", "decider"), "extract": ("schema", "instructions"),
              "summarize": ("words",), "tag": ("schema",)}
SCORERS = ("exact", "label", "json_fields", "key_points", "similarity")
#: Pass thresholds for scorers with a partial score (per item: ``threshold``).
DEFAULT_THRESHOLDS = {"exact": 1.0, "label": 1.0, "json_fields": 1.0, "key_points": 1.0, "similarity": 0.3}
MAX_LISTED = 3


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["system", "user", "assistant"]
    content: str


class EvalItem(BaseModel):
    """One eval item: what to ask (``task`` + ``input`` + task keys), what is right (``reference``), how to score."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    id: str
    task: str = "chat"
    input: str | list[Message]
    reference: Any = None
    scorer: str | None = None
    threshold: float | None = Field(default=None, ge=0.0, le=1.0)
    tags: list[str] = Field(default_factory=list)
    # --- task keys ---
    #: the task's arguments (``tiankong.tasks.specs``; the item's input is its text): e.g. ``{"labels": [...]}``;
    #: classify with a tuned ``decider``: its labels, and the run's model must be the decider's base model
    args: dict[str, Any] = Field(default_factory=dict)
    #: chat: the labels the ``label`` scorer looks for in a free-text answer (a task's labels are in ``args``)
    chat_labels: list[str] | None = Field(default=None, alias="labels")
    #: chat: the JSON Schema the answer must follow
    json_schema: dict[str, Any] | None = Field(default=None, alias="schema")
    system: str | None = None
    max_tokens: int = Field(default=256, ge=1, le=8192)

    @model_validator(mode="before")
    @classmethod
    def _flat_keys(cls, data: Any) -> Any:
        """An item written before ``args`` (``labels``, ``words``, a task's ``schema`` … at the top level)."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if data.get("task", "chat") == "chat":  # task keys on a chat item were accepted and ignored
            for key in ("decider", "instructions", "words"):
                data.pop(key, None)
            return data
        args = dict(data.get("args") or {}) if isinstance(data.get("args") or {}, dict) else data.get("args")
        spec = TASK_SPECS.get(data["task"]) if isinstance(data.get("task"), str) else None
        wire = set(spec.wire_names().values()) if spec is not None else set()
        for key in LEGACY_KEYS:
            if key in data and isinstance(args, dict):
                value, name = data.pop(key), "schema" if key == "json_schema" else key
                if value is not None and spec is not None and name not in wire:  # it was dropped without a word
                    raise ValueError(f"{key}: task {data['task']} takes no {name} (leave it out, or give the task "
                                     "it belongs to)")
                if value is not None and name in wire:
                    args.setdefault(name, value)
        data["args"] = args
        return data

    @field_validator("id", mode="before")
    @classmethod
    def _id(cls, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise ValueError("id must be a string or an integer")
        return str(value)

    @field_validator("tags", mode="before")
    @classmethod
    def _tags(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @model_validator(mode="after")
    def _check(self) -> EvalItem:
        if self.reference is None or self.reference == "" or self.reference == [] or self.reference == {}:
            raise ValueError("no reference: every item needs the right answer (a label, an object, a text or a "
                             "list of key points)")
        self.scorer = self.scorer or default_scorer(self.task, self.reference)
        if self.scorer not in SCORERS:
            raise ValueError(f"unknown scorer {self.scorer!r} (use one of {', '.join(SCORERS)})")
        self._check_task()
        _check_reference(self.scorer, self.reference, self.labels)
        return self

    def _check_task(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"unknown task {self.task!r} (tasks: {', '.join(TASKS)})")
        if self.task != "chat" and not isinstance(self.input, str):
            raise ValueError(f"task {self.task} needs input to be a text (messages are for task chat)")
        if isinstance(self.input, str) and not self.input.strip():
            raise ValueError("input is empty")
        if isinstance(self.input, list) and (not self.input or self.input[-1].role != "user"):
            raise ValueError("input messages must end with a user message")
        if self.task == "chat":
            return
        spec = self.spec
        if spec.text in self.args:
            raise ValueError(f"args.{spec.text}: the item's input is the task's {spec.text}")
        try:
            spec.args.model_validate({**self.args, spec.text: self.input})
        except ValidationError as exc:
            raise ValueError(_describe(exc)) from None

    @property
    def spec(self) -> TaskSpec[Any, Any]:
        """The item's task (not chat)."""
        return TASK_SPECS[self.task]

    @property
    def labels(self) -> list[str] | None:
        labels = self.chat_labels if self.task == "chat" else self.args.get("labels")
        return list(labels) if isinstance(labels, list) else None

    @property
    def decider(self) -> str | None:
        decider = self.args.get("decider")
        return str(decider) if decider else None

    @property
    def output_schema(self) -> dict[str, Any] | None:
        """The JSON Schema an answer is checked against: chat's, or the task's ``schema`` argument."""
        schema = self.json_schema if self.task == "chat" else self.args.get("schema")
        return schema if isinstance(schema, dict) else None

    @property
    def pass_threshold(self) -> float:
        assert self.scorer is not None
        return self.threshold if self.threshold is not None else DEFAULT_THRESHOLDS[self.scorer]

    def request(self) -> dict[str, Any]:
        """What the model is asked — the part of the item that decides its output (not id, reference, scorer).

        The task arguments an item could give before ``args`` stay at the top level under their old names (an
        item's cache key is unchanged by the move to ``args``); the others go under ``args``."""
        data = {"task": self.task, "input": self.model_dump(mode="json")["input"]}
        if self.task == "chat":
            data.update({key: value for key in ("system", "max_tokens", "json_schema")
                         if (value := getattr(self, key)) is not None})
            return data
        args = dict(self.args)
        if self.task == "summarize":
            args.setdefault("words", self.spec.defaults()["words"])
        for key in _TOP_LEVEL.get(self.task, ()):
            value = args.pop(key, None)
            if value is not None:
                data["json_schema" if key == "schema" else key] = value
        if args:
            data["args"] = args
        if self.decider:  # name@version: a decider tuned again is a new request (the cache does not reuse answers)
            from ..deciders import load_decider

            data["decider"] = load_decider(self.decider).ref
        return data

    def messages(self) -> list[dict[str, str]]:
        """The chat messages of a ``chat`` item (a text input is one user message)."""
        turns = ([Message(role="user", content=self.input)] if isinstance(self.input, str) else self.input)
        head = [{"role": "system", "content": self.system}] if self.system else []
        return head + [turn.model_dump() for turn in turns]


def default_scorer(task: str, reference: Any) -> str:
    spec = TASK_SPECS.get(task)
    if spec is not None and spec.scorer is not None:
        return spec.scorer
    if isinstance(reference, dict):
        return "json_fields"
    if isinstance(reference, list):
        return "key_points"
    return "similarity"


def _check_reference(scorer: str, reference: Any, labels: list[str] | None) -> None:
    if scorer == "json_fields" and not isinstance(reference, dict):
        raise ValueError("scorer json_fields needs reference to be a JSON object of the expected fields")
    if scorer == "key_points":
        points = reference if isinstance(reference, list) else []
        ok = all(isinstance(p, str) and p.strip() or (isinstance(p, list) and p and all(isinstance(a, str) for a in p))
                 for p in points)
        if not points or not ok:
            raise ValueError("scorer key_points needs reference to be a list of key points (strings, or lists of "
                             "alternative strings)")
    if scorer in ("exact", "label", "similarity") and not isinstance(reference, (str, int, float)):
        raise ValueError(f"scorer {scorer} needs reference to be a text (or a number)")
    if scorer == "label" and labels and str(reference) not in labels:
        raise ValueError(f"reference {reference!r} is not one of the labels ({', '.join(labels)})")


class EvalSet(BaseModel):
    """A loaded, validated eval set."""

    path: str
    sha256: str
    items: list[EvalItem]
    lines: dict[str, int] = Field(default_factory=dict)

    def tags(self) -> list[str]:
        return sorted({tag for item in self.items for tag in item.tags})


def load_set(path: str | Path) -> EvalSet:
    """Read and validate a JSONL or YAML eval set; every problem is one ``ConfigError`` line."""
    file = Path(path)
    try:
        raw = file.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read the eval set {file}: {exc.strerror}",
                          hint="give the path of a .jsonl or .yaml eval set (tiankong eval init PATH writes one)") \
            from None
    rows = _yaml_rows(file, raw) if file.suffix.lower() in (".yaml", ".yml") else _jsonl_rows(file, raw)
    items: list[EvalItem] = []
    lines: dict[str, int] = {}
    problems: list[str] = []
    for line, data in rows:
        try:
            item = EvalItem.model_validate(data)
        except ValidationError as exc:
            problems.append(f"line {line}: {_describe(exc)}")
            continue
        if item.id in lines:
            problems.append(f"line {line}: duplicate id {item.id!r} (first on line {lines[item.id]})")
            continue
        lines[item.id] = line
        items.append(item)
    if problems:
        more = f" (and {len(problems) - MAX_LISTED} more)" if len(problems) > MAX_LISTED else ""
        raise ConfigError(f"invalid eval set {file}: {'; '.join(problems[:MAX_LISTED])}{more}",
                          hint="see docs/evals.md for the item fields")
    if not items:
        raise ConfigError(f"the eval set {file} has no items", hint="add one JSON object per line")
    return EvalSet(path=str(file), sha256=hashlib.sha256(raw).hexdigest(), items=items, lines=lines)


def _describe(exc: ValidationError) -> str:
    parts: list[str] = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"] if "[" not in str(p) and p not in ("str", "int", "float"))
        message = str(error["msg"]).removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = "unknown field"
        elif error["type"] == "missing":
            message = "missing"
        elif isinstance(error.get("input"), bool) and error["type"] == "string_type":
            message += " (quote it: YAML reads yes/no/on/off/true/false as booleans)"
        part = f"{where}: {message}" if where else message
        if part not in parts:
            parts.append(part)
    return "; ".join(parts[:2])


def _jsonl_rows(file: Path, raw: bytes) -> list[tuple[int, Any]]:
    rows = []
    for number, line in enumerate(raw.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            rows.append((number, json.loads(line.decode("utf-8-sig" if number == 1 else "utf-8"))))
        except (UnicodeDecodeError, ValueError) as exc:
            raise ConfigError(f"invalid eval set {file}: line {number}: not valid JSON ({exc})",
                              hint="one JSON object per line") from None
    return rows


def _yaml_rows(file: Path, raw: bytes) -> list[tuple[int, Any]]:
    """Items of a YAML set (a list of items, or ``{defaults: {...}, items: [...]}``) with their line numbers."""
    import yaml

    try:
        text = raw.decode("utf-8-sig")  # a byte-order mark is not part of the set
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"invalid eval set {file}: not valid YAML ({' '.join(str(exc).split())})") from None
    defaults: dict[str, Any] = {}
    if isinstance(data, dict):
        defaults = data.get("defaults") or {}
        unknown = set(data) - {"defaults", "items"}
        if unknown or not isinstance(defaults, dict):
            raise ConfigError(f"invalid eval set {file}: the top level holds only 'defaults' (an object) and "
                              f"'items' (a list){'; unknown: ' + ', '.join(sorted(unknown)) if unknown else ''}")
        node = next((v for k, v in node.value if k.value == "items"), None) if node is not None else None
        data = data.get("items")
    if not isinstance(data, list) or node is None:
        raise ConfigError(f"invalid eval set {file}: expected a list of items (or defaults + items)")
    lines = [child.start_mark.line + 1 for child in node.value]
    return [(line, {**defaults, **row} if isinstance(row, dict) else row)
            for line, row in zip(lines, data, strict=True)]


def cache_key(*parts: Any) -> str:
    """A stable hash of JSON-serialisable parts (sorted keys)."""
    text = json.dumps(parts, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
