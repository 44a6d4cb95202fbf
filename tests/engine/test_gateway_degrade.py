"""Degradation levels L0-L3: the policy's hysteresis, the prompt cap, and each level through the real gateway.

The gateway tests drive the level deterministically with tiny thresholds (any finished request makes the p99
latency exceed 0.1 ms) and a long ``hold_s`` so the level stays put while the test looks at it.
"""

from __future__ import annotations

import re
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_gateway_admission import LONG, metrics, post, serve_app, state_for, total

from conftest import wait_until
from tiankong.config import DegradationSettings, TiankongConfig, load_config
from tiankong.engine import EngineProcess
from tiankong.engine.pool import Replica
from tiankong.errors import ConfigError
from tiankong.gateway.admission import Admission, Lane
from tiankong.gateway.degrade import Degradation, Signals, prompt_chars, truncate
from tiankong.gateway.stats import LiveStats

TINY = 0.0001  # seconds: every real request's latency is above it
SHORT = {"messages": [{"role": "user", "content": "Say OK."}], "max_tokens": 4, "temperature": 0}
LONG_TEXT = "The quick brown fox jumps over the lazy dog. " * 40  # 1800 characters


def long_chat(**extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": LONG_TEXT + "Say OK."}], "max_tokens": 4, "temperature": 0,
            **extra}


def settings(**values: Any) -> DegradationSettings:
    base: dict[str, Any] = {"enabled": True, "check_interval_s": 0, "hold_s": 3600, "max_prompt_chars": 300}
    return DegradationSettings(**{**base, **values})


def health(url: str) -> dict[str, Any]:
    data: dict[str, Any] = httpx.get(f"{url}/health", timeout=30).json()["degradation"]
    return data


# --- configuration -------------------------------------------------------------------------------------------


def test_documented_config_examples_validate() -> None:
    docs = Path(__file__).parents[2] / "docs"
    blocks = [b for name in ("config.md", "gateway.md", "batch-api.md", "cascade.md")
              for b in re.findall(r"```toml\n(.*?)```", (docs / name).read_text(encoding="utf-8"), re.S)]
    assert any("[degradation]" in b for b in blocks)
    for block in blocks:
        TiankongConfig.model_validate(tomllib.loads(block))


def test_bad_thresholds_name_the_key(tmp_path: Path) -> None:
    bad = tmp_path / "t.toml"
    bad.write_text("[degradation]\nqueue_depth = [8, 4]\nover_limit = \"drop\"\n", encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(bad)
    assert "degradation.queue_depth" in str(caught.value) and "degradation.over_limit" in str(caught.value)


# --- the policy itself ---------------------------------------------------------------------------------------


def policy_for(**values: Any) -> tuple[Degradation, Admission]:
    admission = Admission(limit=4, queue_size=8)
    handle = Lane(Replica("e", remote_url="http://127.0.0.1:9"), admission)
    return Degradation(settings(**values), LiveStats(), lambda: [handle]), admission


def test_levels_rise_at_once_and_fall_one_step_after_calm() -> None:
    policy, admission = policy_for(queue_depth=[2, 4, 6], hold_s=10, recover_ratio=0.5)
    quiet = Signals(queue_depth=0, p99_latency_s=None, engine_rss_mib=None)
    assert policy.evaluate(0.0, Signals(queue_depth=5, p99_latency_s=None, engine_rss_mib=None)) == 2
    assert admission.limit == 1 and policy.reasons == ["queue_depth 5 >= 4"]
    assert policy.evaluate(1.0, Signals(queue_depth=3, p99_latency_s=None, engine_rss_mib=None)) == 2
    # hysteresis: 3 is below L2's threshold 4 but not below 0.5 x 4, so the calm clock never starts
    assert policy.evaluate(100.0, Signals(queue_depth=3, p99_latency_s=None, engine_rss_mib=None)) == 2
    assert policy.evaluate(101.0, quiet) == 2  # calm starts
    assert policy.evaluate(110.0, quiet) == 2  # not yet hold_s
    assert policy.evaluate(111.0, quiet) == 1 and admission.limit == 4  # one step, concurrency restored
    assert policy.evaluate(121.0, quiet) == 0
    assert policy.evaluate(122.0, Signals(queue_depth=9, p99_latency_s=None, engine_rss_mib=None)) == 3
    assert policy.describe()["note"] and "acting as L2" in policy.describe()["note"]


def test_any_signal_raises_the_level() -> None:
    policy, _ = policy_for(p99_latency_s=[1.0, 5.0], engine_rss_mib=[100, 200, 300])
    assert policy.evaluate(0.0, Signals(queue_depth=0, p99_latency_s=2.0, engine_rss_mib=50)) == 1
    assert policy.evaluate(1.0, Signals(queue_depth=0, p99_latency_s=0.1, engine_rss_mib=250)) == 2
    assert policy.evaluate(2.0, Signals(queue_depth=0, p99_latency_s=9.0, engine_rss_mib=350)) == 3
    disabled, _ = policy_for(enabled=False, queue_depth=[1])
    assert disabled.update() == 0


def test_truncate_keeps_system_and_last_message_and_cuts_the_middle() -> None:
    body = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "a" * 500},
                         {"role": "assistant", "content": "b" * 500},
                         {"role": "user", "content": "START " + "c" * 1000 + " END"}]}
    removed = truncate(body, 300)
    assert prompt_chars(body) == 300 and removed > 0
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["system", "user"] and body["messages"][0]["content"] == "Be brief."
    last = body["messages"][-1]["content"]
    assert last.startswith("START") and last.endswith("END") and " … " in last
    prompt = {"prompt": "x" * 50 + "y" * 50}
    truncate(prompt, 20)
    assert prompt_chars(prompt) == 20 and prompt["prompt"].startswith("x") and prompt["prompt"].endswith("y")
    parts = {"messages": [{"role": "user", "content": [{"type": "text", "text": "z" * 100}]}]}
    assert prompt_chars(parts) == 100 and truncate(parts, 10) == 90


# --- through the gateway -------------------------------------------------------------------------------------


def test_l1_rejects_long_prompts_with_413(smol_engine: EngineProcess) -> None:
    with serve_app(state_for(smol_engine, degradation=settings(p99_latency_s=[TINY]))) as url:
        assert health(url)["level"] == 0
        assert post(url, long_chat()).status_code == 200  # L0: no cap yet
        assert wait_until(lambda: health(url)["level"] == 1, 30)
        refused = post(url, long_chat())
        assert refused.status_code == 413, refused.text
        error = refused.json()["error"]
        assert error["code"] == "context_length_exceeded" and error["type"] == "invalid_request_error"
        assert "300" in error["message"]
        assert post(url, SHORT).status_code == 200
        streamed = post(url, long_chat(stream=True))
        assert streamed.status_code == 413
        state = health(url)
        assert state["level"] == 1 and state["reasons"] and state["max_prompt_chars"] == 300
        samples = metrics(url)
        assert total(samples, "tiankong_degradation_level") == 1
        assert total(samples, "tiankong_degradation_actions_total", action="rejected") == 2


def test_l1_truncates_when_configured(smol_engine: EngineProcess) -> None:
    with serve_app(state_for(smol_engine, degradation=settings(p99_latency_s=[TINY], over_limit="truncate"))) as url:
        full = post(url, long_chat())
        assert full.status_code == 200
        assert wait_until(lambda: health(url)["level"] == 1, 30)
        cut = post(url, long_chat())
        assert cut.status_code == 200, cut.text
        assert cut.json()["usage"]["prompt_tokens"] < full.json()["usage"]["prompt_tokens"] / 3
        assert total(metrics(url), "tiankong_degradation_actions_total", action="truncated") == 1


def test_l2_lowers_concurrency_and_l3_without_fallback_acts_as_l2(smol_engine: EngineProcess) -> None:
    degradation = settings(p99_latency_s=[TINY, 2 * TINY, 3 * TINY], queue_depth=[100, 200, 300])
    with serve_app(state_for(smol_engine, degradation=degradation)) as url:
        assert post(url, SHORT).status_code == 200
        assert wait_until(lambda: health(url)["level"] == 3, 30)
        state = health(url)
        assert state["fallback"] is False and "acting as L2" in state["note"]
        assert total(metrics(url), "tiankong_in_flight_limit") == 1
        with ThreadPoolExecutor(3) as pool:
            answers = list(pool.map(lambda _: post(url, SHORT), range(3)))
        assert [a.status_code for a in answers] == [200] * 3  # served one at a time by the main engine
        assert total(metrics(url), "tiankong_queue_wait_seconds_count", engine="fallback") == 0


def test_l3_routes_to_the_fallback(smol_engine: EngineProcess) -> None:
    # the fallback is the same llama-server under another name: what matters is the route taken
    degradation = settings(p99_latency_s=[TINY, TINY, TINY], fallback_url=smol_engine.url,
                           fallback_model="fallback-model")
    with serve_app(state_for(smol_engine, degradation=degradation)) as url:
        assert post(url, SHORT).status_code == 200
        assert wait_until(lambda: health(url)["level"] == 3, 30)
        assert health(url)["fallback"] is True and health(url)["note"] is None
        answer = post(url, SHORT)
        assert answer.status_code == 200 and answer.json()["choices"][0]["message"]["content"] is not None
        streamed = post(url, {**SHORT, "stream": True})
        assert streamed.status_code == 200 and streamed.text.rstrip().endswith("data: [DONE]")
        classified = post(url, {"text": "I love it", "labels": ["positive", "negative"]}, "/v1/tasks/classify")
        assert classified.status_code == 200 and classified.json()["label"] in ("positive", "negative")
        samples = metrics(url)
        assert total(samples, "tiankong_queue_wait_seconds_count", engine="fallback") == 3
        assert total(samples, "tiankong_degradation_actions_total", action="fallback") == 3
        assert total(samples, "tiankong_requests_total", model="fallback-model", status="200") == 3
        stats = httpx.get(f"{url}/ui/stats", timeout=30).json()
        assert [e["name"] for e in stats["engines"]] == [smol_engine.config.alias, "fallback"]
        assert stats["degradation"]["level"] == 3


def test_queue_depth_triggers_and_the_level_recovers(smol_engine: EngineProcess) -> None:
    degradation = settings(queue_depth=[1], window_s=1.0, hold_s=0.5)
    with serve_app(state_for(smol_engine, degradation=degradation)) as url:
        with ThreadPoolExecutor(3) as pool:
            hogs = [pool.submit(post, url, {**LONG, "max_tokens": 32}) for _ in range(3)]
            assert wait_until(lambda: httpx.get(f"{url}/health", timeout=30).json()["queued"] >= 1, 60)
            assert post(url, SHORT).status_code == 200  # arrives while one request waits: L1
            assert [h.result().status_code for h in hogs] == [200] * 3
        assert wait_until(lambda: health(url)["level"] == 0, 60)  # calm for hold_s: back to L0
        assert health(url)["transitions"] >= 2  # up (queue depth), then down
        assert total(metrics(url), "tiankong_degradation_level") == 0


def test_fallback_api_key_comes_from_the_environment(smol_engine: EngineProcess,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    degradation = settings(fallback_url=smol_engine.url, fallback_api_key_env="TK_FALLBACK_KEY")
    monkeypatch.delenv("TK_FALLBACK_KEY", raising=False)
    with pytest.raises(ConfigError, match="TK_FALLBACK_KEY"):
        state_for(smol_engine, degradation=degradation)
    monkeypatch.setenv("TK_FALLBACK_KEY", "fallback-secret")
    state = state_for(smol_engine, degradation=degradation)
    assert state.fallback is not None
    assert state.fallback.replica.auth_headers() == {"Authorization": "Bearer fallback-secret"}
    assert state.engine.replica.auth_headers() == {}  # the local engine gets no key
