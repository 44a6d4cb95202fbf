"""``tiankong serve``: a managed llama-server behind the gateway, stopped together."""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import uvicorn

from ..config import TiankongConfig, key_from_env
from ..engine import EngineConfig, EngineProcess
from ..engine.process import port_in_use
from ..engine.rpc import is_loopback
from ..engine.settings import speed_kwargs
from ..errors import ConfigError, PortInUse
from ..models import resolve_installed
from .app import GatewayState, create_app
from .keys import ApiKey, as_hash
from .listen import server_config
from .pool import EnginePool, PoolEntry, local_replica, remote_replica
from .supervise import WedgeWatch


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


def engine_key() -> str:
    """A random key per engine that only this gateway knows: a local user cannot bypass the gateway's keys,
    rate limits and validation by calling the engine's port directly."""
    return secrets.token_urlsafe(32)


def start_engine(config: TiankongConfig, log: Callable[[str], None] = print) -> tuple[EngineProcess, str]:
    settings = config.engine
    record = resolve_installed(settings.model)
    engine_config = EngineConfig(
        model=record.path, ctx=settings.ctx, slots=settings.slots, kv_type=settings.kv_type,
        cache_ram_mib=settings.cache_ram_mib, alias=record.name, extra_args=list(settings.extra_args),
        embeddings=settings.embeddings, pooling="none", api_key=engine_key(), **speed_kwargs(settings),
    )
    if settings.threads:
        engine_config.threads = settings.threads
    engine = EngineProcess(
        engine_config, settings.llama_server, startup_timeout_s=settings.startup_timeout_s,
        restart_after_requests=settings.restart_after_requests, log=log, max_restarts=settings.max_restarts,
        restart_window_s=settings.restart_window_s, after_budget=settings.after_restart_budget,
        on_give_up=stop_serving,
    )
    return engine.start(), record.name


GAVE_UP = 3  # exit status of `tiankong serve` when the engine's restart budget is spent (after_restart_budget=exit)
_gave_up: list[bool] = []


def stop_serving() -> None:
    """The engine gave up (``after_restart_budget = "exit"``): stop the gateway, so the process exits non-zero."""
    _gave_up.append(True)
    os.kill(os.getpid(), signal.SIGTERM)  # uvicorn shuts down gracefully on SIGTERM


def gateway_state(config: TiankongConfig, engine: EngineProcess, name: str) -> GatewayState:
    server = config.server
    return GatewayState.for_engine(
        engine, name, api_key_hashes=key_hashes(server.api_keys), request_timeout_s=server.request_timeout_s,
        api_keys=[ApiKey(as_hash(k.key), k.name, k.rpm) for k in server.keys], key_rpm=server.key_rpm,
        max_in_flight=server.max_in_flight, queue_size=server.queue_size, keepalive_s=server.keepalive_s,
        adapter_batching=server.adapter_batching, assemble_min_tokens=server.assemble_min_tokens,
        stream_idle_timeout_s=server.stream_idle_timeout_s, engine_retry_wait_s=server.engine_retry_wait_s,
        max_body_bytes=server.max_body_bytes, degradation=config.degradation, body_timeout_s=server.body_timeout_s,
        log_prompts=server.log_prompts,
    )


def adapter_files(names: list[str], base: Path) -> list[Path]:
    """LoRA adapters by registry name or path, checked against the base model now (not at the first request)."""
    if not names:
        return []
    from ..lora import adapter_file  # gguf/numpy only when adapters are configured

    return [adapter_file(name, base) for name in names]


def build_pool(config: TiankongConfig, log: Callable[[str], None] = print) -> EnginePool:
    """The pool from ``[pool]``: local engines are created here, started on their first request."""
    entries = []
    for spec in config.pool.models:
        if spec.url is not None:
            api_key = key_from_env(spec.api_key_env, f"pool model {spec.name}")
            replicas = [remote_replica(f"{spec.name}@upstream", spec.url, spec.max_in_flight, api_key=api_key)]
        else:
            record = resolve_installed(spec.model or "")
            adapters = adapter_files(spec.lora, record.path)
            replicas = []
            for index in range(spec.replicas):
                engine_config = EngineConfig(model=record.path, ctx=spec.ctx, slots=spec.slots, kv_type=spec.kv_type,
                                             alias=spec.name, lora=adapters, api_key=engine_key())
                if spec.threads:
                    engine_config.threads = spec.threads
                engine = EngineProcess(engine_config, config.engine.llama_server,
                                       startup_timeout_s=config.engine.startup_timeout_s,
                                       restart_after_requests=spec.restart_after_requests, log=log)
                replicas.append(local_replica(f"{spec.name}#{index}", engine))
        entries.append(PoolEntry(spec.name, replicas, aliases=list(spec.aliases), idle_ttl_s=spec.idle_ttl_s))
    return EnginePool(entries, max_loaded=config.pool.max_loaded)


def pool_state(config: TiankongConfig, pool: EnginePool) -> GatewayState:
    server = config.server
    return GatewayState(
        upstream_url="", model_name=pool.entries[0].name, pool=pool, api_key_hashes=key_hashes(server.api_keys),
        api_keys=[ApiKey(as_hash(k.key), k.name, k.rpm) for k in server.keys], key_rpm=server.key_rpm,
        request_timeout_s=server.request_timeout_s, keepalive_s=server.keepalive_s,
        stream_idle_timeout_s=server.stream_idle_timeout_s, engine_retry_wait_s=server.engine_retry_wait_s,
        max_body_bytes=server.max_body_bytes, degradation=config.degradation,
        assemble_min_tokens=server.assemble_min_tokens, body_timeout_s=server.body_timeout_s,
        log_prompts=server.log_prompts,
    )


def serve_pool(config: TiankongConfig, log: Callable[[str], None] = print) -> None:
    pool = build_pool(config, log)
    settings = config.engine
    watches = [WedgeWatch(r.engine, interval_s=settings.wedge_check_s, timeout_s=settings.wedge_probe_timeout_s,
                          failures=settings.wedge_failures, log=log)
               for e in pool.entries for r in e.replicas if r.engine is not None and settings.wedge_check_s > 0]
    for watch in watches:  # a watch skips its engine while it is not running
        watch.start()
    try:
        log(f"gateway on http://{config.server.host}:{config.server.port} (Ctrl-C stops it and the engines); "
            f"models: {', '.join(pool.names())}; engines start on first request")
        run_server(create_app(pool_state(config, pool)), config)
    finally:
        for watch in watches:
            watch.stop()
        pool.stop_all()
        log("engines stopped")


def run_server(app: Any, config: TiankongConfig) -> None:
    server = config.server
    configure_logging(server.log_prompts)
    gateway = uvicorn.Server(server_config(app, server.host, server.port, header_timeout_s=server.header_timeout_s,
                                           log_level="warning", access_log=server.log_prompts,
                                           timeout_graceful_shutdown=5))
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is the normal way to stop (as uvicorn.run treats it)
        gateway.run()


def configure_logging(log_prompts: bool) -> None:
    """The gateway's own warnings (slow clients, abandoned bodies) on stderr; prompts only with ``log_prompts``."""
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
    """Run until interrupted; the engine is stopped on every way out."""
    check_bind(config)
    if config.pool.models:
        serve_pool(config, log)
        return
    engine, name = start_engine(config, log)
    settings = config.engine
    watch = WedgeWatch(engine, interval_s=settings.wedge_check_s, timeout_s=settings.wedge_probe_timeout_s,
                       failures=settings.wedge_failures, log=log)
    try:
        log(f"engine ready: {name} ({engine.ready_seconds:.1f} s, pid {engine.pid}, {engine.url})")
        if settings.wedge_check_s > 0:
            watch.start()
        state = gateway_state(config, engine, name)
        admission = state.engine.admission
        log(f"gateway on http://{config.server.host}:{config.server.port} (Ctrl-C stops both); "
            f"{admission.limit} in flight, queue {admission.queue_size}")
        run_server(create_app(state), config)
    finally:
        if settings.wedge_check_s > 0:
            watch.stop()
        engine.stop()
        log("engine stopped")
    if _gave_up:
        raise SystemExit(GAVE_UP)
