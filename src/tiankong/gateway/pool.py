"""An engine pool: several models, each served by one or more replicas, routed by the request's ``model``.

* **Routing**: a request's ``model`` is matched against each entry's name and aliases (``name`` or a
  ``name:tag`` prefix, as the single-engine gateway does); among the entry's ready replicas the one with the
  fewest outstanding requests (in flight + waiting in its admission queue) gets it.
* **Replicas** are local engines (:class:`EngineProcess`, started on demand) or remote OpenAI-compatible
  upstreams (always "loaded"; they never count against the cap).
* **On-demand start**: an entry whose local replicas are stopped is started at its first request (in a
  thread; concurrent requests for it wait for the same start).
* **max_loaded**: at most this many entries with local engines run at once; to start another, the least
  recently used *idle* one (nothing in flight or queued) is stopped; if none is idle → :class:`PoolFull`
  (the gateway answers 503 with ``Retry-After``).
* **Idle TTL**: :meth:`EnginePool.reap` (called periodically) stops entries unused for ``idle_ttl_s``.

Each replica is an :class:`EngineHandle` with its own :class:`Admission`, so the gateway's per-engine
pipeline (admission, deadline, metrics) applies unchanged; the single-engine path does not use this module.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from starlette.responses import JSONResponse

from ..engine import EngineProcess
from ..errors import ConfigError, EngineError
from .admission import Admission, EngineHandle
from .metrics import Call
from .responses import engine_unavailable, error_response


class PoolFull(EngineError):
    """Every loaded model is busy and the pool may not start another."""

    http_status = 503


def _ready() -> str:
    return "ready"


@dataclass
class Replica:
    handle: EngineHandle
    engine: EngineProcess | None = None  # None: a remote upstream

    @property
    def local(self) -> bool:
        return self.engine is not None

    def loaded(self) -> bool:
        return self.engine is None or self.engine.state.value in ("ready", "starting")

    def outstanding(self) -> int:
        return self.handle.admission.in_flight + self.handle.admission.waiting


def recycler(engine: EngineProcess) -> tuple[Callable[[], bool] | None, Callable[[], None] | None]:
    """Counting and restarting for ``restart_after_requests`` (both None when the engine has no limit)."""
    limit = engine.restart_after_requests
    if not limit:
        return None, None

    def count() -> bool:
        engine.requests_since_start += 1
        return engine.requests_since_start >= limit

    def recycle() -> None:
        engine.restart(f"restart after {limit} requests")

    return count, recycle


def local_replica(name: str, engine: EngineProcess, queue_size: int | None = None) -> Replica:
    slots = engine.config.slots
    count, recycle = recycler(engine)
    handle = EngineHandle(name=name, url=lambda: engine.url, state=lambda: engine.state.value,
                          admission=Admission(slots, 2 * slots if queue_size is None else queue_size),
                          pid=lambda: engine.pid, restarts=lambda: engine.restarts,
                          count_request=count, recycle=recycle, api_key=engine.config.api_key)
    return Replica(handle, engine)


def remote_replica(name: str, url: str, max_in_flight: int = 4, queue_size: int | None = None,
                   api_key: str | None = None) -> Replica:
    base = url.rstrip("/")
    admission = Admission(max_in_flight, 2 * max_in_flight if queue_size is None else queue_size)
    return Replica(EngineHandle(name=name, url=lambda: base, state=_ready, admission=admission, api_key=api_key,
                                remote=True))


@dataclass
class PoolEntry:
    """One served model: its name, aliases and replicas."""

    name: str
    replicas: list[Replica]
    aliases: list[str] = field(default_factory=list)
    idle_ttl_s: float | None = None  # None: stays loaded once started
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

    def idle(self) -> bool:
        return all(r.outstanding() == 0 for r in self.replicas)


class EnginePool:
    def __init__(self, entries: list[PoolEntry], *, max_loaded: int | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        names = [n for e in entries for n in e.names()]
        if len(names) != len(set(names)):
            raise ConfigError("model names and aliases in the pool must be unique", hint="rename the duplicates")
        if not entries:
            raise ConfigError("the engine pool needs at least one model")
        self.entries = entries
        self.max_loaded = max_loaded
        self.clock = clock

    def resolve(self, model: str | None) -> PoolEntry:
        """The entry serving ``model`` (the first entry when no model is given)."""
        if not model:
            return self.entries[0]
        for entry in self.entries:
            if entry.matches(model):
                return entry
        served = ", ".join(n for e in self.entries for n in e.names())
        raise ConfigError(f"model {model!r} is not served here; available: {served}", hint="set model to one of them")

    def handles(self) -> list[EngineHandle]:
        return [r.handle for e in self.entries for r in e.replicas]

    def loaded_entries(self) -> list[PoolEntry]:
        return [e for e in self.entries if e.has_local() and e.loaded()]

    def pick(self, entry: PoolEntry) -> EngineHandle:
        """The loaded replica with the fewest outstanding requests (the first one on a tie)."""
        candidates = [r for r in entry.replicas if r.loaded()] or entry.replicas
        return min(candidates, key=Replica.outstanding).handle

    async def acquire(self, model: str | None) -> tuple[PoolEntry, EngineHandle]:
        """Resolve, start on demand (making room under ``max_loaded``), pick a replica."""
        entry = self.resolve(model)
        entry.last_used = self.clock()
        if entry.has_local() and not entry.loaded():
            async with entry.lock:
                if not entry.loaded():
                    await self._make_room(entry)
                    await asyncio.to_thread(self._start, entry)
        entry.last_used = self.clock()
        return entry, self.pick(entry)

    async def _make_room(self, wanted: PoolEntry) -> None:
        if self.max_loaded is None:
            return
        loaded = [e for e in self.loaded_entries() if e is not wanted]
        while len(loaded) >= self.max_loaded:
            idle = sorted((e for e in loaded if e.idle()), key=lambda e: e.last_used)
            if not idle:
                raise PoolFull(f"{len(loaded)} models are loaded (max_loaded = {self.max_loaded}) and all are busy",
                               hint="retry shortly, or raise pool max_loaded if memory allows")
            victim = idle[0]
            await asyncio.to_thread(self._stop, victim)
            loaded.remove(victim)

    @staticmethod
    def _start(entry: PoolEntry) -> None:
        for replica in entry.replicas:
            if replica.engine is not None and not replica.loaded():
                replica.engine.start()

    @staticmethod
    def _stop(entry: PoolEntry) -> None:
        for replica in entry.replicas:
            if replica.engine is not None:
                replica.engine.stop()

    def reap(self, now: float | None = None) -> list[str]:
        """Stop entries idle longer than their TTL; the names stopped."""
        now = self.clock() if now is None else now
        stopped = []
        for entry in self.loaded_entries():
            if entry.idle_ttl_s is not None and entry.idle() and now - entry.last_used >= entry.idle_ttl_s:
                self._stop(entry)
                stopped.append(entry.name)
        return stopped

    async def reap_forever(self, interval_s: float = 1.0) -> None:
        """Stop idle entries past their TTL (engines stopped in a thread) until cancelled."""
        while True:
            await asyncio.sleep(interval_s)
            now = self.clock()
            for entry in self.loaded_entries():
                if entry.lock.locked():  # being started for a request right now
                    continue
                if entry.idle_ttl_s is not None and entry.idle() and now - entry.last_used >= entry.idle_ttl_s:
                    await asyncio.to_thread(self._stop, entry)

    def names(self) -> list[str]:
        return [n for e in self.entries for n in e.names()]

    def stop_all(self) -> None:
        for entry in self.entries:
            self._stop(entry)

    def describe(self) -> list[dict[str, object]]:
        return [{"model": e.name, "aliases": e.aliases, "loaded": e.loaded() or not e.has_local(),
                 "idle_ttl_s": e.idle_ttl_s,
                 "replicas": [{"name": r.handle.name, "state": r.handle.state(), "local": r.local,
                               "outstanding": r.outstanding()} for r in e.replicas]} for e in self.entries]


async def route(pool: EnginePool, body: dict[str, object], call: Call) -> EngineHandle | JSONResponse:
    """The replica for this request (started on demand), or the error response: 404 unknown model, 503 pool
    full or engine failed to start."""
    model = body.get("model")
    try:
        entry, handle = await pool.acquire(model if isinstance(model, str) else None)
    except PoolFull as exc:
        return error_response(503, exc.one_line(), "engine_error", "pool_full", headers={"Retry-After": "5"})
    except ConfigError as exc:
        return error_response(404, exc.one_line(), "invalid_request_error", "model_not_found")
    except EngineError as exc:
        return engine_unavailable(exc.one_line())
    body["model"] = call.model = entry.name
    call.engine = handle.name
    return handle
