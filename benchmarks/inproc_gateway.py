"""The gateway app in an in-process uvicorn thread on a free loopback port (for benchmarks that need the engine's
object and the gateway side by side)."""

from __future__ import annotations

import threading
import time

import uvicorn

from tiankong.engine.process import free_port
from tiankong.gateway import GatewayState, create_app

Served = tuple[uvicorn.Server, threading.Thread, str]


def serve(state: GatewayState, timeout_s: float = 60.0) -> Served:
    """Start it; returns (server, thread, base URL)."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(state), host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout_s
    while not server.started:
        if time.monotonic() > deadline:
            raise TimeoutError("the gateway did not start")
        time.sleep(0.05)
    return server, thread, f"http://127.0.0.1:{port}"


def stop(served: Served) -> None:
    server, thread, _ = served
    server.should_exit = True
    thread.join(timeout=30)
