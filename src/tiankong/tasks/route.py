"""route: intent routing with a cascade to a large upstream model.

The local decision is a ``classify`` over the route names (with their descriptions); a request escalates to
the upstream when (a) the local confidence is below ``threshold`` or (b) it falls in a red-line category the
small model should not handle — multi-step reasoning, maths, long-horizon planning, open-domain facts —
detected by exact heuristics (arithmetic, equations) and by the model. Before anything leaves the machine the
text is redacted by the deterministic PII detectors (configurable).

The threshold, when the caller names none (``escalation_threshold``): the route decider's own (``threshold`` in
its registry entry, written by ``tiankong cascade eval --write``), else ``[route] threshold`` of the config —
the gateway's own config inside ``configured_threshold``, elsewhere the user's config file (``TIANKONG_CONFIG``,
else ``config.toml`` in the user config dir) — else ``DEFAULT_THRESHOLD``.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..deciders.registry import Decider
from ..errors import ConfigError
from ..structured.combine import gather
from ..structured.flow import Flow
from ..structured.prompts import language
from .classify import Classification, classify_flow, decide_flow, decider_labels, decider_threshold, require_text
from .prompts import REDLINE

#: escalate below this confidence when neither the caller, the route's decider nor the config names a threshold
DEFAULT_THRESHOLD = 0.6
REDLINE_LABELS = ["simple", "reasoning", "math", "planning", "facts"]
#: a question that asks for arithmetic, not a figure in a text: dates (``2024-03-05``), phones, order numbers, ranges
#: ("5 - 7 days"), ``retries=3``, SQL's ``id = ?``, 计算机 / 按我的计算 and "compute cluster" escalated ordinary
#: tickets. An operator between figures that none of those has; "what is 10/2", "15% of 200"; an equation with an
#: unknown (2x + 3 = 7, x^2 = 4); figures then "= ?"; calculate / compute / 计算 as a request.
_MATH = re.compile(
    r"\d\s*[+*×÷^]\s*\d"
    r"|\b(?:what(?:'s| is)|how much is)\s+-?\d+(?:\.\d+)?\s*(?:[-+*/x×÷]|times|divided by|plus|minus)\s*-?\d"
    r"|\d\s*%\s+of\s+\d"
    r"|\d\s*[a-z]\s*(?:[-+]\s*\d+\s*)?=\s*-?\d|\b[a-z]\s*\^\s*\d"
    r"|\d\s*[-/]\s*\d+\s*=\s*(?:\?|？|多少)"
    r"|\bsolve\s+(?:for\b|the equation|[a-z]\s*[=^+]|\d)|\b(?:integral|derivative)s?\s+of\b"
    r"|\b(?:calculate|compute)\s+(?:the|how|what|a|an|my|our|this|total|sum|\d+)\b"
    r"|(?:请|帮我|帮忙|麻烦|如何|怎么|怎样)计算|计算(?:一下|出|\s*[\d（(])|求解|方程|积分|导数|等于多少", re.I)
_PLANNING = re.compile(r"\b(step[- ]by[- ]step plan|roadmap|itinerary|\d+[- ](week|month|year) plan)\b|"
                       r"(规划|路线图|行程|计划书)", re.I)


class Route(BaseModel):
    """A destination: ``task:<name>``, ``tool:<name>`` or ``upstream:<name>``."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1)
    description: str = ""
    target: str = Field(pattern=r"^(task|tool|upstream):\S+$")


class EscalationTarget(BaseModel):
    """An OpenAI-compatible large model (cloud or a bigger local server)."""

    model_config = ConfigDict(extra="forbid")
    url: str = Field(pattern=r"^https?://")
    api_key_env: str | None = None
    model: str | None = None
    redact: bool = True


@dataclass
class RouteDecision:
    route: str
    target: str
    confidence: float
    escalated: bool
    reason: str
    scores: dict[str, float]
    category: str = "simple"
    sent_text: str | None = None
    answer: str | None = None
    redacted: list[dict[str, Any]] = field(default_factory=list)
    #: the threshold the decision used and where it came from (argument, decider NAME@N, config PATH, default)
    threshold: float = DEFAULT_THRESHOLD
    threshold_from: str = "default"

    def to_json(self) -> dict[str, Any]:
        return {"route": self.route, "target": self.target, "confidence": self.confidence,
                "escalated": self.escalated, "reason": self.reason, "scores": self.scores,
                "category": self.category, "sent_text": self.sent_text, "answer": self.answer,
                "redacted": self.redacted, "threshold": self.threshold, "threshold_from": self.threshold_from}


@dataclass
class RouteStats:
    """How many requests stayed local (thread-safe counters)."""

    local: int = 0
    escalated: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(self, decision: RouteDecision) -> None:
        with self._lock:
            if decision.escalated:
                self.escalated += 1
            else:
                self.local += 1

    @property
    def local_share(self) -> float:
        total = self.local + self.escalated
        return self.local / total if total else 0.0


def check_routes(routes: Any) -> list[Route]:
    if not isinstance(routes, (list, tuple)) or len(routes) < 2:
        raise ConfigError("routes must be a list of at least two {name, description, target} objects",
                          param="routes")
    try:
        parsed = [r if isinstance(r, Route) else Route.model_validate(r) for r in routes]
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"invalid route: {problems}", hint="a route is {name, description, target} with "
                          "target task:<name>, tool:<name> or upstream:<name>", param="routes") from None
    if len({r.name.strip() for r in parsed}) != len(parsed):  # "billing" and "billing " are one label
        raise ConfigError("route names must be unique (once trimmed)", param="routes")
    return parsed


_CONFIGURED: ContextVar[tuple[float | None, str] | None] = ContextVar("tiankong_route_threshold", default=None)


@contextmanager
def configured_threshold(threshold: float | None, source: str = "config") -> Iterator[None]:
    """Within this block the configured ``[route] threshold`` is ``threshold`` (``None``: none configured): the
    gateway's own config, not the user's config file."""
    token = _CONFIGURED.set((threshold, source))
    try:
        yield
    finally:
        _CONFIGURED.reset(token)


_FILE_CACHE: dict[tuple[str, int, int], float | None] = {}


def _file_threshold() -> tuple[float | None, str]:
    """``[route] threshold`` of the user's config file (the one ``tiankong serve`` reads without ``--config``)."""
    from .. import paths
    from ..config import load_config

    path = paths.config_file()
    try:
        stat = path.stat()
    except OSError:
        if os.environ.get("TIANKONG_CONFIG"):  # a typo must not route on the default threshold (serve refuses it too)
            raise ConfigError(f"TIANKONG_CONFIG names {path}, which is not there",
                              hint="fix the path, or unset TIANKONG_CONFIG to use the default config") from None
        return None, ""
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if key not in _FILE_CACHE:
        _FILE_CACHE.clear()
        _FILE_CACHE[key] = load_config(path).route.threshold
    return _FILE_CACHE[key], f"config {path}"


def escalation_threshold(threshold: float | None, decider: Decider | None = None) -> tuple[float, str]:
    """The threshold to use and where it came from: the caller's, the decider's entry, the configured one
    (the gateway's ``[route]``, else the user's config file), else ``DEFAULT_THRESHOLD``."""
    if threshold is not None:
        if not 0.0 <= threshold <= 1.0:
            raise ConfigError("threshold must be between 0 and 1")
        return threshold, "argument"
    found = decider_threshold(decider)
    if found is not None and decider is not None:
        return found, f"decider {decider.ref}"
    configured = _CONFIGURED.get()
    value, source = configured if configured is not None else _file_threshold()
    return (value, source) if value is not None else (DEFAULT_THRESHOLD, "default")


def route_flow(text: str, routes: list[Route], *, threshold: float | None = None, redline: bool = True,
               escalate_target: str = "upstream", decider: Decider | None = None) -> Flow[RouteDecision]:
    """``decider``: a tuned decider over the route names answers the local decision (calibrated); below
    ``threshold`` confidence the request escalates (``None``: ``escalation_threshold``'s order)."""
    require_text(text)
    threshold, threshold_from = escalation_threshold(threshold, decider)
    names = [r.name for r in routes]
    descriptions = {r.name: r.description for r in routes if r.description}
    if decider is not None:
        decider_labels(decider.labels, names, decider.ref)
    flows: list[Flow[Classification]] = [decide_flow(decider, text) if decider is not None else
                                         classify_flow(text, names, descriptions=descriptions or None)]
    if redline:
        lang = language(text)
        flows.append(classify_flow(text, REDLINE_LABELS, instructions=REDLINE[lang]))
    found = yield from gather(flows)
    local = found[0]
    chosen = next(r for r in routes if r.name == local.label)
    category, reason = "simple", ""
    if redline:
        category, reason = _redline(text, found[1])
    if not reason and local.confidence < threshold:
        reason = f"low confidence {local.confidence:.2f} < {threshold:.2f}"
    escalated = bool(reason) or chosen.target.startswith("upstream:")
    if escalated and not reason:
        reason = f"route {chosen.name} targets {chosen.target}"
    target = chosen.target if not reason or chosen.target.startswith("upstream:") else escalate_target
    return RouteDecision(chosen.name, target, local.confidence, escalated, reason or "confident local decision",
                         local.scores, category, threshold=threshold, threshold_from=threshold_from)


def _redline(text: str, kind: Classification) -> tuple[str, str]:
    if _MATH.search(text):
        return "math", "red line: maths (calculation detected)"
    if _PLANNING.search(text):
        return "planning", "red line: long-horizon planning"
    if kind.label != "simple" and kind.confidence >= 0.5:
        return kind.label, f"red line: {kind.label} (p={kind.confidence:.2f})"
    return "simple", ""


def check_upstream(upstream: Any) -> EscalationTarget:
    try:
        return upstream if isinstance(upstream, EscalationTarget) else EscalationTarget.model_validate(upstream)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"invalid upstream: {problems}", hint="an upstream is {url, api_key_env?, model?, "
                          "redact?}") from None


def upstream_key(upstream: EscalationTarget) -> str | None:
    """The upstream's API key from its environment variable (missing variable → ConfigError)."""
    if not upstream.api_key_env:
        return None
    key = os.environ.get(upstream.api_key_env)
    if not key:
        raise ConfigError(f"environment variable {upstream.api_key_env} is not set",
                          hint="export the upstream's API key there, or drop api_key_env")
    return key


def escalation_text(text: str, upstream: EscalationTarget) -> tuple[str, list[dict[str, Any]]]:
    """What leaves the machine: the text with PII redacted by the deterministic rules (unless disabled)."""
    if not upstream.redact:
        return text, []
    from .redact import redact_rules

    redaction = redact_rules(text, style="placeholder")
    return redaction.text, [{"type": e.type, "start": e.start, "end": e.end} for e in redaction.entities]
