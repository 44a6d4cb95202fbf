"""The dashboard: ``GET /ui`` (the page) and ``GET /ui/stats`` (the JSON it polls), plus the gauge sampler.

The page itself is public (it holds no data); ``/ui/stats`` needs the API key when keys are configured (the
page asks for it and sends it as a bearer token). Engine gauges are sampled once a second by a background
task so the charts show queue depth and busy slots between polls too. The page keeps a key in the tab's
``sessionStorage`` only, and is sent with a Content-Security-Policy that runs its own inline script alone (by
its sha256), no framing and no referrer (``ui_headers``).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import re
import time
from collections.abc import Callable
from typing import Any

import httpx

from .admission import Lane
from .metrics import GatewayMetrics, process_rss_bytes

SAMPLE_EVERY_S = 1.0


def ui_headers(page: str) -> dict[str, str]:
    """The security headers of ``/ui``: only the page's own inline scripts run (their sha256), it talks only to
    this origin, cannot be framed, and sends no referrer."""
    hashes = " ".join("'sha256-" + base64.b64encode(hashlib.sha256(body.encode()).digest()).decode() + "'"
                      for body in re.findall(r"<script>(.*?)</script>", page, flags=re.S))
    csp = (f"default-src 'none'; script-src {hashes or chr(39) + 'none' + chr(39)}; style-src 'unsafe-inline'; "
           "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
    return {"Content-Security-Policy": csp, "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer",
            "X-Content-Type-Options": "nosniff"}


def sample_engines(metrics: GatewayMetrics, engines: Callable[[], list[Lane]]) -> None:
    handles = engines()
    metrics.live.sample(queue=sum(h.admission.waiting for h in handles),
                        busy=sum(h.admission.in_flight for h in handles))


async def sample_forever(metrics: GatewayMetrics, engines: Callable[[], list[Lane]],
                         interval_s: float = SAMPLE_EVERY_S, tick: Callable[[], object] | None = None) -> None:
    """Sample the engines' queue depth and busy count (and call ``tick``) until cancelled."""
    while True:
        sample_engines(metrics, engines)
        if tick is not None:
            tick()
        await asyncio.sleep(interval_s)


def engine_row(handle: Lane, models: list[str], busy: tuple[int, int] | None) -> dict[str, Any]:
    admission = handle.admission
    return {
        "name": handle.name, "models": models, "state": handle.replica.state().value,
        "in_flight": admission.in_flight, "limit": admission.limit,
        "queue": admission.waiting, "queue_capacity": admission.queue_size,
        "busy_slots": busy[0] if busy else None, "slots": busy[1] if busy else None,
        "rss_bytes": process_rss_bytes(handle.replica.pid()), "restarts": handle.replica.restarts(),
    }


async def stats_payload(metrics: GatewayMetrics, engines: list[tuple[Lane, list[str]]],
                        http: httpx.AsyncClient, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Everything the page shows, as JSON."""
    with contextlib.suppress(Exception):  # a slow /slots only leaves the busy column empty
        await metrics.engines.refresh_slots(http)
    sample_engines(metrics, lambda: [handle for handle, _ in engines])
    live = metrics.live
    rows = [engine_row(handle, models, metrics.engines.busy.get(handle.name)) for handle, models in engines]
    ready = any(handle.replica.ready() for handle, _ in engines)
    return {
        "status": "ok" if ready else "unavailable",
        "model": engines[0][1][0] if engines and engines[0][1] else "-",
        "time": time.time(),
        "uptime_s": live.clock() - live.started,
        "totals": live.totals(),
        "window": live.window(),
        "series": live.series(),
        "engines": rows,
        **(extra or {}),
    }
