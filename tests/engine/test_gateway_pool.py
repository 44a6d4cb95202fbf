"""The engine pool (``tiankong.engine.pool``, with the gateway's ``ModelRouter``): routing by model and alias,
least-outstanding replicas, on-demand start, the max-loaded cap and idle unloading — with real llama-servers,
never more than one running at once.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_gateway import start_serve, stop_serve
from test_gateway_admission import LONG, metrics, post, serve_app, total

from conftest import pid_alive, wait_until
from helpers.cloud_like import CloudLike, cloud_like
from tiankong.config import load_config
from tiankong.engine import EngineBinary, EngineConfig, EngineProcess
from tiankong.engine.pool import EnginePool, PoolEntry, PoolFull, Replica, engine_pool
from tiankong.errors import ConfigError, TiankongError
from tiankong.gateway import GatewayState
from tiankong.gateway.router import ModelRouter
from tiankong.models import TEST_MODEL

SHORT = {"messages": [{"role": "user", "content": "Say OK."}], "max_tokens": 2, "temperature": 0}


def remote_replica(name: str, url: str, max_in_flight: int = 4) -> Replica:
    return Replica(name, remote_url=url, max_in_flight=max_in_flight)


def local_replica(name: str, engine: EngineProcess) -> Replica:
    return Replica(name, engine)


def remote_entry(name: str, *urls: str, aliases: list[str] | None = None) -> PoolEntry:
    replicas = [remote_replica(f"{name}@{i}", url, max_in_flight=2) for i, url in enumerate(urls)]
    return PoolEntry(name, replicas, aliases=aliases or [])


def test_routing_by_name_alias_and_least_outstanding() -> None:
    async def scenario() -> None:
        pool = EnginePool([remote_entry("qwen:0.5b", "http://127.0.0.1:9001", "http://127.0.0.1:9002",
                                        aliases=["default"]),
                           remote_entry("smol:135m", "http://127.0.0.1:9003")])
        router = ModelRouter(pool)  # the gateway's admission per replica is what the pool balances on
        assert pool.resolve(None).name == "qwen:0.5b" and pool.resolve("default").name == "qwen:0.5b"
        assert pool.resolve("smol").name == "smol:135m"  # a name:tag prefix, like the single-engine gateway
        with pytest.raises(ConfigError, match="not served here"):
            pool.resolve("gpt-4")
        entry, first = await pool.acquire("qwen")
        assert first.name == "qwen:0.5b@0"  # a tie goes to the first replica
        await router.handles[first.name].admission.acquire()  # one request in flight on replica 0
        _, second = await pool.acquire("default")
        assert second.name == "qwen:0.5b@1"
        await router.handles[second.name].admission.acquire()
        await router.handles[second.name].admission.acquire()  # replica 1 now has more outstanding than 0
        _, third = await pool.acquire("qwen:0.5b")
        assert third.name == "qwen:0.5b@0"
        assert [r["outstanding"] for r in pool.describe()[0]["replicas"]] == [1, 2]  # type: ignore[index]
        assert len(pool.replicas()) == 3 and pool.loaded_entries() == []  # remote upstreams are never "loaded"

    asyncio.run(scenario())


def test_names_must_be_unique() -> None:
    with pytest.raises(ConfigError, match="unique"):
        EnginePool([remote_entry("a", "http://127.0.0.1:1", aliases=["b"]), remote_entry("b", "http://127.0.0.1:2")])


def small_engine(binary: EngineBinary, model: Path, alias: str) -> EngineProcess:
    return EngineProcess(EngineConfig(model=model, ctx=512, slots=1, threads=2, alias=alias), binary)


def running(pool: EnginePool) -> list[str]:
    return [r.name for e in pool.entries for r in e.replicas if r.engine is not None and r.engine.alive()]


def test_on_demand_start_max_loaded_and_idle_ttl(engine_binary: EngineBinary, smol_path: Path) -> None:
    clock = [0.0]
    entries = [PoolEntry("alpha", [local_replica("alpha#0", small_engine(engine_binary, smol_path, "alpha"))],
                         idle_ttl_s=60.0),
               PoolEntry("beta", [local_replica("beta#0", small_engine(engine_binary, smol_path, "beta"))],
                         aliases=["b"], idle_ttl_s=60.0)]
    pool = EnginePool(entries, max_loaded=1, clock=lambda: clock[0])
    router = ModelRouter(pool)

    async def scenario() -> None:
        assert running(pool) == []  # nothing starts before it is asked for
        _, alpha = await pool.acquire("alpha")
        assert running(pool) == ["alpha#0"] and alpha.state() == "ready"
        answer = httpx.post(alpha.url() + "/v1/completions", json={"prompt": "1, 2, 3,", "max_tokens": 2}, timeout=120)
        assert answer.status_code == 200

        await router.handles[alpha.name].admission.acquire()  # alpha busy: the cap forbids starting beta
        with pytest.raises(PoolFull) as full:
            await pool.acquire("b")
        assert full.value.http_status == 503 and running(pool) == ["alpha#0"]
        router.handles[alpha.name].admission.release()

        clock[0] = 10.0
        _, beta = await pool.acquire("b")  # alpha idle now: stopped to make room, then beta started
        assert running(pool) == ["beta#0"] and beta.state() == "ready"
        assert [e.name for e in pool.loaded_entries()] == ["beta"]

        assert pool.reap(now=69.0) == []  # used at 10 s, TTL 60 s
        assert pool.reap(now=70.0) == ["beta"] and running(pool) == []
        _, again = await pool.acquire("alpha")  # started again on demand
        assert running(pool) == ["alpha#0"] and again.state() == "ready"

    try:
        asyncio.run(scenario())
    finally:
        pool.stop_all()
    assert running(pool) == []


# --- through the gateway (tiankong serve with [pool]) -----------------------------------------------------------


def pool_health(url: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{url}/health", timeout=30)
    assert answer.status_code == 200
    pool: list[dict[str, Any]] = answer.json()["pool"]
    return pool


def test_gateway_starts_a_local_engine_on_demand_and_unloads_it_when_idle(engine_binary: EngineBinary,
                                                                          smol_path: Path) -> None:
    pool = EnginePool([PoolEntry("smol", [local_replica("smol#0", small_engine(engine_binary, smol_path, "smol"))],
                                 aliases=["tiny"], idle_ttl_s=1.0)])
    try:
        with serve_app(GatewayState(upstream_url="", model_name="smol", pool=pool)) as url:
            assert pool_health(url)[0]["loaded"] is False and running(pool) == []
            answer = post(url, {"model": "tiny", "prompt": "1, 2, 3,", "max_tokens": 2}, "/v1/completions")
            assert answer.status_code == 200, answer.text
            assert pool_health(url)[0]["loaded"] is True
            assert wait_until(lambda: pool_health(url)[0]["loaded"] is False and running(pool) == [], 60)  # idle TTL
            assert post(url, {**SHORT, "model": "smol"}).status_code == 200  # started again
            assert total(metrics(url), "tiankong_requests_total", model="smol", status="200") == 2
    finally:
        pool.stop_all()
    assert running(pool) == []


def child_engines(pid: int) -> list[int]:
    found = subprocess.run(["pgrep", "-P", str(pid), "llama-server"], capture_output=True, text=True, check=False)
    return [int(p) for p in found.stdout.split()]


def test_tiankong_serve_runs_a_pool_from_the_config(tmp_path: Path) -> None:
    config_file = tmp_path / "pool.toml"
    config_file.write_text(f'[[pool.models]]\nname = "smol"\naliases = ["tiny"]\nmodel = "{TEST_MODEL}"\n'
                           'ctx = 512\nslots = 1\nthreads = 2\n', encoding="utf-8")
    served = start_serve("--config", str(config_file))
    engines: list[int] = []
    try:
        assert "engines start on first request" in "".join(served.log)
        assert pool_health(served.url)[0]["loaded"] is False and child_engines(served.proc.pid) == []
        answer = httpx.post(f"{served.url}/v1/chat/completions", json={**SHORT, "model": "tiny"}, timeout=300)
        assert answer.status_code == 200, answer.text
        assert pool_health(served.url)[0]["loaded"] is True
        engines = child_engines(served.proc.pid)
        assert len(engines) == 1
    finally:
        code = stop_serve(served)
    assert code == 0
    assert wait_until(lambda: not any(pid_alive(pid) for pid in engines), 30)


def test_gateway_routes_by_model_to_the_least_busy_replica(smol_engine: EngineProcess) -> None:
    # three replicas in two models, all the same llama-server: what is checked is the routing
    alpha = [remote_replica(f"alpha@{i}", smol_engine.url, 1) for i in range(2)]
    pool = EnginePool([
        PoolEntry("alpha", alpha, aliases=["a"]),
        PoolEntry("beta", [remote_replica("beta@0", smol_engine.url, 2)]),
    ])
    with serve_app(GatewayState(upstream_url="", model_name="alpha", pool=pool)) as url:
        names = [m["id"] for m in httpx.get(f"{url}/v1/models", timeout=10).json()["data"]]
        assert names == ["alpha", "a", "beta"]
        assert post(url, {**SHORT, "model": "beta"}).status_code == 200
        unknown = post(url, {**SHORT, "model": "gpt-4"})
        assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "model_not_found"
        with ThreadPoolExecutor(1) as background:
            hog = background.submit(post, url, {**LONG, "model": "a", "max_tokens": 48})
            assert wait_until(lambda: pool_health(url)[0]["replicas"][0]["outstanding"] == 1, 60)
            assert post(url, {**SHORT, "model": "alpha"}).status_code == 200  # alpha@0 is busy: alpha@1
            assert hog.result().status_code == 200
        samples = metrics(url)
        for engine in ("alpha@0", "alpha@1", "beta@0"):
            assert total(samples, "tiankong_queue_wait_seconds_count", engine=engine) == 1, engine
        assert total(samples, "tiankong_requests_total", model="beta", status="200") == 1
        stats = httpx.get(f"{url}/ui/stats", timeout=30).json()
        assert [e["name"] for e in stats["engines"]] == ["alpha@0", "alpha@1", "beta@0"]


def test_pool_config_builds_without_starting_anything(tmp_path: Path) -> None:
    config_file = tmp_path / "pool.toml"
    config_file.write_text(f"""
[pool]
max_loaded = 1

[[pool.models]]
name = "smol"
aliases = ["tiny"]
model = "{TEST_MODEL}"
replicas = 2
ctx = 512
slots = 1
threads = 2
idle_ttl_s = 300.0

[[pool.models]]
name = "remote"
url = "http://127.0.0.1:9/"
max_in_flight = 3
""", encoding="utf-8")
    config = load_config(config_file)
    pool = engine_pool(config)
    handles = ModelRouter(pool).all()
    assert pool.names() == ["smol", "tiny", "remote"] and pool.max_loaded == 1
    assert [h.name for h in handles] == ["smol#0", "smol#1", "remote@upstream"]
    assert running(pool) == [] and pool.loaded_entries() == []
    assert handles[2].replica.url() == "http://127.0.0.1:9" and handles[2].admission.limit == 3
    bad = tmp_path / "bad.toml"
    bad.write_text('[[pool.models]]\nname = "x"\nmodel = "m"\nurl = "http://127.0.0.1:9"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match="pool.models.0"):
        load_config(bad)


# --- remote upstreams with an API key; recycling of pool engines -----------------------------------------------


def test_remote_upstream_gets_its_api_key_from_the_environment(engine_binary: EngineBinary, smol_path: Path,
                                                             tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    keyed = EngineProcess(EngineConfig(model=smol_path, ctx=512, slots=1, threads=2, alias="keyed",
                                       extra_args=["--api-key", "upstream-secret-1"]), engine_binary)
    keyed.start()
    try:
        assert httpx.post(f"{keyed.url}/v1/chat/completions", json=SHORT, timeout=60).status_code == 401
        config_file = tmp_path / "pool.toml"
        config_file.write_text(f'[[pool.models]]\nname = "far"\nurl = "{keyed.url}"\napi_key_env = "FAR_KEY"\n'
                               f'[[pool.models]]\nname = "nokey"\nurl = "{keyed.url}"\n', encoding="utf-8")
        config = load_config(config_file)
        monkeypatch.delenv("FAR_KEY", raising=False)
        with pytest.raises(ConfigError, match="FAR_KEY") as missing:
            engine_pool(config)
        assert "export FAR_KEY" in (missing.value.hint or "")
        monkeypatch.setenv("FAR_KEY", "upstream-secret-1")
        pool = engine_pool(config)
        assert "upstream-secret-1" not in repr(pool.replicas()[0])  # the key is never shown
        assert "upstream-secret-1" not in repr(ModelRouter(pool).all()[0])
        with serve_app(GatewayState(upstream_url="", model_name="far", pool=pool)) as url:
            good = post(url, {**SHORT, "model": "far"})
            assert good.status_code == 200, good.text
            assert good.json()["choices"][0]["message"]["role"] == "assistant"
            streamed = httpx.post(f"{url}/v1/chat/completions", json={**SHORT, "model": "far", "stream": True},
                                  timeout=60)
            assert streamed.status_code == 200 and "data: [DONE]" in streamed.text
            refused = post(url, {**SHORT, "model": "nokey"})  # same server, no key configured
            # the upstream refused the gateway's credentials, not the client's key: 502 upstream_auth naming the fix
            assert refused.status_code == 502 and refused.json()["error"]["code"] == "upstream_auth", refused.text
            assert "api_key_env" in refused.json()["error"]["message"]
    finally:
        keyed.stop()


def test_api_key_env_is_only_for_remote_upstreams(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(f'[[pool.models]]\nname = "x"\nmodel = "{TEST_MODEL}"\napi_key_env = "K"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match="api_key_env"):
        load_config(bad)
    lower = tmp_path / "lower.toml"
    lower.write_text('[[pool.models]]\nname = "x"\nurl = "http://127.0.0.1:9"\napi_key_env = "not a name"\n',
                     encoding="utf-8")
    with pytest.raises(ConfigError, match="api_key_env"):
        load_config(lower)


def test_pool_engine_restarts_after_n_requests(tmp_path: Path) -> None:
    config_file = tmp_path / "pool.toml"
    config_file.write_text(f'[[pool.models]]\nname = "smol"\nmodel = "{TEST_MODEL}"\nctx = 512\nslots = 1\n'
                           'threads = 2\nrestart_after_requests = 2\n', encoding="utf-8")
    pool = engine_pool(load_config(config_file))
    engine = pool.entries[0].replicas[0].engine
    assert engine is not None
    try:
        with serve_app(GatewayState(upstream_url="", model_name="smol", pool=pool)) as url:
            assert post(url, {**SHORT, "model": "smol"}).status_code == 200
            first = engine.pid
            assert post(url, {**SHORT, "model": "smol"}).status_code == 200  # the 2nd: a planned restart follows
            assert wait_until(lambda: engine.pid != first and engine.state.value == "ready", 120)
            assert post(url, {**SHORT, "model": "smol"}).status_code == 200  # served by the new engine
            assert engine.restarts >= 1 and engine.requests_since_start == 1
    finally:
        pool.stop_all()
    assert running(pool) == []


def test_pool_models_load_lora_adapters_checked_against_their_base(tmp_path: Path, smol_path: Path) -> None:
    from tiankong.lora.synthetic import write_random_lora

    adapter = write_random_lora(smol_path, tmp_path / "noise.gguf")
    config_file = tmp_path / "pool.toml"
    config_file.write_text(f'[[pool.models]]\nname = "smol"\nmodel = "{TEST_MODEL}"\nlora = ["{adapter}"]\n',
                           encoding="utf-8")
    pool = engine_pool(load_config(config_file))
    engine = pool.entries[0].replicas[0].engine
    assert engine is not None and engine.config.lora == [adapter] and running(pool) == []
    missing = tmp_path / "missing.toml"
    missing.write_text(f'[[pool.models]]\nname = "smol"\nmodel = "{TEST_MODEL}"\nlora = ["no-such-adapter"]\n',
                       encoding="utf-8")
    with pytest.raises(TiankongError, match="no-such-adapter"):
        engine_pool(load_config(missing))  # at start-up, not at the first request
    remote = tmp_path / "remote.toml"
    remote.write_text('[[pool.models]]\nname = "r"\nurl = "http://127.0.0.1:9"\nlora = ["x"]\n', encoding="utf-8")
    with pytest.raises(ConfigError, match="lora"):
        load_config(remote)


# --- structured output and tasks through a remote upstream ---------------------------------------------------


def test_structured_requests_to_a_remote_upstream_name_the_model() -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    with cloud_like() as upstream:
        pool = EnginePool([PoolEntry("far", [remote_replica("far@0", upstream, 2)], aliases=["f"])])
        with serve_app(GatewayState(upstream_url="", model_name="far", pool=pool)) as url:
            chat = post(url, {"model": "f", "messages": [{"role": "user", "content": "Where is the Louvre?"}],
                              "response_format": {"type": "json_schema", "json_schema": {"schema": schema}}})
            assert chat.status_code == 200, chat.text
            assert json.loads(chat.json()["choices"][0]["message"]["content"]) == {"city": "Paris"}
            extract = httpx.post(f"{url}/v1/tasks/extract", json={"model": "far", "text": "I live in Paris.",
                                                                   "schema": schema}, timeout=30)
            assert extract.status_code == 200, extract.text
            assert extract.json()["data"] == {"city": "Paris"}
    assert [body["model"] for body in CloudLike.seen] == ["far", "far"]  # the entry's name, also for an alias


def test_pool_health_is_unavailable_once_every_replica_has_failed(engine_binary: EngineBinary,
                                                                  tmp_path: Path) -> None:
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + b"\0" * 64)  # not a loadable model: the engine fails to start
    engine = small_engine(engine_binary, broken, "broken")
    pool = EnginePool([PoolEntry("broken", [local_replica("broken#0", engine)])])
    try:
        with serve_app(GatewayState(upstream_url="", model_name="broken", pool=pool)) as url:
            assert httpx.get(f"{url}/health", timeout=30).status_code == 200  # not started yet: not failed
            answer = post(url, {"model": "broken", "prompt": "1, 2,", "max_tokens": 2}, "/v1/completions")
            assert answer.status_code == 503, answer.text
            health = httpx.get(f"{url}/health", timeout=30)
            assert health.status_code == 503 and health.json()["status"] == "unavailable"
            assert health.json()["pool"][0]["replicas"][0]["state"] == "failed"
    finally:
        pool.stop_all()


def test_pool_models_take_every_engine_key_the_single_engine_takes(tmp_path: Path) -> None:
    config_file = tmp_path / "pool.toml"
    config_file.write_text(f'[[pool.models]]\nname = "smol"\nmodel = "{TEST_MODEL}"\ncache_ram_mib = 64\n'
                           'extra_args = ["--no-warmup"]\nembeddings = true\nspec_type = "ngram-simple"\n'
                           'spec_draft_n_max = 8\n', encoding="utf-8")
    pooled = tmp_path / "pooled.toml"
    pooled.write_text('[engine]\nembeddings = true\npooling = "mean"\n', encoding="utf-8")
    single = engine_pool(load_config(pooled)).replicas()[0].engine
    assert single is not None and single.config.pooling == "mean"
    engine = engine_pool(load_config(config_file)).entries[0].replicas[0].engine
    assert engine is not None
    argv = engine.config.to_argv(Path("llama-server"))
    assert argv[argv.index("--cache-ram") + 1] == "64" and "--no-warmup" in argv
    assert "--embeddings" in argv and argv[argv.index("--spec-type") + 1] == "ngram-simple"
    assert argv[argv.index("--pooling") + 1] == "none"  # per-token vectors: tiankong pools them
    assert engine.config.api_key  # the gateway's own key, like the single engine's
    remote = tmp_path / "remote.toml"
    remote.write_text('[[pool.models]]\nname = "r"\nurl = "http://127.0.0.1:9"\nctx = 512\n', encoding="utf-8")
    with pytest.raises(ConfigError, match="ctx shape local engines"):
        load_config(remote)


def test_the_engine_key_is_random_unless_chosen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tiankong.engine.pool import engine_key

    monkeypatch.delenv("TIANKONG_ENGINE_API_KEY", raising=False)
    assert engine_key() != engine_key() and len(engine_key()) >= 32
    monkeypatch.setenv("TIANKONG_ENGINE_API_KEY", "chosen-by-the-bench-1")
    assert engine_pool(load_config(None)).replicas()[0].api_key == "chosen-by-the-bench-1"
    monkeypatch.setenv("TIANKONG_ENGINE_API_KEY", "short")
    with pytest.raises(ConfigError, match="16 characters"):
        engine_key()
