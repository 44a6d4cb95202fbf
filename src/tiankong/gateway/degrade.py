"""Degradation under load: levels L0-L3 chosen from queue depth, p99 latency and engine memory.

* **L1** caps the prompt: requests whose prompt text is longer than ``max_prompt_chars`` are refused
  (413 ``context_length_exceeded``) or truncated (``over_limit = "truncate"``).
* **L2** also lowers the number of requests sent to each engine at once to ``l2_max_in_flight``.
* **L3** also routes requests to the fallback (``fallback_url``/``fallback_model``); without one configured
  it acts as L2 and says so in ``/health``.

Each trigger is a list of thresholds ``[L1, L2, L3]``; the level is the highest one any signal reaches. The
level rises at once and falls one step at a time, only after every signal stayed below ``recover_ratio`` of
the current level's thresholds for ``hold_s`` (hysteresis: no flapping around a threshold).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from starlette.responses import JSONResponse

from ..config import DegradationSettings
from .admission import Lane
from .metrics import RequestRecord, process_rss_bytes
from .responses import error_response
from .stats import LiveStats

MARKER = " … "
MIB = 1024 * 1024


@dataclass
class Signals:
    queue_depth: float
    p99_latency_s: float | None
    engine_rss_mib: float | None


class Degradation:
    """The current level, re-evaluated at most every ``check_interval_s``; L2 applied to the engines."""

    def __init__(self, settings: DegradationSettings, stats: LiveStats, engines: Callable[[], list[Lane]],
                 *, has_fallback: bool = False, clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self.stats = stats
        self.engines = engines
        self.has_fallback = has_fallback
        self.clock = clock
        self.level = 0
        self.reasons: list[str] = []
        self.changed_at = clock()
        self.transitions = 0
        self._calm_since: float | None = None
        self._checked: float | None = None
        self.on_change: Callable[[int], None] | None = None

    def signals(self, now: float) -> Signals:
        handles = self.engines()
        rss = [process_rss_bytes(h.replica.pid()) for h in handles]
        known = [r for r in rss if r is not None]
        return Signals(queue_depth=sum(h.admission.waiting for h in handles),
                       p99_latency_s=self.stats.latency_p99(now, self.settings.window_s),
                       engine_rss_mib=max(known) / MIB if known else None)

    def _reached(self, signals: Signals, scale: float) -> tuple[int, list[str]]:
        level, reasons = 0, []
        for name, thresholds in (("queue_depth", self.settings.queue_depth),
                                 ("p99_latency_s", self.settings.p99_latency_s),
                                 ("engine_rss_mib", self.settings.engine_rss_mib)):
            value = getattr(signals, name)
            if value is None:
                continue
            for index, threshold in enumerate(thresholds):
                if value >= threshold * scale and index + 1 > level:
                    level = index + 1
            hits = [t for t in thresholds if value >= t * scale]
            if hits:
                reasons.append(f"{name} {value:.3g} >= {max(hits) * scale:.3g}")
        return level, reasons

    def evaluate(self, now: float, signals: Signals) -> int:
        """Move the level for these signals (up at once, down one step after ``hold_s`` of calm)."""
        up, reasons = self._reached(signals, 1.0)
        calm, _ = self._reached(signals, self.settings.recover_ratio)
        if up > self.level:
            self._set(up, now, reasons)
        elif calm < self.level:
            if self._calm_since is None:
                self._calm_since = now
            elif now - self._calm_since >= self.settings.hold_s:
                self._set(self.level - 1, now, reasons or ["calm"])
                self._calm_since = now  # the next step down needs another hold_s of calm
        else:
            self._calm_since = None
        return self.level

    def _set(self, level: int, now: float, reasons: list[str]) -> None:
        self.level, self.reasons, self.changed_at = level, reasons, now
        self._calm_since = None
        self.transitions += 1
        for handle in self.engines():
            admission = handle.admission
            admission.set_limit(min(admission.base_limit, self.settings.l2_max_in_flight) if level >= 2
                                else admission.base_limit)
        if self.on_change is not None:
            self.on_change(level)

    def update(self, now: float | None = None) -> int:
        """The level now, re-evaluated when ``check_interval_s`` has passed since the last evaluation."""
        if not self.settings.enabled:
            return 0
        now = self.clock() if now is None else now
        if self._checked is None or now - self._checked >= self.settings.check_interval_s:
            self._checked = now
            self.evaluate(now, self.signals(now))
        return self.level

    @property
    def routes_to_fallback(self) -> bool:
        return self.level >= 3 and self.has_fallback

    def describe(self) -> dict[str, Any]:
        note = None
        if self.level >= 3 and not self.has_fallback:
            note = "L3 without a fallback configured (degradation.fallback_url): acting as L2"
        return {"level": self.level, "enabled": self.settings.enabled, "reasons": self.reasons,
                "transitions": self.transitions,
                "since_s": round(self.clock() - self.changed_at, 1), "fallback": self.has_fallback, "note": note,
                "max_prompt_chars": self.settings.max_prompt_chars if self.level >= 1 else None}


# --- L1: the prompt cap --------------------------------------------------------------------------------------

TEXT_KEYS = ("prompt", "input", "text", "query", "documents")


def _strings(body: dict[str, Any]) -> list[tuple[Any, Any]]:
    """(container, key) of every prompt string in a request body: message contents, prompt, input, text…"""
    found: list[tuple[Any, Any]] = []

    def visit(container: Any, key: Any) -> None:
        value = container[key]
        if isinstance(value, str):
            found.append((container, key))
        elif isinstance(value, list):
            for index, item in enumerate(value):
                if isinstance(item, dict) and item.get("type") == "text" and isinstance(item.get("text"), str):
                    found.append((item, "text"))
                elif isinstance(item, str):
                    found.append((value, index))

    messages = body.get("messages")
    for message in messages if isinstance(messages, list) else []:
        if isinstance(message, dict) and "content" in message:
            visit(message, "content")
    for key in TEXT_KEYS:
        if key in body:
            visit(body, key)
    return found


def prompt_chars(body: dict[str, Any]) -> int:
    return sum(len(container[key]) for container, key in _strings(body))


def truncate(body: dict[str, Any], limit: int) -> int:
    """Shorten the body's prompt text to ``limit`` characters in place; the number of characters removed.

    Chat: older messages (not system ones, not the last) go first, oldest first; then the longest remaining
    text loses its middle (its beginning and end are kept, joined by `` … ``).
    """
    before = prompt_chars(body)
    messages = body.get("messages")
    if isinstance(messages, list):
        while prompt_chars(body) > limit:
            droppable = [i for i, m in enumerate(messages[:-1])
                         if not (isinstance(m, dict) and m.get("role") in ("system", "developer"))]
            if not droppable:
                break
            del messages[droppable[0]]
    while (excess := prompt_chars(body) - limit) > 0:
        container, key = max(_strings(body), key=lambda ref: len(ref[0][ref[1]]))
        text: str = container[key]
        keep = len(text) - excess - len(MARKER)
        container[key] = text[: (keep + 1) // 2] + MARKER + text[len(text) - keep // 2:] if keep > 0 else ""
    return before - prompt_chars(body)


def cap_prompt(policy: Degradation, body: dict[str, Any], call: RequestRecord) -> JSONResponse | None:
    """L1 and above: refuse (413) or truncate a prompt longer than ``max_prompt_chars``; None when it may go."""
    limit = policy.settings.max_prompt_chars
    if policy.level < 1 or prompt_chars(body) <= limit:
        return None
    if policy.settings.over_limit == "truncate" and not isinstance(body.get("documents"), list):
        truncate(body, limit)
        call.degraded = "truncated"
        return None
    call.degraded = "rejected"
    return error_response(413, f"the gateway is degraded (L{policy.level}) and accepts at most {limit} characters "
                          f"of prompt text for now (this one has {prompt_chars(body)}); shorten it or retry later",
                          "invalid_request_error", "context_length_exceeded")
