"""The batch job spec: a Pydantic model (unknown keys refused), built from flags or a TOML/JSON file."""

from __future__ import annotations

import string
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .. import jsonsafe
from ..errors import ConfigError
from ..jsonsafe import read_limited
from ..tasks.specs import SPECS, TaskArgs, TaskSpec

if TYPE_CHECKING:
    from ..deciders.runtime import EngineNeeds

InputFormat = Literal["auto", "jsonl", "csv", "folder", "openai"]
#: registered tasks a job runs over one text field per record (rerank needs documents per record: not one)
REGISTERED_TASKS = ("classify", "summarize", "tag", "redact", "rewrite", "guard", "compress", "route")
TEXT_TASKS = ("extract", *REGISTERED_TASKS)
TASKS = (*TEXT_TASKS, "chat")
#: a spec argument stored under another job key
JOB_KEYS = {"schema_": "json_schema"}


class BatchJob(BaseModel):
    """What to run over which input, where the results go and which engine does the work."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    # --- input / output ---
    input: str
    output: str
    format: InputFormat = "auto"
    id_field: str = "id"
    text_field: str = "text"
    # --- task --- (arguments of a registered task: unset = the task's own default, ``tiankong.tasks.specs``)
    task: str | None = None
    labels: list[str] | None = None
    decider: str | None = None
    descriptions: dict[str, str] | None = None
    examples: list[dict[str, Any]] | None = None
    multi_label: bool | None = None
    threshold: float | None = None
    calibrate: bool | None = None
    json_schema: dict[str, Any] | None = Field(default=None, alias="schema")
    instructions: str | None = None
    words: int | None = None
    chunk_tokens: int | None = None
    style: str | None = None
    use_model: bool | None = None
    types: list[str] | None = None
    salt: str | None = None
    mode: str | None = None
    n: int | None = None
    flag_at: float | None = None
    block_at: float | None = None
    policies: list[str] | None = None
    budget_tokens: int | None = None
    question: str | None = None
    max_keywords: int | None = None
    routes: list[dict[str, Any]] | None = None
    redline: bool | None = None
    escalate_target: str | None = None
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

    @field_validator("url", mode="before")
    @classmethod
    def _one_url(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @model_validator(mode="after")
    def _check(self) -> BatchJob:
        if self.model and self.url:
            raise ValueError("give either model (a managed engine) or url (running servers), not both")
        if self.ray is not None and self.url:
            raise ValueError("ray starts the model on every node: give model, not url")
        if self.format not in ("auto", "openai") and self.task is None:
            raise ValueError(f"no task: set task ({', '.join(TASKS)})")
        if self.task is not None and self.task not in TASKS:
            raise ValueError(f"unknown task {self.task!r} (tasks: {', '.join(TASKS)})")
        if self.task == "classify" and not self.decider and (not self.labels or len(set(self.labels)) < 2):
            raise ValueError("task classify needs at least two distinct labels (labels = [\"a\", \"b\"]) "
                             "or a decider (decider = \"NAME\")")
        if self.task == "extract" and not self.json_schema:
            raise ValueError("task extract needs a schema (schema = {...} or --schema FILE)")
        if self.task == "chat":
            template_fields(self.template)
        if self.task in REGISTERED_TASKS:
            try:
                self.task_args("-")
            except ConfigError as exc:
                raise ValueError(exc.message.removeprefix(f"invalid {self.task} request: ")) from None
        return self

    def task_args(self, text: str) -> TaskArgs:
        """The arguments of a registered task for one record's text: the job's keys over the task's defaults."""
        assert self.task in REGISTERED_TASKS, self.task
        spec: TaskSpec[TaskArgs, Any] = SPECS[self.task]
        given: dict[str, Any] = {spec.text: text}
        for name, info in spec.args.model_fields.items():
            value = getattr(self, JOB_KEYS.get(name, name), None) if name != spec.text else None
            if value is not None:
                given[info.alias or name] = value
        return spec.parse(given)

    def decider_engine(self) -> EngineNeeds:
        """What the job's engine must offer: for a job with a decider, what the decider reads."""
        from ..deciders import engine_needs, load_decider

        decider = getattr(self.task_args("-"), "decider", None) if self.task in REGISTERED_TASKS else None
        return engine_needs(load_decider(decider) if decider else None)

    def check_task(self, fmt: str) -> None:
        """Once the input format is known: every format but OpenAI batch files needs a task."""
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
            return []
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
        parts.append(f"{where}: {message}" if where else message)
    return "; ".join(parts)


def load_job_file(path: str | Path) -> dict[str, Any]:
    """The raw keys of a TOML or JSON job file; a ``schema`` given as a string is a path to a JSON file
    (relative to the job file)."""
    file = Path(path)
    text = read_limited(file, "job file")
    try:
        data = jsonsafe.loads(text) if file.suffix == ".json" else tomllib.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"the job file {file} is not valid {'JSON' if file.suffix == '.json' else 'TOML'}: "
                          f"{exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"the job file {file} must hold an object of job keys")
    if isinstance(data.get("schema"), str):
        data["schema"] = read_schema(file.parent / data["schema"])
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
    return make_job(**fields)
