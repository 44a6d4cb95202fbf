"""``tiankong serve``: the engines of the config (``engine.pool.engine_pool``) behind the gateway, stopped
together."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from collections.abc import Callable
from typing import Any

import uvicorn

from ..config import TiankongConfig
from ..engine.pool import EnginePool, engine_pool, is_loopback, port_in_use
from ..engine.ports import free_port
from ..errors import ConfigError, PortInUse
from .app import GatewayState, create_app
from .cascade import check_cascade
from .keys import as_hash
from .listen import server_config


def key_hashes(keys: list[str]) -> list[str]:
    return [as_hash(key) for key in keys]


def check_bind(config: TiankongConfig) -> None:
    server = config.server
    if not is_loopback(server.host) and not server.api_keys and not server.keys:
        raise ConfigError(
            f"refusing to bind {server.host} without an API key",
            hint="set TIANKONG_API_KEY or --api-key (or server.api_keys in the config), or bind 127.0.0.1",
        )
    if server.port and port_in_use(server.host, server.port):
        raise PortInUse(server.host, server.port)


GAVE_UP = 3  # exit status of `tiankong serve` when the engine's restart budget is spent (after_restart_budget=exit)
_gave_up: list[bool] = []


def stop_serving() -> None:
    """The engine gave up (``after_restart_budget = "exit"``): stop the gateway, so the process exits non-zero."""
    _gave_up.append(True)
    os.kill(os.getpid(), signal.SIGTERM)  # uvicorn shuts down gracefully on SIGTERM


def gateway_state(config: TiankongConfig, pool: EnginePool) -> GatewayState:
    """The ``[server]`` settings passed whole, with the pool and the sections the gateway reads."""
    return GatewayState(model_name=pool.entries[0].name, pool=pool, server=config.server,
                        degradation=config.degradation, batches=config.batches, cascade=config.cascade,
                        route=config.route)


def run_server(app: Any, config: TiankongConfig) -> None:
    server = config.server
    configure_logging(server.log_prompts)
    gateway = uvicorn.Server(server_config(app, server.host, server.port, header_timeout_s=server.header_timeout_s,
                                           log_level="warning", access_log=server.log_prompts,
                                           timeout_graceful_shutdown=5))
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is the normal way to stop (as uvicorn.run treats it)
        gateway.run()


class _CutOffAtExit(logging.Filter):
    """A second Ctrl-C makes uvicorn skip the lifespan's shutdown: the lifespan task ends cancelled, and Starlette
    hands uvicorn its traceback, logged as an error. Nothing failed (``serve`` stops the engines on every way out):
    that record is dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage().rstrip()
        return not (text.startswith("Traceback") and text.endswith(("CancelledError", "KeyboardInterrupt")))


def configure_logging(log_prompts: bool) -> None:
    """The gateway's own warnings (slow clients, abandoned bodies) on stderr; prompts only with ``log_prompts``."""
    uvicorn_errors = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, _CutOffAtExit) for f in uvicorn_errors.filters):
        uvicorn_errors.addFilter(_CutOffAtExit())
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(message)s"))
    gateway = logging.getLogger("tiankong.gateway")
    gateway.addHandler(handler)
    gateway.setLevel(logging.WARNING)
    if log_prompts:
        prompts = logging.getLogger("tiankong.prompts")
        prompts.addHandler(handler)
        prompts.setLevel(logging.INFO)


def serve(config: TiankongConfig, log: Callable[[str], None] = print) -> None:
    """Run until interrupted; every engine is stopped on every way out. ``server.port = 0``: a free port, chosen
    here so that the address printed is the one served."""
    check_bind(config)
    if config.server.port == 0:
        config.server.port = free_port(config.server.host)
    pool = engine_pool(config, log, on_give_up=stop_serving)
    settings = config.engine
    # before any engine starts: a [cascade] naming no pool model was refused only after the engine was up
    check_cascade(config.cascade if config.cascade.enabled else None, pool)
    try:
        pool.start_eager()  # the single [engine]; [pool] models start on their first request
        for replica in pool.replicas():
            if replica.engine is not None and replica.loaded():
                engine = replica.engine
                sized = "sized by the memory plan, engine.ctx sets it" if settings.ctx is None else "engine.ctx"
                log(f"engine ready: {replica.name} ({engine.ready_seconds:.1f} s, pid {engine.pid}, {engine.url}; "
                    f"ctx {engine.config.ctx} = {engine.config.ctx // engine.config.slots} tokens per slot × "
                    f"{engine.config.slots}, {sized})")
        pool.watch(interval_s=settings.wedge_check_s, timeout_s=settings.wedge_probe_timeout_s,
                   failures=settings.wedge_failures, log=log)
        state = gateway_state(config, pool)
        if config.pool.models:
            detail = f"models: {', '.join(pool.names())}; engines start on first request"
        else:
            detail = f"{state.engine.admission.limit} in flight, queue {state.engine.admission.queue_size}"
        host = config.server.host
        address = f"http://{f'[{host}]' if ':' in host else host}:{config.server.port}"
        log(f"gateway on {address} (dashboard {address}/ui; Ctrl-C stops it and the engines); {detail}")
        run_server(create_app(state), config)
    finally:
        pool.stop_all()
        log("engines stopped")
    if _gave_up:
        raise SystemExit(GAVE_UP)
