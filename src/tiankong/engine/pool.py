"""The engine pool: every engine the gateway serves, owned here — a single engine is a pool of one.

* **Entries** are served models (a name and aliases); each has **replicas**: local engines
  (:class:`EngineProcess`, supervised, with the state machine of ``engine/supervised.py``) or remote
  OpenAI-compatible upstreams (never counted against ``max_loaded``; their reachability is learned from the
  requests sent to them: ``engine/replica.py``).
* **Routing**: a request's ``model`` matches an entry's name or alias (``name`` or a ``name:tag`` prefix); among
  the entry's loaded replicas the one with the smallest ``load`` (the caller's measure of outstanding work: the
  gateway passes in-flight + queued) gets it — one not marked unreachable first.
* **On-demand start** (``on_demand=True``, the ``[pool]`` models): a stopped entry is started at its first request
  (in a thread; concurrent requests wait for the same start). The single ``[engine]`` is started by ``serve``
  and supervised (restart on crash) instead: ``on_demand=False``.
* **max_loaded**: at most this many entries with local engines run at once; to start another, the least
  recently used idle one is stopped; if none is idle → :class:`PoolFull`.
* **Idle TTL**: :meth:`EnginePool.reap_forever` stops entries unused for ``idle_ttl_s``.
* **Recycling**: ``Replica.count_request`` / ``Replica.recycle`` are the engine's own (``restart_after_requests``).
* **Wedge watch**: :meth:`EnginePool.watch` starts a :class:`WedgeWatch` per local engine.
* **Fallback**: one remote entry outside the served names (``[degradation] fallback_url``, built by
  :func:`fallback_entry`); ``acquire(model, fallback=True)`` — the degradation policy's choice — routes to it.

``engine_pool(config)`` maps the config to engines — one function builds every ``EngineConfig``
(``engine/settings.py``), so a pool model gets every engine key the single engine gets.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..config import key_from_env
from ..errors import ConfigError, EngineError
from ..models import resolve_installed
from .launcher import launch
from .process import EngineProcess, EngineState, port_in_use
from .replica import REPROBE_S, PoolEntry, Replica
from .rpc import is_loopback
from .settings import engine_config
from .spec import spec_from_timings
from .supervised import ProcessState, RestartPolicy, StateChange
from .watch import WedgeWatch

if TYPE_CHECKING:
    from ..config import DegradationSettings, EngineKeys, TiankongConfig

#: the engine layer's public API for the gateway (it imports nothing else from ``tiankong.engine``)
__all__ = ["REPROBE_S", "EnginePool", "EngineProcess", "EngineState", "PoolEntry", "PoolFull", "ProcessState",
           "Replica", "StateChange", "WedgeWatch", "engine_key", "engine_pool", "fallback_entry", "is_loopback",
           "port_in_use", "spec_from_timings"]


class PoolFull(EngineError):
    """Every loaded model is busy and the pool may not start another."""

    http_status = 503


def _no_load(_: Replica) -> int:
    return 0


class EnginePool:
    def __init__(self, entries: list[PoolEntry], *, max_loaded: int | None = None,
                 clock: Callable[[], float] = time.monotonic, load: Callable[[Replica], int] = _no_load,
                 fallback: PoolEntry | None = None) -> None:
        names = [n for e in entries for n in e.names()]
        if twice := sorted({n for n in names if names.count(n) > 1}):
            raise ConfigError(f"model names and aliases in the pool must be unique: {', '.join(twice)} more than once",
                              hint="rename the duplicates")
        if not entries:
            raise ConfigError("the engine pool needs at least one model")
        self.entries = entries
        self.max_loaded = max_loaded
        self.clock = clock
        self.load = load  # outstanding work per replica (the gateway's admission counts)
        #: a remote entry requests go to when the degradation policy says so (not among the served names)
        self.fallback = fallback
        self._watches: list[WedgeWatch] = []

    @classmethod
    def of_engine(cls, engine: EngineProcess, name: str, aliases: list[str] | None = None) -> EnginePool:
        """A pool of one: the single supervised engine of ``tiankong serve`` (started by its owner)."""
        return cls([PoolEntry(name, [Replica(name, engine)], aliases=list(aliases or []), on_demand=False)])

    @classmethod
    def of_url(cls, url: str, name: str, aliases: list[str] | None = None, *, slots: int = 2,
               api_key: str | None = None) -> EnginePool:
        """A pool of one llama-server that runs elsewhere (tests, benchmarks, ``--url``)."""
        replica = Replica(name, remote_url=url.rstrip("/"), api_key=api_key, max_in_flight=slots, llama_server=True)
        return cls([PoolEntry(name, [replica], aliases=list(aliases or []), on_demand=False)])

    # --- routing ---------------------------------------------------------------------------------------

    def resolve(self, model: str | None) -> PoolEntry:
        """The entry serving ``model`` (the first entry when no model is given)."""
        if not model:
            return self.entries[0]
        for entry in self.entries:
            if entry.matches(model):
                return entry
        raise ConfigError(f"model {model!r} is not served here; available: {', '.join(self.names())}",
                          hint="set model to one of them")

    def replicas(self) -> list[Replica]:
        return [r for e in self.entries for r in e.replicas]

    def loaded_entries(self) -> list[PoolEntry]:
        return [e for e in self.entries if e.has_local() and e.loaded()]

    def pick(self, entry: PoolEntry) -> Replica:
        """The loaded replica with the least load (the first one on a tie); one marked unreachable only when every
        one is (the gateway's probe, ``ModelRouter.reprobe``, brings a marked one back)."""
        candidates = [r for r in entry.replicas if r.loaded()] or entry.replicas
        return min(candidates, key=lambda r: (bool(r.unreachable), self.load(r)))

    def idle(self, entry: PoolEntry) -> bool:
        return all(self.load(r) == 0 for r in entry.replicas)

    async def acquire(self, model: str | None, *, fallback: bool = False) -> tuple[PoolEntry, Replica]:
        """Resolve, start on demand (making room under ``max_loaded``), pick a replica. ``fallback`` (the
        degradation policy's choice; only with a fallback entry): the fallback, whatever the model."""
        if fallback and self.fallback is not None:
            return self.fallback, self.pick(self.fallback)
        entry = self.resolve(model)
        entry.last_used = self.clock()
        if entry.on_demand and entry.has_local() and not entry.loaded():
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
            idle = sorted((e for e in loaded if self.idle(e) and e.on_demand), key=lambda e: e.last_used)
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

    # --- lifecycle -------------------------------------------------------------------------------------

    def start_eager(self) -> None:
        """Start every entry that is not started on demand (the single engine)."""
        for entry in self.entries:
            if not entry.on_demand:
                self._start(entry)

    def reap(self, now: float | None = None) -> list[str]:
        """Stop entries idle longer than their TTL; the names stopped."""
        now = self.clock() if now is None else now
        stopped = []
        for entry in self._expired(now):
            self._stop(entry)
            stopped.append(entry.name)
        return stopped

    def _expired(self, now: float) -> list[PoolEntry]:
        return [e for e in self.loaded_entries() if e.idle_ttl_s is not None and not e.lock.locked()
                and self.idle(e) and now - e.last_used >= e.idle_ttl_s]

    async def reap_forever(self, interval_s: float = 1.0) -> None:
        """Stop idle entries past their TTL (engines stopped in a thread) until cancelled."""
        if all(e.idle_ttl_s is None for e in self.entries):
            return
        while True:
            await asyncio.sleep(interval_s)
            for entry in self._expired(self.clock()):
                await asyncio.to_thread(self._stop, entry)

    def watch(self, *, interval_s: float, timeout_s: float, failures: int,
              log: Callable[[str], None] = print) -> None:
        """Wedge watches for every local engine (each skips its engine while it is not ready)."""
        if interval_s <= 0:
            return
        for replica in self.replicas():
            if replica.engine is not None:
                self._watches.append(WedgeWatch(replica.engine, interval_s=interval_s, timeout_s=timeout_s,
                                                failures=failures, log=log).start())

    def stop_all(self) -> None:
        for watch in self._watches:
            watch.stop()
        self._watches = []
        for entry in self.entries:
            self._stop(entry)

    def subscribe(self, listener: Callable[[Replica, StateChange], None]) -> None:
        """State changes of every local engine, with the replica they belong to."""
        def forward(replica: Replica) -> Callable[[StateChange], None]:
            return lambda change: listener(replica, change)

        for replica in self.replicas():
            if replica.engine is not None:
                replica.engine.subscribe(forward(replica))

    # --- reporting -------------------------------------------------------------------------------------

    def names(self) -> list[str]:
        return [n for e in self.entries for n in e.names()]

    def available(self) -> bool:
        return any(e.available() for e in self.entries)

    def describe(self) -> list[dict[str, object]]:
        return [{"model": e.name, "aliases": e.aliases, "loaded": e.loaded() or not e.has_local(),
                 "idle_ttl_s": e.idle_ttl_s,
                 "replicas": [{**r.health(), "outstanding": self.load(r)} for r in e.replicas]} for e in self.entries]


# --- config → engines ------------------------------------------------------------------------------------


def engine_key() -> str:
    """A random key per engine that only its gateway knows: a local user cannot bypass the gateway's keys,
    rate limits and validation by calling the engine's port directly. ``TIANKONG_ENGINE_API_KEY`` sets it instead
    (for tools that must call the engine itself, such as ``benchmarks/gateway_overhead.py``)."""
    chosen = os.environ.get("TIANKONG_ENGINE_API_KEY", "")
    if not chosen:
        return secrets.token_urlsafe(32)
    if len(chosen) < 16 or any(c.isspace() for c in chosen) or chosen.startswith("sha256:"):
        raise ConfigError("TIANKONG_ENGINE_API_KEY must be a plain key of at least 16 characters without spaces",
                          hint="unset it to let tiankong choose a random key per engine")
    return chosen


FALLBACK = "fallback"  # the fallback replica's name (metrics, dashboard)


def fallback_entry(settings: DegradationSettings | None, default_model: str) -> PoolEntry | None:
    """The degradation fallback (``fallback_url``) as a remote entry sent ``fallback_model`` (else
    ``default_model``); None when none is configured."""
    if settings is None or not settings.fallback_url:
        return None
    replica = Replica(FALLBACK, remote_url=settings.fallback_url.rstrip("/"),
                      api_key=key_from_env(settings.fallback_api_key_env, "degradation.fallback"),
                      max_in_flight=settings.fallback_max_in_flight)
    return PoolEntry(settings.fallback_model or default_model, [replica], on_demand=False)


def engine_pool(config: TiankongConfig, log: Callable[[str], None] = print,
                on_give_up: Callable[[], None] | None = None) -> EnginePool:
    """Every engine the config describes, created (not started): the ``[pool]`` models (started on demand), or
    else the single ``[engine]`` as a pool of one (``start_eager`` starts it). One mapping builds every
    ``EngineConfig`` (``engine_config``) and every engine is supervised with ``[engine]``'s settings."""
    settings = config.engine

    def process(keys: EngineKeys, model: str, alias: str, single: bool = False) -> EngineProcess:
        # through the one launcher: ``spec = "auto"`` is measured here, before the process is built (for an
        # on-demand pool model that is when the pool is built, not its first request)
        return launch(engine_config(keys, model, alias=alias, api_key=engine_key()), settings.llama_server,
                      start=False, policy=RestartPolicy(max_restarts=settings.max_restarts,
                                                        window_s=settings.restart_window_s,
                                                        after_budget=settings.after_restart_budget if single
                                                        else "retry"),
                      startup_timeout_s=settings.startup_timeout_s,
                      restart_after_requests=keys.restart_after_requests, log=log,
                      on_give_up=on_give_up if single else None)

    if not config.pool.models:
        name = resolve_installed(settings.model).name
        return EnginePool.of_engine(process(settings, settings.model, name, single=True), name)
    entries = []
    for spec in config.pool.models:
        if spec.url is not None:
            api_key = key_from_env(spec.api_key_env, f"pool model {spec.name}")
            replicas = [Replica(f"{spec.name}@upstream", remote_url=spec.url.rstrip("/"), api_key=api_key,
                                max_in_flight=spec.max_in_flight)]
        else:
            model = resolve_installed(spec.model or "").name
            replicas = [Replica(f"{spec.name}#{index}", process(spec, model, spec.name))
                        for index in range(spec.replicas)]
        entries.append(PoolEntry(spec.name, replicas, aliases=list(spec.aliases), idle_ttl_s=spec.idle_ttl_s))
    return EnginePool(entries, max_loaded=config.pool.max_loaded)
