"""The engine pool (``tiankong.gateway.pool``): routing by model and alias, least-outstanding replicas, on-demand
start, the max-loaded cap and idle unloading — with real llama-servers, never more than one running at once.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from tiankong.engine import EngineBinary, EngineConfig, EngineProcess
from tiankong.errors import ConfigError
from tiankong.gateway.pool import EnginePool, PoolEntry, PoolFull, local_replica, remote_replica


def remote_entry(name: str, *urls: str, aliases: list[str] | None = None) -> PoolEntry:
    replicas = [remote_replica(f"{name}@{i}", url, max_in_flight=2) for i, url in enumerate(urls)]
    return PoolEntry(name, replicas, aliases=aliases or [])


def test_routing_by_name_alias_and_least_outstanding() -> None:
    async def scenario() -> None:
        pool = EnginePool([remote_entry("qwen:0.5b", "http://127.0.0.1:9001", "http://127.0.0.1:9002",
                                        aliases=["default"]),
                           remote_entry("smol:135m", "http://127.0.0.1:9003")])
        assert pool.resolve(None).name == "qwen:0.5b" and pool.resolve("default").name == "qwen:0.5b"
        assert pool.resolve("smol").name == "smol:135m"  # a name:tag prefix, like the single-engine gateway
        with pytest.raises(ConfigError, match="not served here"):
            pool.resolve("gpt-4")
        entry, first = await pool.acquire("qwen")
        assert first.name == "qwen:0.5b@0"  # a tie goes to the first replica
        await first.admission.acquire()  # one request in flight on replica 0
        _, second = await pool.acquire("default")
        assert second.name == "qwen:0.5b@1"
        await second.admission.acquire()
        await second.admission.acquire()  # replica 1 now has more outstanding than replica 0
        _, third = await pool.acquire("qwen:0.5b")
        assert third.name == "qwen:0.5b@0"
        assert [r["outstanding"] for r in pool.describe()[0]["replicas"]] == [1, 2]  # type: ignore[index]
        assert len(pool.handles()) == 3 and pool.loaded_entries() == []  # remote upstreams are never "loaded"

    asyncio.run(scenario())


def test_names_must_be_unique() -> None:
    with pytest.raises(ConfigError, match="unique"):
        EnginePool([remote_entry("a", "http://127.0.0.1:1", aliases=["b"]), remote_entry("b", "http://127.0.0.1:2")])


def small_engine(binary: EngineBinary, model: Path, alias: str) -> EngineProcess:
    return EngineProcess(EngineConfig(model=model, ctx=512, slots=1, threads=2, alias=alias), binary)


def running(pool: EnginePool) -> list[str]:
    return [r.handle.name for e in pool.entries for r in e.replicas if r.engine is not None and r.engine.alive()]


def test_on_demand_start_max_loaded_and_idle_ttl(engine_binary: EngineBinary, smol_path: Path) -> None:
    clock = [0.0]
    entries = [PoolEntry("alpha", [local_replica("alpha#0", small_engine(engine_binary, smol_path, "alpha"))],
                         idle_ttl_s=60.0),
               PoolEntry("beta", [local_replica("beta#0", small_engine(engine_binary, smol_path, "beta"))],
                         aliases=["b"], idle_ttl_s=60.0)]
    pool = EnginePool(entries, max_loaded=1, clock=lambda: clock[0])

    async def scenario() -> None:
        assert running(pool) == []  # nothing starts before it is asked for
        _, alpha = await pool.acquire("alpha")
        assert running(pool) == ["alpha#0"] and alpha.ready()
        answer = httpx.post(alpha.url() + "/v1/completions", json={"prompt": "1, 2, 3,", "max_tokens": 2}, timeout=120)
        assert answer.status_code == 200

        await alpha.admission.acquire()  # alpha busy: the cap forbids starting beta
        with pytest.raises(PoolFull) as full:
            await pool.acquire("b")
        assert full.value.http_status == 503 and running(pool) == ["alpha#0"]
        alpha.admission.release()

        clock[0] = 10.0
        _, beta = await pool.acquire("b")  # alpha idle now: stopped to make room, then beta started
        assert running(pool) == ["beta#0"] and beta.ready()
        assert [e.name for e in pool.loaded_entries()] == ["beta"]

        assert pool.reap(now=69.0) == []  # used at 10 s, TTL 60 s
        assert pool.reap(now=70.0) == ["beta"] and running(pool) == []
        _, again = await pool.acquire("alpha")  # started again on demand
        assert running(pool) == ["alpha#0"] and again.ready()

    try:
        asyncio.run(scenario())
    finally:
        pool.stop_all()
    assert running(pool) == []
