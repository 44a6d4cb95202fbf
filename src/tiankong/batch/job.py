"""The batch job spec: a Pydantic model (unknown keys refused), built from flags or a TOML/JSON file."""

from __future__ import annotations

import dataclasses
import string
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .. import jsonsafe
from ..errors import ConfigError
from ..jsonsafe import read_limited
from ..tasks.specs import TASK_SPECS, TaskArgs, TaskSpec

if TYPE_CHECKING:
    from ..deciders.runtime import EngineNeeds

InputFormat = Literal["auto", "jsonl", "csv", "folder", "openai"]
#: ``records``: every record through ``task`` on its own; ``dedupe``: one whole-data-set step over every record
#: (``batch/whole.py``); ``normalize``: every record brought to a schema (``batch/kinds.py``)
JobKind = Literal["records", "dedupe", "normalize"]
#: the order ``batch run --task`` has always listed these in; tasks added later follow in the registry's order
_LISTED = ("classify", "summarize", "tag", "redact", "rewrite", "guard", "compress", "route")
#: registered tasks a job runs over one text field per record: the ``batchable`` specs (``tasks/specs.py``;
#: rerank needs documents per record: not one)
REGISTERED_TASKS = tuple(sorted((name for name, spec in TASK_SPECS.items() if spec.batchable and name != "extract"),
                                key=lambda name: (_LISTED + (name,)).index(name)))
TEXT_TASKS = ("extract", *REGISTERED_TASKS)
TASKS = (*TEXT_TASKS, "chat")
#: job keys of the flat layout (before ``args``): still read, so that a stored job resumes; new jobs are written
#: with ``args``. A key a task does not take is ignored, as it was.
LEGACY_KEYS = ("labels", "decider", "descriptions", "examples", "multi_label", "threshold", "calibrate", "schema",
               "json_schema", "instructions", "words", "chunk_tokens", "style", "use_model", "types", "salt", "mode",
               "n", "flag_at", "block_at", "policies", "budget_tokens", "question", "max_keywords", "routes",
               "redline", "escalate_target")


class BatchJob(BaseModel):
    """What to run over which input, where the results go and which engine does the work."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    # --- input / output ---
    input: str
    output: str
    format: InputFormat = "auto"
    id_field: str = "id"
    text_field: str = "text"
    # --- task ---
    kind: JobKind = "records"
    task: str | None = None
    #: the task's arguments (``tiankong.tasks.specs``: unset = the task's own default); the record's text goes
    #: in the task's text field
    args: dict[str, Any] = Field(default_factory=dict)
    template: str | None = None
    system: str | None = None
    max_tokens: int = Field(default=256, ge=1)
    # --- engine ---
    model: str | None = None
    url: list[str] = Field(default_factory=list)
    slots: int = Field(default=4, ge=1)
    ctx: int | None = Field(default=None, ge=64)
    llama_server: str | None = None
    concurrency: int | None = Field(default=None, ge=1)
    timeout_s: float = Field(default=300.0, gt=0)
    engine_wait_s: float = Field(default=300.0, ge=0)
    #: run on a Ray cluster (``batch/ray_exec.py``): its address (``host:6379``), ``auto`` (the one ``ray start``
    #: started here) or ``local`` (a one-machine cluster of this process); None: this machine only
    ray: str | None = None
    # --- run behaviour ---
    dedupe: bool = False
    retry_failed: bool = False
    fsync_every: int = Field(default=16, ge=1)
    #: OUT in input order once a run finishes (store.put_in_order); completion order otherwise
    keep_order: bool = False

    @model_validator(mode="before")
    @classmethod
    def _flat_keys(cls, data: Any) -> Any:
        """A job written before ``args`` (flat task keys, e.g. ``labels = [...]``): its keys moved into ``args``."""
        if not isinstance(data, dict) or not any(key in data for key in LEGACY_KEYS):
            return data
        data = dict(data)
        task = data.get("task")
        spec = TASK_SPECS.get(task) if isinstance(task, str) else None
        wire = set(spec.wire_names().values()) if spec is not None else set()
        args = dict(data.get("args") or {})
        for key in LEGACY_KEYS:
            if key in data:
                value = data.pop(key)
                name = "schema" if key == "json_schema" else key
                if value is not None and name in wire and name != (spec.text if spec else None):
                    args.setdefault(name, value)
        data["args"] = args
        return data

    @field_validator("url", mode="before")
    @classmethod
    def _one_url(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @model_validator(mode="after")
    def _check(self) -> BatchJob:
        if self.kind != "records":
            from .kinds import check_kind  # noqa: PLC0415 (the dedupe and normalize modules, only for these kinds)

            check_kind(self)
            return self
        if self.model and self.url:
            raise ValueError("give either model (a managed engine) or url (running servers), not both")
        if self.ray is not None and self.url:
            raise ValueError("ray starts the model on every node: give model, not url")
        if self.format not in ("auto", "openai") and self.task is None:
            raise ValueError(f"no task: set task ({', '.join(TASKS)})")
        if self.task is not None and self.task not in TASKS:
            raise ValueError(f"unknown task {self.task!r} (tasks: {', '.join(TASKS)})")
        if self.task == "chat":
            template_fields(self.template)
        if self.args and self.task not in TEXT_TASKS:
            raise ValueError(f"args are the arguments of a task ({', '.join(TEXT_TASKS)}); task "
                             f"{self.task or '(none)'} takes none")
        if self.task in TEXT_TASKS:
            try:
                self.task_args("-")
            except ConfigError as exc:
                problems = exc.message.removeprefix(f"invalid {self.task} request: ").removeprefix("body: ")
                raise ValueError(f"task {self.task}: {problems}") from None
        return self

    @property
    def step(self) -> str | None:
        """What the output lines and the report say the records went through: the task, or the job's kind."""
        return self.task if self.kind == "records" else self.kind

    @property
    def spec(self) -> TaskSpec[TaskArgs, Any]:
        """The job's task (extract or a registered task)."""
        assert self.task in TEXT_TASKS, self.task
        return TASK_SPECS[self.task]

    def task_args(self, text: str) -> TaskArgs:
        """The task's arguments for one record's text: the job's ``args`` over the task's defaults."""
        return self.spec.with_text(text, self.args)

    def decider_engine(self) -> EngineNeeds:
        """What the job's engine must offer: for a job with a decider, what the decider reads."""
        from ..deciders import engine_needs, load_decider

        if self.kind != "records":
            from .kinds import kind_engine  # noqa: PLC0415

            return kind_engine(self)
        args = self.task_args("-") if self.task in TEXT_TASKS else None
        decider = getattr(args, "decider", None)
        if self.task == "redact" and getattr(args, "use_model", True) is False:
            from ..deciders.runtime import EngineNeeds  # noqa: PLC0415

            # rules only: no engine is started or asked (guard is not so: without a decider it asks the model)
            return EngineNeeds(engine=False)
        needs = engine_needs(load_decider(decider) if decider else None)
        if self.task == "guard" and (getattr(args, "policies", None) or getattr(args, "use_model", False)):
            # the shipped guard decider reads no engine, but policies and use_model are questions to the model
            return dataclasses.replace(needs, engine=True)
        return needs

    def check_task(self, fmt: str) -> None:
        """Once the input format is known: every format but OpenAI batch files needs a task (or a kind)."""
        if self.kind != "records":
            if fmt not in ("jsonl", "csv"):
                raise ConfigError(f"a {self.kind} job reads JSONL or CSV records, not {fmt}",
                                  hint="give a .jsonl or .csv input")
            return
        if fmt != "openai" and self.task is None:
            raise ConfigError(f"invalid batch job: no task: set task ({', '.join(TASKS)})",
                              hint="or pass an OpenAI batch input file")

    @property
    def slot_ctx(self) -> int:
        """Total context for a managed engine (default: 2048 tokens per slot)."""
        return self.ctx or 2048 * self.slots

    def required_fields(self) -> list[str]:
        """Record fields every item needs (the template's placeholders, or the text field)."""
        if self.format == "openai" or self.task is None:
            return []  # a dedupe or normalize job reads its fields itself
        if self.task == "chat":
            return template_fields(self.template)
        return [self.text_field]


def template_fields(template: str | None) -> list[str]:
    """The ``{field}`` placeholders of a chat template (``{{``/``}}`` are literal braces)."""
    if not template:
        raise ValueError("task chat needs a template with {field} placeholders, e.g. \"Summarize: {text}\"")
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ValueError(f"the template is not valid: {exc} (write {{{{ and }}}} for literal braces)") from None
    names: list[str] = []
    for _, name, _, _ in parsed:
        if name is None:
            continue
        if not name or not name.replace("_", "a").replace("-", "a").isalnum():
            raise ValueError(f"template placeholder {{{name}}} must name a record field, e.g. {{text}}")
        if name not in names:
            names.append(name)
    if not names:
        raise ValueError("the template has no {field} placeholder, so every item would get the same prompt")
    return names


def make_job(**fields: Any) -> BatchJob:
    """A validated job; every problem becomes one ``ConfigError`` line."""
    try:
        return BatchJob.model_validate(fields)
    except ValidationError as exc:
        raise ConfigError(f"invalid batch job: {_describe(exc)}",
                          hint="see docs/batch.md for the job keys") from None


def _describe(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors()[:3]:
        where = ".".join(str(p) for p in error["loc"])
        message = str(error["msg"]).removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = "unknown key"
            if where == "no_model":  # the flag's name: the job key is the task's argument
                message = "unknown key (--no-model is use_model = false under [args])"
        parts.append(f"{where}: {message}" if where else message)
    return "; ".join(parts)


def load_job_file(path: str | Path) -> dict[str, Any]:
    """The raw keys of a TOML or JSON job file; a ``schema`` (in ``args``, or a flat key of an older job) given as
    a string is a path to a JSON file. Every path in the file is relative to the job file (the schema's always was;
    ``input`` and ``output`` were read from the current directory, so the same job found other files when run
    from elsewhere); a flag given beside ``--job`` is relative to the current directory, as every flag is."""
    file = Path(path)
    text = read_limited(file, "job file")
    try:
        data = jsonsafe.loads(text) if file.suffix == ".json" else tomllib.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"the job file {file} is not valid {'JSON' if file.suffix == '.json' else 'TOML'}: "
                          f"{exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"the job file {file} must hold an object of job keys")
    # OUT.job.json's fingerprint of its input (batch/identity.py), not a job key; a stored job written before it
    # holds its paths as they were typed (relative to where it ran): they are kept as they are
    head = data.pop("input_head", 0)
    data.pop("redact_key", None)  # its redaction key's fingerprint (batch/identity.py): not a job key either
    older_stored = file.name.endswith(".job.json") and "format" in data and head == 0
    for keys in (data, data.get("args")):
        if isinstance(keys, dict) and isinstance(keys.get("schema"), str):
            keys["schema"] = read_schema(file.parent / keys["schema"])
    for key in ("input", "output") if not older_stored else ():
        if isinstance(data.get(key), str) and data[key]:
            data[key] = str(file.parent / Path(data[key]).expanduser())  # an absolute path stays as it is
    return data


def read_schema(path: str | Path) -> dict[str, Any]:
    text = read_limited(path, "JSON schema")
    try:
        data = jsonsafe.loads(text)
    except ValueError as exc:
        raise ConfigError(f"the JSON schema {path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"the schema {path} must be a JSON object")
    return data


def build_job(job_file: str | Path | None = None, **overrides: Any) -> BatchJob:
    """A job from a file (if any) with the given keys on top (``None`` values are ignored)."""
    fields = load_job_file(job_file) if job_file else {}
    fields.update({key: value for key, value in overrides.items() if value is not None})
    for key in ("input", "output"):
        if not fields.get(key):
            raise ConfigError(f"no {key} given", hint=f"pass --{key} or set {key} in the job file")
    if fields.get("kind") == "normalize" and fields.get("schema") is not None:  # --schema: the target schema
        fields["args"] = {"schema": fields.pop("schema"), **(fields.get("args") or {})}
    _check_task_flags(fields, {key for key, value in overrides.items() if value is not None})
    return make_job(**fields)


def _check_task_flags(fields: dict[str, Any], given: set[str]) -> None:
    """A task's flag given for a job whose task does not take it (``--task classify --words 5``) is refused: a flat
    key is dropped when the task has no such argument (so that a stored job of an older layout resumes), which
    for a flag the user just typed meant it was silently ignored."""
    flags = given & set(LEGACY_KEYS)
    if fields.get("kind", "records") == "normalize":
        flags.discard("schema")  # the target schema (moved into args above)
    task = fields.get("task")
    spec = TASK_SPECS.get(task) if isinstance(task, str) and fields.get("kind", "records") == "records" else None
    takes = set(spec.wire_names().values()) - {spec.text} if spec is not None else set()
    stray = sorted(flag for flag in flags if ("schema" if flag == "json_schema" else flag) not in takes)
    if stray:
        what = f"task {task}" if fields.get("kind", "records") == "records" and task else \
            f"a {fields.get('kind')} job" if fields.get("kind", "records") != "records" else "a job without a task"
        kind = fields.get("kind", "records")
        raise ConfigError(f"{what} takes no {', '.join(_flag(name) for name in stray)}",
                          hint="leave it out, or give the task it belongs to (tiankong batch run --help)"
                          if kind == "records" else f"a {kind} job's options go under [args] in a job file "
                          "(docs/batch.md, Job kinds)")


def _flag(key: str) -> str:
    return {"use_model": "--no-model", "labels": "--labels"}.get(key, "--" + key.replace("_", "-"))
