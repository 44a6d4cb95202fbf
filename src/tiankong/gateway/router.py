"""``ModelRouter``: the gateway's side of the engine pool (``tiankong.engine.pool``).

The pool owns the engines (routing by model, on-demand start, LRU, idle TTL, recycling, wedge watch); the
router gives each replica a :class:`Lane` (the replica and its own admission queue), tells the pool how busy
each replica is (in flight + queued), and turns a request's ``model`` into a lane — or into the HTTP answer for
an unknown model (404), a full pool (503 ``pool_full``), an engine that failed to start or is down (503). The
pool's fallback entry (degradation L3) has a lane of its own, outside the served ones.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import httpx
from starlette.responses import JSONResponse

from ..engine.pool import REPROBE_S, EnginePool, PoolFull, ProcessState, Replica
from ..errors import ConfigError, EngineError
from .admission import Admission, Lane
from .metrics import RequestRecord
from .responses import engine_unavailable, error_response

#: how long a probe waits for a server marked unreachable to answer
REPROBE_TIMEOUT_S = 2.0

log = logging.getLogger("tiankong.gateway")


class ModelRouter:
    def __init__(self, pool: EnginePool, *, max_in_flight: int | None = None, queue_size: int | None = None,
                 group_batching: bool = True, batch_slots: int | None = None, batch_yields: bool = False,
                 batch_preempt: bool = False) -> None:
        self.pool = pool
        self.handles: dict[str, Lane] = {}  # the served replicas' lanes, by replica name
        for replica in pool.replicas():
            limit = max_in_flight or replica.slots
            queue = 2 * replica.slots if queue_size is None else queue_size
            self.handles[replica.name] = Lane(replica, Admission(
                limit, queue, group_batching=group_batching, batch_limit=batch_slots, batch_yields=batch_yields,
                preempt=batch_preempt))
        #: the fallback's lane: its own limit (``fallback_max_in_flight``), a queue of twice that
        self.fallback: Lane | None = None
        if pool.fallback is not None:
            replica = pool.fallback.replicas[0]
            self.fallback = Lane(replica, Admission(replica.slots, 2 * replica.slots))
        pool.load = self.outstanding

    def batch_concurrency(self, configured: int | None = None) -> int:
        """Lines a Batch API batch keeps in flight: ``configured``, else every slot batch lines may hold."""
        if configured is not None:
            return configured
        return sum(h.admission.batch_share() for h in self.handles.values())

    def lane(self, replica: Replica) -> Lane:
        if self.fallback is not None and replica is self.fallback.replica:
            return self.fallback
        return self.handles[replica.name]

    def outstanding(self, replica: Replica) -> int:
        return self.lane(replica).outstanding()

    @property
    def first(self) -> Lane:
        return self.handles[self.pool.entries[0].replicas[0].name]

    def all(self) -> list[Lane]:
        """The served lanes (the fallback's is not one)."""
        return list(self.handles.values())

    def engines(self) -> list[Lane]:
        """Every lane, the fallback's last."""
        return self.all() if self.fallback is None else [*self.all(), self.fallback]

    def served(self) -> list[tuple[Lane, list[str]]]:
        """Each engine with the model names it serves."""
        return [(self.handles[r.name], e.names()) for e in self.pool.entries for r in e.replicas]

    async def route(self, body: dict[str, Any], call: RequestRecord, *, fallback: bool = False) -> Lane | JSONResponse:
        """The replica for this request (started on demand), or the error response. ``fallback``: the degradation
        policy sends it to the pool's fallback (marked ``degraded`` in metrics)."""
        model = body.get("model")
        if model is not None and not isinstance(model, str):  # it was answered by the default model
            return error_response(400, f"model must be a string, got {json.dumps(model)[:40]}",
                                  "invalid_request_error", "invalid_model", param="model")
        try:
            entry, replica = await self.pool.acquire(model if isinstance(model, str) and model else None,
                                                     fallback=fallback)
        except PoolFull as exc:
            return error_response(503, exc.one_line(), "engine_error", "pool_full", headers={"Retry-After": "5"})
        except ConfigError as exc:
            return error_response(404, exc.one_line(), "invalid_request_error", "model_not_found", param="model")
        except EngineError as exc:
            return engine_unavailable(exc.one_line())
        lane = self.lane(replica)
        if lane is self.fallback:
            call.degraded = "fallback"
        elif replica.state() not in (ProcessState.READY, ProcessState.STARTING) and not lane.recycling:
            return error_response(503, f"the engine is {replica.state().value}; retry shortly", "engine_error",
                                  "engine_unavailable", headers={"Retry-After": "2"})
        body["model"] = call.model = entry.name
        call.engine = lane.name
        return lane

    def health(self, degradation: dict[str, Any]) -> JSONResponse:
        """Up while some model can serve (ready, or startable on demand and not failed; a server tiankong does not
        run counts while it is not marked unreachable — the marks are read, never probed here: a load balancer's
        /health stays fast whatever the upstreams do); the first engine's state, load and next restart attempt;
        every model's replicas."""
        first, replica = self.first, self.pool.entries[0].replicas[0]
        status = replica.state()
        retry = replica.next_retry_s() if status is not ProcessState.READY else None
        up = self.pool.available()
        crash = {"crash_loop": replica.crash_loop()} if replica.crash_loop() else {}
        return JSONResponse({"status": "ok" if up else "unavailable",
                             "engine": "unreachable" if replica.unreachable else status.value, **crash,
                             "model": self.pool.entries[0].name, "in_flight": first.admission.in_flight,
                             "queued": first.admission.waiting, "degradation": degradation,
                             "pool": self.pool.describe(), **({"next_retry_s": retry} if retry is not None else {})},
                            status_code=200 if up else 503)

    async def reprobe(self) -> None:
        """Try, all at once, each server tiankong does not run that is marked unreachable and was not tried in the
        last ``REPROBE_S`` (no user request is spent on it, and a load balancer that took this gateway out of
        rotation sends none that could). Only a connection that cannot be made marks it again; any answer, or a
        slow or odd one after connecting, marks it reachable (as a request would). At most ``REPROBE_TIMEOUT_S``."""
        due = [lane.replica for lane in self.engines() if lane.replica.unreachable and not lane.replica.open_circuit()]
        if due:
            async with httpx.AsyncClient(timeout=REPROBE_TIMEOUT_S) as http:
                await asyncio.gather(*(_probe(http, r) for r in due))

    async def reprobe_forever(self) -> None:
        """``reprobe`` every ``REPROBE_S`` until cancelled (nothing is sent while no replica is marked)."""
        while True:
            await asyncio.sleep(REPROBE_S)
            try:
                await self.reprobe()
            except Exception as exc:  # noqa: BLE001 — a probe that fails oddly must not end probing for good
                log.warning("probing the unreachable upstreams failed: %s: %s", type(exc).__name__, exc)


async def _probe(http: httpx.AsyncClient, replica: Replica) -> None:
    try:
        await http.get(replica.url() + ("/health" if replica.llama_server else "/v1/models"),
                       headers=replica.auth_headers())
    except (httpx.ConnectError, httpx.ConnectTimeout, httpx.ProxyError, httpx.UnsupportedProtocol) as exc:
        replica.mark_unreachable(f"{type(exc).__name__}: {exc}".rstrip(": "))
        return
    except httpx.HTTPError:
        pass  # it connected: slow or odd, as a request may find it, but there
    replica.mark_reachable()
