"""A pool entry's replicas: a local engine tiankong runs, or a server it does not run (a remote OpenAI-compatible
upstream, or a llama-server at ``--url``).

**Reachability** of a server tiankong does not run is learned from the requests sent to it (passive health, as a
reverse proxy's ``max_fails``/``fail_timeout``): a connection that cannot be made marks the replica
*unreachable* (the error and when); any answer — even an HTTP error — marks it reachable again. While marked, the
pool routes the model's requests to its other replicas; when every one is marked, a request for a remote upstream
is answered 503 at once (``open_circuit``: for ``REPROBE_S`` after the mark) instead of waiting, and then tries it
again. The gateway probes each marked replica every ``REPROBE_S`` (``ModelRouter.reprobe_forever``; only a
connection that cannot be made keeps the mark) so one comes back with no user request spent on it. ``/health``
counts a marked replica as down — a model whose replicas are all marked is not available — and ``pool`` shows each
one's ``reachable`` and ``last_error``. (A local engine's health is its supervised process state,
``engine/supervised.py``; the marks do not apply to it.)
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from ..errors import ConfigError
from .process import EngineProcess, EngineState
from .supervised import ProcessState

#: seconds between the gateway's probes of a replica marked unreachable; a request for a remote upstream marked
#: less than this ago (by a request or a probe) is answered 503 at once
REPROBE_S = 5.0

@dataclass
class Replica:
    """One engine of an entry: a local ``EngineProcess`` or a remote upstream at ``remote_url``."""

    name: str
    engine: EngineProcess | None = None
    remote_url: str | None = None
    api_key: str | None = field(default=None, repr=False)  # sent as Bearer (a remote's, or the engine's own)
    max_in_flight: int | None = None  # remote: requests sent at once (local: the engine's slots)
    #: a URL tiankong does not run that is still a llama-server (``GatewayState(upstream_url=…)``): sent the
    #: engine's own requests, not a model name
    llama_server: bool = False
    #: why a server tiankong does not run could not be reached ("" while it answers), and when (monotonic)
    unreachable: str = field(default="", init=False)
    unreachable_at: float = field(default=0.0, init=False)

    def __post_init__(self) -> None:
        if (self.engine is None) == (self.remote_url is None):
            raise ConfigError("a replica is a local engine or a remote url, not both or neither")
        if self.engine is not None and self.api_key is None:
            self.api_key = self.engine.config.api_key

    @property
    def local(self) -> bool:
        return self.engine is not None

    @property
    def remote(self) -> bool:
        """A remote OpenAI-compatible upstream (sent the model's name), not an engine tiankong talks to."""
        return self.engine is None and not self.llama_server

    @property
    def slots(self) -> int:
        if self.engine is not None:
            return self.engine.config.slots
        return self.max_in_flight or 4

    def url(self) -> str:
        return self.engine.url if self.engine is not None else str(self.remote_url)

    def auth_headers(self) -> dict[str, str]:
        """``Authorization: Bearer`` with the replica's key (a remote's, or the engine's own); never logged."""
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def state(self) -> ProcessState:
        """The engine's state (a remote upstream is always ``READY``); a ``StrEnum``: its JSON is the name."""
        return self.engine.state if self.engine is not None else ProcessState.READY

    def ready(self) -> bool:
        return self.state() is ProcessState.READY

    # --- reachability of a server tiankong does not run (the module's docstring) ---------------------------

    def mark_unreachable(self, error: str, now: float | None = None) -> None:
        if self.engine is None:
            self.unreachable, self.unreachable_at = error or "no connection", time.monotonic() if now is None else now

    def mark_reachable(self) -> None:
        self.unreachable = ""

    def serving(self) -> bool:
        """Ready, and (a server tiankong does not run) not marked unreachable."""
        return self.ready() and not self.unreachable

    def open_circuit(self, now: float | None = None) -> bool:
        """Marked unreachable less than ``REPROBE_S`` ago: not worth a request yet."""
        return bool(self.unreachable) and (time.monotonic() if now is None else now) - self.unreachable_at < REPROBE_S

    def health(self) -> dict[str, object]:
        """``/health``'s view: state, whether local, and for a server tiankong does not run its reachability."""
        view: dict[str, object] = {"name": self.name, "state": self.state().value, "local": self.local}
        if self.engine is None:
            view["reachable"] = not self.unreachable
            if self.unreachable:
                view["last_error"] = self.unreachable
        return view

    def loaded(self) -> bool:
        return self.engine is None or self.engine.state in (EngineState.READY, EngineState.STARTING)

    def pid(self) -> int | None:
        return self.engine.pid if self.engine is not None else None

    def restarts(self) -> int:
        return self.engine.restarts if self.engine is not None else 0

    def next_retry_s(self) -> float | None:
        return self.engine.next_retry_s if self.engine is not None else None

    def crash_loop(self) -> str:
        """Why the engine is no longer restarted ('' while it is): the same start-up crash twice in a row."""
        return self.engine.crash_loop if self.engine is not None else ""

    def recycles(self) -> bool:
        return self.engine is not None and bool(self.engine.restart_after_requests)

    def count_request(self) -> bool:
        return self.engine.count_request() if self.engine is not None else False

    def recycle(self) -> None:
        if self.engine is not None:
            self.engine.recycle()


@dataclass
class PoolEntry:
    """One served model: its name, aliases and replicas."""

    name: str
    replicas: list[Replica]
    aliases: list[str] = field(default_factory=list)
    idle_ttl_s: float | None = None  # None: stays loaded once started
    on_demand: bool = True  # started at its first request (False: started and supervised by its owner)
    last_used: float = 0.0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)

    def names(self) -> list[str]:
        return [self.name, *self.aliases]

    def matches(self, model: str) -> bool:
        return any(model == n or n.startswith(model + ":") for n in self.names())

    def has_local(self) -> bool:
        return any(r.local for r in self.replicas)

    def loaded(self) -> bool:
        return any(r.local and r.loaded() for r in self.replicas)

    def available(self) -> bool:
        """Can serve now or after an on-demand start: some replica is ready, or it may be started and none of
        its replicas has failed."""
        if any(r.serving() for r in self.replicas):
            return True
        return self.on_demand and not all(r.state() is ProcessState.FAILED or r.unreachable for r in self.replicas)


