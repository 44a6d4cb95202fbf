"""Speculative-decoding counters and the run-time acceptance monitor.

llama-server reports what speculation did in two places:

* per request, in the answer's ``timings``: ``draft_n`` (tokens drafted) and ``draft_n_accepted`` (drafted
  tokens the target agreed with) — both absent when nothing was drafted;
* per engine, on ``/metrics`` (started with ``--metrics``): ``llamacpp:spec_decode_num_draft_tokens_total``,
  ``llamacpp:spec_decode_num_accepted_tokens_total`` and ``llamacpp:spec_decode_num_drafts_total``
  (verification steps), counted since the process started.

:class:`SpecMonitor` watches the engine counters and turns speculation off when the acceptance rate over
the last ``window_tokens`` drafted tokens falls below ``min_acceptance``. The pinned llama-server has no
per-request switch (its ``speculative.*`` request fields are compiled out), so "off" means a restart of the
same :class:`EngineProcess` without the draft: the gateway retries requests caught by the restart, as for a
crash or wedge restart.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx

from ..errors import EngineError
from .supervised import Watcher

if TYPE_CHECKING:  # pragma: no cover
    from .flags import EngineConfig
    from .process import EngineProcess

_METRIC = re.compile(r"^llamacpp:(spec_decode_num_\w+?)_total\s+([0-9.eE+-]+)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class SpecStats:
    """Drafted and accepted token counts (``steps``: verification steps, from /metrics only)."""

    drafted: int = 0
    accepted: int = 0
    steps: int = 0

    @property
    def acceptance(self) -> float | None:
        """Accepted / drafted, or None when nothing was drafted."""
        return self.accepted / self.drafted if self.drafted else None

    def __add__(self, other: SpecStats) -> SpecStats:
        return SpecStats(self.drafted + other.drafted, self.accepted + other.accepted, self.steps + other.steps)

    def __sub__(self, other: SpecStats) -> SpecStats:
        return SpecStats(self.drafted - other.drafted, self.accepted - other.accepted, self.steps - other.steps)

    def to_json(self) -> dict[str, Any]:
        rate = self.acceptance
        return {"drafted": self.drafted, "accepted": self.accepted, "steps": self.steps,
                "acceptance": None if rate is None else round(rate, 4)}


def spec_from_timings(timings: Mapping[str, Any] | None) -> SpecStats:
    """``draft_n`` / ``draft_n_accepted`` of one answer's ``timings`` (zeros when absent)."""
    timings = timings or {}
    drafted, accepted = timings.get("draft_n"), timings.get("draft_n_accepted")
    if not isinstance(drafted, int) or not isinstance(accepted, int):
        return SpecStats()
    return SpecStats(drafted=drafted, accepted=accepted)


def spec_from_metrics(text: str) -> SpecStats:
    """The engine-wide counters from llama-server's Prometheus text."""
    values = {name: int(float(value)) for name, value in _METRIC.findall(text)}
    return SpecStats(drafted=values.get("spec_decode_num_draft_tokens", 0),
                     accepted=values.get("spec_decode_num_accepted_tokens", 0),
                     steps=values.get("spec_decode_num_drafts", 0))


def engine_spec_stats(url: str, timeout_s: float = 2.0, headers: dict[str, str] | None = None) -> SpecStats:
    """``GET {url}/metrics`` of a llama-server started with ``--metrics`` (EngineConfig.metrics)."""
    try:
        answer = httpx.get(f"{url.rstrip('/')}/metrics", timeout=timeout_s, headers=headers)
    except httpx.HTTPError as exc:
        raise EngineError(f"cannot read {url}/metrics: {type(exc).__name__}", hint="is the engine running?") from None
    if answer.status_code != 200:
        raise EngineError(f"{url}/metrics answered HTTP {answer.status_code}",
                          hint="start llama-server with --metrics (EngineConfig.metrics=True)")
    return spec_from_metrics(answer.text)


class RollingAcceptance:
    """Acceptance over the most recent ``window_tokens`` drafted tokens, fed with cumulative counters."""

    def __init__(self, window_tokens: int) -> None:
        self.window_tokens = window_tokens
        self._last: SpecStats | None = None
        self._deltas: deque[SpecStats] = deque()

    def observe(self, total: SpecStats) -> SpecStats:
        """Add a cumulative reading (a smaller one means the engine restarted); returns the window's sum."""
        last = self._last
        delta = total if last is None or total.drafted < last.drafted else total - last
        self._last = total
        if delta.drafted > 0:
            self._deltas.append(delta)
        while len(self._deltas) > 1 and self.window().drafted - self._deltas[0].drafted >= self.window_tokens:
            self._deltas.popleft()
        return self.window()

    def window(self) -> SpecStats:
        return sum(self._deltas, SpecStats())

    def below(self, min_acceptance: float) -> bool:
        """True once the window is full and its acceptance is under ``min_acceptance``."""
        window = self.window()
        return window.drafted >= self.window_tokens and (window.acceptance or 0.0) < min_acceptance


def without_spec(config: EngineConfig) -> EngineConfig:
    """The same engine configuration with speculative decoding off."""
    return dataclasses.replace(config, spec=None, spec_type=None, draft_model=None, spec_draft_n_max=None,
                               spec_draft_n_min=None, spec_draft_p_min=None, draft_gpu_layers=None)


class SpecMonitor(Watcher):
    """A daemon thread: poll the engine's counters, restart it without speculation when acceptance drops."""

    thread_name = "tiankong-spec-monitor"
    stop_after_action = True

    def __init__(self, engine: EngineProcess, *, min_acceptance: float = 0.6, window_tokens: int = 256,
                 interval_s: float = 5.0, log: Callable[[str], None] | None = None) -> None:
        super().__init__(interval_s)
        self.engine = engine
        self.min_acceptance = min_acceptance
        self.rolling = RollingAcceptance(window_tokens)
        self.log = log
        self.disabled_reason: str | None = None

    def check_once(self) -> bool:
        """One reading; True when it turned speculation off (the engine restarted without it)."""
        if self.disabled_reason is not None or not self.engine.alive():
            return False
        try:
            window = self.rolling.observe(engine_spec_stats(self.engine.url, headers=self.engine.config.auth_headers()))
        except EngineError:
            return False
        if not self.rolling.below(self.min_acceptance):
            return False
        self.disabled_reason = (f"rolling acceptance {window.accepted}/{window.drafted} = "
                                f"{(window.acceptance or 0.0):.0%} < {self.min_acceptance:.0%}")
        self.engine.config = without_spec(self.engine.config)
        if self.log is not None:
            self.log(f"speculative decoding off: {self.disabled_reason}; restarting the engine without it")
        with contextlib.suppress(EngineError):  # the watchdog keeps trying; the reason stays recorded
            self.engine.restart(f"speculative decoding off ({self.disabled_reason})")
        return True
