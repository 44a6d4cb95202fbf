"""What a few task commands do beyond "read the inputs, run the task on a client, print the answer".

* classify, guard, redact answer without starting an engine when nothing they read needs one (a tf-idf decider,
  rules only): the spec's flow runs on ``NO_ENGINE``, a transport that refuses any engine call;
* classify asks for labels or a decider as a usage error; guard's ``--no-decider``, its exit status on block;
* route sends an escalated request to ``--upstream-url``; sql reads a SQLite file (``--db``, ``--execute``);
* extract runs with ``--strict`` (schemas with keywords the grammar cannot enforce are refused).

A task without a hook here needs none: ``task_cmds.task_command`` does the rest.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import click

from ..deciders.registry import load_decider
from ..errors import TiankongError
from ..structured.drivers import run_sync
from ..tasks.args import GuardArgs
from ..tasks.specs import TaskSpec
from .run_cmds import _client

if TYPE_CHECKING:
    from ..api import Client


def client_for(model: str | None, url: str | None, llama_server: str | None, decider: str | None = None) -> Client:
    """A client for the task; with a decider, its engine runs the decider's model (unless ``model`` says another)
    with what the decider reads: embeddings, its LoRA adapter."""
    if not decider:
        return _client(model, url, llama_server)
    from ..deciders import engine_needs, load_decider

    needs = engine_needs(load_decider(decider))
    return _client(model or needs.model, url, llama_server, embeddings=needs.embeddings, adapters=needs.adapters)


class EngineNeeded(TiankongError):
    """An engine-free answer asked the engine after all (a bug: the command should have started one)."""


def NO_ENGINE(method: str, path: str, body: dict[str, Any] | None = None) -> Any:  # noqa: N802 (a constant)
    """The transport of an answer that needs no engine: any call is a bug, said as such (not a silent None)."""
    raise EngineNeeded(f"no engine was started, yet the flow called {method} {path}",
                       hint="rerun with --url or --model so an engine answers")


@dataclass
class TaskRun:
    """One invocation: the spec, the command's parameter values, the task's arguments (once read)."""

    spec: TaskSpec[Any, Any]
    values: dict[str, Any]
    args: dict[str, Any] = field(default_factory=dict)

    @property
    def model(self) -> str | None:
        return self.values["model"]  # type: ignore[no-any-return]

    @property
    def url(self) -> str | None:
        return self.values["url"]  # type: ignore[no-any-return]

    @property
    def llama_server(self) -> str | None:
        return self.values["llama_server"]  # type: ignore[no-any-return]

    def local(self) -> Any:
        """The task's answer with no engine (``NO_ENGINE``)."""
        return run_sync(self.spec.flow(self.args), NO_ENGINE)


@dataclass(frozen=True)
class Hook:
    check: Callable[[TaskRun], None] | None = None  # before any input is read
    run: Callable[[TaskRun], Any] | None = None  # the answer, or None: the client runs the task
    after: Callable[[TaskRun, Any], None] | None = None  # once the answer is printed


def _decider_needs_engine(ref: str) -> bool:
    from ..deciders import engine_needs

    return engine_needs(load_decider(ref)).engine


def _classify_check(run: TaskRun) -> None:
    from . import parse_labels

    if not parse_labels(run.values["label_list"], run.values["labels"]) and not run.values["decider"]:
        raise click.UsageError("give --labels a,b (or -l a -l b), or --decider NAME")


def _classify(run: TaskRun) -> Any:
    decider = run.args.get("decider")
    if decider and not run.url and not os.environ.get("TIANKONG_URL") and not _decider_needs_engine(decider):
        return run.local()  # an engine-free decider (tf-idf): no engine is started
    return None


def _route(run: TaskRun) -> Any:
    v = run.values
    if not v["upstream_url"] and (given := [flag for flag, key in (("--upstream-key-env", "upstream_key_env"),
                                                                  ("--upstream-model", "upstream_model"),
                                                                  ("--no-redact", "no_redact")) if v[key]]):
        raise click.UsageError(f"{', '.join(given)} describe(s) the upstream: add --upstream-url")
    upstream = ({"url": v["upstream_url"], "api_key_env": v["upstream_key_env"], "model": v["upstream_model"],
                 "redact": not v["no_redact"]} if v["upstream_url"] else None)
    with client_for(run.model, run.url, run.llama_server, run.args.get("decider")) as client:
        return client.route(**run.args, upstream=upstream)


def _redact(run: TaskRun) -> Any:
    return run.local() if not run.args["use_model"] and not (run.url or run.model) else None


def _guard(run: TaskRun) -> Any:
    named = run.values.get("decider")  # (the option's default is the shipped guard)
    if run.values["no_decider"] and named and named != GuardArgs.model_fields["decider"].default:
        raise click.UsageError("--no-decider and --decider: give one of them")
    chosen = None if run.values["no_decider"] else run.args.get("decider")
    run.args["decider"] = chosen
    if chosen and not run.args.get("policies") and not run.args["use_model"] and not run.url \
            and not _decider_needs_engine(chosen):
        return run.local()  # the shipped guard reads no engine: none is started
    return None


# `tiankong guard` exit status when the verdict is block (flag and allow: 0); not 1, every command's status for an
# error (a missing decider, an unreachable engine), so a script tells "blocked" from "could not check" — both stop
# `tiankong guard … && next-step`
EXIT_BLOCKED = 3


def _guard_after(run: TaskRun, result: Any) -> None:
    if result.verdict == "block":
        sys.exit(EXIT_BLOCKED)  # a pipeline step can stop on it (`tiankong guard … && next-step`)


def _sql_check(run: TaskRun) -> None:
    from ..errors import ConfigError

    if (run.values["db"] is None) == (run.values["ddl_file"] is None):
        raise ConfigError("give the database schema once: --db FILE (SQLite) or --ddl FILE (CREATE TABLE text)")
    ctx = click.get_current_context(silent=True)
    given = ctx is not None and ctx.get_parameter_source("max_rows") == click.core.ParameterSource.COMMANDLINE
    if given and not run.values["execute"]:  # it was taken and did nothing
        raise click.UsageError("--max-rows limits the rows --execute prints: add --execute")


def _sql(run: TaskRun) -> Any:
    v = run.values
    with client_for(run.model, run.url, run.llama_server) as client:
        return client.sql(run.args["question"], run.args.get("schema"), db=v["db"],
                          dialect=run.args["dialect"], execute=v["execute"], max_rows=v["max_rows"])


def _extract(run: TaskRun) -> Any:
    with client_for(run.model, run.url, run.llama_server) as client:
        return client.extract_result(run.args["text"], run.args["schema"], instructions=run.args.get("instructions"),
                                     strict=run.values["strict"])


HOOKS: dict[str, Hook] = {
    "extract": Hook(run=_extract),
    "classify": Hook(check=_classify_check, run=_classify),
    "route": Hook(run=_route),
    "redact": Hook(run=_redact),
    "guard": Hook(run=_guard, after=_guard_after),
    "sql": Hook(check=_sql_check, run=_sql),
}
