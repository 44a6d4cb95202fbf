"""``ModelRouter``: the gateway's side of the engine pool (``tiankong.engine.pool``).

The pool owns the engines (routing by model, on-demand start, LRU, idle TTL, recycling, wedge watch); the
router gives each replica an ``EngineHandle`` with its own admission queue, tells the pool how busy each
replica is (in flight + queued), and turns a request's ``model`` into a handle — or into the HTTP answer for
an unknown model (404), a full pool (503 ``pool_full``), an engine that failed to start or is down (503).
"""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse

from ..engine.pool import EnginePool, PoolFull, Replica
from ..errors import ConfigError, EngineError
from .admission import Admission, EngineHandle
from .metrics import RequestRecord
from .responses import engine_unavailable, error_response


class ModelRouter:
    def __init__(self, pool: EnginePool, *, max_in_flight: int | None = None, queue_size: int | None = None,
                 group_batching: bool = True, batch_slots: int | None = None, batch_yields: bool = False,
                 batch_preempt: bool = False) -> None:
        self.pool = pool
        self.handles: dict[str, EngineHandle] = {}
        for replica in pool.replicas():
            limit = max_in_flight or replica.slots
            queue = 2 * replica.slots if queue_size is None else queue_size
            self.handles[replica.name] = EngineHandle.for_replica(
                replica, Admission(limit, queue, group_batching=group_batching, batch_limit=batch_slots,
                                   batch_yields=batch_yields, preempt=batch_preempt))
        pool.load = self.outstanding

    def batch_concurrency(self, configured: int | None = None) -> int:
        """Lines a Batch API batch keeps in flight: ``configured``, else every slot batch lines may hold."""
        if configured is not None:
            return configured
        return sum(h.admission.batch_share() for h in self.handles.values())

    def outstanding(self, replica: Replica) -> int:
        return self.handles[replica.name].outstanding()

    @property
    def first(self) -> EngineHandle:
        return self.handles[self.pool.entries[0].replicas[0].name]

    def all(self) -> list[EngineHandle]:
        return list(self.handles.values())

    def served(self) -> list[tuple[EngineHandle, list[str]]]:
        """Each engine with the model names it serves."""
        return [(self.handles[r.name], e.names()) for e in self.pool.entries for r in e.replicas]

    async def route(self, body: dict[str, Any], call: RequestRecord) -> EngineHandle | JSONResponse:
        """The replica for this request (started on demand), or the error response."""
        model = body.get("model")
        try:
            entry, replica = await self.pool.acquire(model if isinstance(model, str) and model else None)
        except PoolFull as exc:
            return error_response(503, exc.one_line(), "engine_error", "pool_full", headers={"Retry-After": "5"})
        except ConfigError as exc:
            return error_response(404, exc.one_line(), "invalid_request_error", "model_not_found")
        except EngineError as exc:
            return engine_unavailable(exc.one_line())
        handle = self.handles[replica.name]
        if handle.state() not in ("ready", "starting") and not handle.recycling:
            return error_response(503, f"the engine is {handle.state()}; retry shortly", "engine_error",
                                  "engine_unavailable", headers={"Retry-After": "2"})
        body["model"] = call.model = entry.name
        call.engine = handle.name
        return handle

    def health(self, degradation: dict[str, Any]) -> JSONResponse:
        """Up while some model can serve (ready, or startable on demand and not failed); the first engine's
        state, load and next restart attempt; every model's replicas."""
        first, replica = self.first, self.pool.entries[0].replicas[0]
        status = first.state()
        retry = replica.next_retry_s() if status != "ready" else None
        up = self.pool.available()
        crash = {"crash_loop": replica.crash_loop()} if replica.crash_loop() else {}
        return JSONResponse({"status": "ok" if up else "unavailable", "engine": status, **crash,
                             "model": self.pool.entries[0].name, "in_flight": first.admission.in_flight,
                             "queued": first.admission.waiting, "degradation": degradation,
                             "pool": self.pool.describe(), **({"next_retry_s": retry} if retry is not None else {})},
                            status_code=200 if up else 503)
