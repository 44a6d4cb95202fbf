"""The job kinds beyond ``records``: ``dedupe`` (a whole-data-set step, ``batch/whole.py``) and ``normalize``
(every record brought to a schema; it runs through the per-record runner like a task, so resuming and
exactly-once are the runner's).

A kind's ``args`` table is checked when the job is made, with the same limits as elsewhere: a dedupe job's are the
``dedupe`` task's arguments without ``records`` (``tasks/specs.py``: ``near``, ``near_low``, ``semantic``,
``semantic_low``, ``shingle``, ``keep``, ``stages``, ``decider``); a normalize job's are :class:`NormalizeArgs`.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import ConfigError

if TYPE_CHECKING:
    from ..api import AsyncClient
    from ..deciders.runtime import EngineNeeds
    from ..dedupe.core import DedupeOptions
    from ..normalize.core import NormalizeOptions, Normalizer
    from .job import BatchJob


class NormalizeArgs(BaseModel):
    """A normalize job's ``args``: the target schema and the options of ``tiankong normalize``."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    schema_: dict[str, Any] = Field(alias="schema", description="The target JSON Schema (in a job file: a path).")
    region: str | None = Field(None, description="Default phone region (ISO 3166 alpha-2).")
    currency: str | None = Field(None, description="Default currency (ISO 4217).")
    dayfirst: bool = False
    decimal_comma: bool = False
    mode: Literal["rules", "model", "both"] = "both"

    def options(self) -> NormalizeOptions:
        from ..normalize.core import NormalizeOptions

        return NormalizeOptions(region=self.region, currency=self.currency, dayfirst=self.dayfirst,
                                decimal_comma=self.decimal_comma, mode=self.mode)


def dedupe_options(job: BatchJob) -> DedupeOptions:
    """A dedupe job's options, checked with the task's limits (``args`` as in ``POST /v1/tasks/dedupe``)."""
    from ..dedupe.core import DedupeOptions
    from ..tasks.specs import DEDUPE

    if "records" in job.args:
        raise ConfigError("a dedupe job's records come from its input", hint="remove records from args")
    a = DEDUPE.parse({**job.args, "records": []})
    return DedupeOptions(near=a.near, near_low=a.near_low, semantic=a.semantic, semantic_low=a.semantic_low,
                         shingle=a.shingle, keep=a.keep, stages=tuple(a.stages), decider=a.decider,
                         part=a.part).check()


def normalize_args(job: BatchJob) -> NormalizeArgs:
    try:
        return NormalizeArgs.model_validate(job.args)
    except ValidationError as exc:
        from ..tasks.taskspec import describe

        raise ConfigError(f"invalid normalize job args: {describe(exc)}", hint="see docs/normalize.md") from None


def check_kind(job: BatchJob) -> None:
    """A ``dedupe`` or ``normalize`` job: no task, JSONL/CSV input, its ``args`` valid (raises ``ValueError``,
    which the job model reports as one line)."""
    if job.task is not None:
        raise ValueError(f"a {job.kind} job runs no task: leave task out")
    if job.format in ("folder", "openai"):
        raise ValueError(f"a {job.kind} job reads JSONL or CSV records, not format {job.format}")
    if job.model and job.url:
        raise ValueError("give either model (a managed engine) or url (running servers), not both")
    try:
        if job.kind == "dedupe":
            dedupe_options(job)
        else:
            _normalizer(job)
    except ConfigError as exc:
        raise ValueError(exc.message.removeprefix("invalid dedupe request: ").removeprefix("body: ")) from None


def kind_engine(job: BatchJob) -> EngineNeeds:
    """What the job's engine must offer: a dedupe job needs one for an engine decider only; a normalize job for
    the model (not for ``mode = "rules"``)."""
    from ..deciders import engine_needs, load_decider
    from ..deciders.runtime import EngineNeeds

    if job.kind == "dedupe":
        decider = dedupe_options(job).decider
        return engine_needs(load_decider(decider)) if decider else EngineNeeds(engine=False)
    return EngineNeeds(engine=normalize_args(job).mode != "rules")



def _normalizer(job: BatchJob, extract: Any = None) -> Normalizer:
    from ..normalize.core import Normalizer

    args = normalize_args(job)
    placeholder = None if args.mode == "rules" else (extract or (lambda text, schema: None))
    return Normalizer(args.schema_, args.options(), placeholder)


async def normalize_record(client: AsyncClient, job: BatchJob, data: dict[str, Any]) -> dict[str, Any]:
    """One record of a normalize job: the rules here (a worker thread), the model on the job's engine."""
    loop = asyncio.get_running_loop()

    def extract(text: str, schema: dict[str, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(client.extract(text, schema), loop).result()

    normalizer = _normalizer(job, extract)
    result = await asyncio.to_thread(normalizer.record, data)
    return result.to_json()
