"""A task sent to a tiankong gateway as one ``POST /v1/tasks/<task>`` call, and its answer read back.

A client that finds a tiankong gateway (``client._shared.server_info``) does not run a task's flow itself (one
gateway request per engine call, side by side: more than the gateway admits from one caller); it sends the
task's validated arguments as the task's body and turns the answer (``spec.to_json``) back into the result type.
Pure: no I/O here, both clients use it.

Runs locally instead (the flow's calls, within the server's slots): a task that names a decider (deciders live in
the caller's registry, tuned on the caller's machine) and arguments that are not JSON (a Pydantic model class).

``extract`` (``Client.extract``; its spec's ``client_call``) goes the same way: ``POST /v1/tasks/extract {text, schema,
instructions?, model?}`` (:func:`extract_body`), its answer read back into a ``Structured`` (:func:`structured`),
unless it asks for what that body cannot carry (a Pydantic model class, ``strict``, ``max_tokens``,
``max_attempts`` other than 2, a client set to decode differently).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from ..client import Usage
from ..errors import TransportError
from ..structured.flow import Structured
from ..structured.tools import ToolCall, ToolCalls
from .ask import Answer, Answers
from .classify import Classification
from .compress import Compression, Summary
from .guard import GuardVerdict
from .pii_rules import Entity
from .redact import Redaction
from .rerank import Ranked, Reranking
from .rewrite import Rewrite
from .route import DEFAULT_THRESHOLD, RouteDecision
from .specs import TaskSpec
from .sql import SqlQuery


def remote_body(spec: TaskSpec[Any, Any], args: BaseModel, model: str | None) -> dict[str, Any] | None:
    """The ``/v1/tasks/<task>`` body for validated ``args``, or ``None`` when the task must run here."""
    if getattr(args, "decider", None) is not None or (spec.name not in READERS and spec.from_json is None):
        return None
    schema = getattr(args, "schema_", None)
    if isinstance(schema, type):  # a Pydantic model class: validated into instances here
        return None
    body = args.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    if model:
        body["model"] = model
    return body


def extract_body(text: str, schema: Any, instructions: str | None, model: str | None, *, strict: bool,
                 max_tokens: int | None, max_attempts: int, decoding_defaults: bool) -> dict[str, Any] | None:
    """The ``/v1/tasks/extract`` body, or ``None`` when the extraction must run here (see the module)."""
    if not isinstance(schema, (dict, str)) or strict or max_tokens is not None or max_attempts != 2:
        return None
    if not decoding_defaults:  # grammar_support / fast_forward turned off on the client: its own decoding
        return None
    body: dict[str, Any] = {"text": text, "schema": schema}
    if instructions is not None:
        body["instructions"] = instructions
    if model:
        body["model"] = model
    return body


def structured(d: dict[str, Any]) -> Structured[Any]:
    """An extract answer ``{data, attempts, usage, enforced_by_validation, minimal, tiankong}`` as a ``Structured``."""
    evidence = d.get("tiankong") or {}
    return Structured(data=d["data"], raw=json.dumps(d["data"], ensure_ascii=False), attempts=d.get("attempts", 1),
                      usage=_usage(d), unenforced=list(d.get("enforced_by_validation") or []),
                      minimal=bool(d.get("minimal", False)), path=evidence.get("path", "grammar"),
                      decoded_tokens=int(evidence.get("decoded_tokens", 0) or 0),
                      forced_tokens=int(evidence.get("fast_forwarded_tokens", 0) or 0),
                      fallback_reason=evidence.get("fallback_reason", ""),
                      schema_in_prompt=evidence.get("schema_in_prompt", ""),
                      simplified=bool(evidence.get("simplified", False)))


def _usage(data: dict[str, Any]) -> Usage:
    usage = data.get("usage") or {}
    return Usage(int(usage.get("prompt_tokens", 0) or 0), int(usage.get("completion_tokens", 0) or 0))


def _classification(d: dict[str, Any]) -> Classification:
    return Classification(label=d["label"], labels=list(d["labels"]), scores=dict(d["scores"]), margin=d["margin"],
                          multi_label=d.get("multi_label", False), calibrated=d.get("calibrated", False),
                          prior=dict(d.get("prior") or {}), decider=d.get("decider"), method=d.get("method"),
                          abstained=d.get("abstained", False), warning=d.get("warning"))


def _route(d: dict[str, Any]) -> RouteDecision:
    return RouteDecision(route=d["route"], target=d["target"], confidence=d["confidence"], escalated=d["escalated"],
                         reason=d["reason"], scores=dict(d["scores"]), category=d.get("category", "simple"),
                         sent_text=d.get("sent_text"), answer=d.get("answer"), redacted=list(d.get("redacted") or []),
                         threshold=d.get("threshold", DEFAULT_THRESHOLD), threshold_from=d.get("threshold_from", ""))


def _rerank(d: dict[str, Any]) -> Reranking:
    return Reranking(results=[Ranked(r["index"], r["score"], r["text"]) for r in d["results"]],
                     scores=list(d["scores"]), mode=d["mode"], parts=list(d.get("parts") or []),
                     notes=list(d.get("notes") or []), truncated=list(d.get("truncated") or []))


def _redact(d: dict[str, Any]) -> Redaction:
    entities = [Entity(e["start"], e["end"], e["type"], e["text"], e.get("source", "rule"), e.get("score", 1.0),
                       e.get("validated", True)) for e in d["entities"]]
    return Redaction(text=d["text"], entities=entities, mapping=dict(d.get("mapping") or {}),
                     style=d.get("style", "placeholder"))


def _guard(d: dict[str, Any]) -> GuardVerdict:
    return GuardVerdict(verdict=d["verdict"], score=d["score"], reasons=list(d.get("reasons") or []),
                        heuristic_score=d.get("heuristic_score", 0.0), decider=d.get("decider"),
                        decider_probability=d.get("decider_probability"),
                        model_probability=d.get("model_probability"), policies=dict(d.get("policies") or {}))


def _compress(d: dict[str, Any]) -> Compression:
    return Compression(points=list(d["points"]), text=d["text"], input_tokens=d["input_tokens"],
                       output_tokens=d["output_tokens"], chunks=d["chunks"], rounds=d["rounds"],
                       trimmed=d.get("trimmed", False), mode=d.get("mode", "abstractive"),
                       kept=list(d.get("kept") or []), spans=[(int(a), int(b)) for a, b in d.get("spans") or []],
                       scoring=d.get("scoring", ""), notes=list(d.get("notes") or []))


def _summary(d: dict[str, Any]) -> Summary:
    return Summary(summary=d["summary"], input_tokens=d["input_tokens"], output_tokens=d["output_tokens"],
                   chunks=d["chunks"])


def _tag(d: dict[str, Any]) -> Structured[Any]:
    return Structured(data=d["data"], raw=json.dumps(d["data"], ensure_ascii=False), attempts=d.get("attempts", 1),
                      usage=_usage(d), finish_reason=d.get("finish_reason"))


def _ask(d: dict[str, Any]) -> Answers:
    answers = [Answer(a["id"], a["type"], a.get("label"), a.get("scores"), a.get("probability"), a.get("score"),
                      a.get("data")) for a in d["answers"]]
    usage = d.get("usage") or {}
    return Answers(answers, prompt_tokens=usage.get("prompt_tokens", 0),
                   evaluated_tokens=usage.get("evaluated_prompt_tokens", 0),
                   completion_tokens=usage.get("completion_tokens", 0))


def _call(d: dict[str, Any]) -> ToolCalls:
    calls = [ToolCall(c["function"]["name"], json.loads(c["function"]["arguments"]), c["id"])
             for c in d.get("tool_calls") or []]
    return ToolCalls(calls=calls, content=d.get("content"), probabilities=dict(d.get("probabilities") or {}),
                     attempts=d.get("attempts", 1), usage=_usage(d),
                     finish_reason=d.get("finish_reason") or ("tool_calls" if calls else "stop"),
                     counts=dict(d.get("counts") or {}), duplicates_dropped=int(d.get("duplicates_dropped") or 0))


def _sql(d: dict[str, Any]) -> SqlQuery:
    evidence = d.get("evidence") or {}
    structured = Structured(data=d["sql"], raw=d["sql"], attempts=d.get("attempts", 1), usage=_usage(d),
                            finish_reason=d.get("finish_reason"), path=evidence.get("path", "grammar"),
                            decoded_tokens=int(evidence.get("decoded_tokens") or 0),
                            forced_tokens=int(evidence.get("fast_forwarded_tokens") or 0),
                            fallback_reason=evidence.get("fallback_reason", ""),
                            schema_in_prompt=evidence.get("schema_in_prompt", ""),
                            simplified=bool(evidence.get("simplified"))) if "evidence" in d else None
    return SqlQuery(sql=d["sql"], tables=list(d["tables"]), columns=list(d["columns"]),
                    dialect=d.get("dialect", "sqlite"), rows=d.get("rows"), attempts=d.get("attempts", 1),
                    structured=structured)


READERS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "classify": _classification, "route": _route, "rewrite": lambda d: Rewrite(d["query"], list(d["queries"]),
                                                                              d.get("hypothetical")),
    "rerank": _rerank, "redact": _redact, "guard": _guard, "compress": _compress, "summarize": _summary,
    "tag": _tag, "ask": _ask, "call": _call, "sql": _sql, "extract": structured,
}


def from_json(task: str, data: Any) -> Any:
    """The task's result from the gateway's answer (the shape ``spec.to_json`` gives)."""
    try:
        reader = READERS.get(task)
        if reader is None:
            from .specs import TASK_SPECS

            reader = TASK_SPECS[task].from_json
        assert reader is not None, task
        return reader(data)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise TransportError(f"the gateway's {task} answer has an unexpected shape ({type(exc).__name__}: {exc})",
                             hint="is the gateway the same tiankong version as this client?") from None
