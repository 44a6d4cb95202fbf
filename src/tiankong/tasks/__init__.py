"""Pipeline tasks on top of ``tiankong.structured``: classify, route, rewrite, rerank, redact, guard,
compress, summarize, tag, ask. Each is a sans-I/O flow (``*_flow``) run by ``Client``/``AsyncClient`` methods of
the same name, a CLI verb and ``POST /v1/tasks/<task>`` on the gateway."""

from typing import TYPE_CHECKING, Any

from .ask import Answer, Answers, ask_flow
from .classify import Classification, classify_flow
from .compress import Compression, Summary, compress_flow, summarize_flow
from .guard import GuardVerdict, guard_flow
from .pii_rules import Entity, detect_rules
from .redact import Redaction, redact_flow, redact_rules
from .rerank import Ranked, Reranking, rerank_flow
from .rewrite import Rewrite, rewrite_flow
from .route import EscalationTarget, Route, RouteDecision, RouteStats, route_flow
from .specs import SPECS
from .sql import SqlQuery, sql_flow
from .tag import tag_flow

if TYPE_CHECKING:
    from .methods import AsyncTaskMethods, TaskMethods

TASKS = tuple(SPECS)  # the registered tasks (tasks/specs.py), in their order

__all__ = [
    "TASKS", "Answer", "Answers", "AsyncTaskMethods", "Classification", "Compression", "Entity", "GuardVerdict",
    "Ranked", "Redaction", "Reranking", "Rewrite", "Route", "RouteDecision", "RouteStats", "SqlQuery", "Summary",
    "TaskMethods",
    "EscalationTarget", "ask_flow", "classify_flow", "compress_flow", "detect_rules", "guard_flow", "redact_flow",
    "redact_rules", "rerank_flow", "rewrite_flow", "route_flow", "sql_flow", "summarize_flow",
    "tag_flow",
]


def __getattr__(name: str) -> Any:
    """The client mixins (``methods.py``) come with the HTTP client: loaded on first use, not by the CLI's start-up."""
    if name in ("AsyncTaskMethods", "TaskMethods"):
        from . import methods

        return getattr(methods, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
