"""Wedge detection: restart an engine whose ``/slots`` stops answering (the pool starts one per local engine).

llama-server can wedge with ``/health`` still OK. A background thread probes ``/slots`` every
``interval_s``; after ``failures`` consecutive unanswered probes (so one long prompt batch on a busy CPU is
not mistaken for a wedge) it calls :meth:`EngineProcess.check_wedged`, which probes once more and restarts.
Crashes are the engine watchdog's job; requests caught by either restart are retried by the gateway.
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import EngineError
from .process import EngineProcess, EngineState
from .supervised import Watcher


class WedgeWatch(Watcher):
    """A daemon thread probing one engine; ``stop()`` ends it."""

    thread_name = "tiankong-wedge-watch"

    def __init__(self, engine: EngineProcess, *, interval_s: float = 10.0, timeout_s: float = 5.0,
                 failures: int = 3, log: Callable[[str], None] = print) -> None:
        super().__init__(interval_s)
        self.engine = engine
        self.timeout_s = timeout_s
        self.failures = failures
        self.log = log
        self.misses = 0
        self.restarts = 0

    def check_once(self) -> bool:
        """One probe; True when it restarted the engine."""
        if self.engine.state != EngineState.READY:
            self.misses = 0
            return False
        if self.engine.probe_slots(self.timeout_s):
            self.misses = 0
            return False
        self.misses += 1
        if self.misses < self.failures or self._stop.is_set():
            return False
        self.misses = 0
        try:
            restarted = self.engine.check_wedged(self.timeout_s)
        except EngineError as exc:
            self.log(f"engine wedged and could not be restarted: {exc}")
            return False
        if restarted:
            self.restarts += 1
            self.log(f"engine wedged (/slots unanswered {self.failures}x); restarted, pid {self.engine.pid}")
        return restarted

