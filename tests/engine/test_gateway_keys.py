"""API keys hashed at rest, and the per-key requests-per-minute limit (429 + Retry-After), with the real engine."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from test_gateway_admission import serve_app, state_for, total

from tiankong.config import load_config
from tiankong.engine import EngineProcess
from tiankong.errors import ConfigError
from tiankong.gateway.keys import ApiKey, RateLimiter, as_hash, find_key, hash_key
from tiankong.gateway.serve import check_bind

SHORT = {"messages": [{"role": "user", "content": "Say OK."}], "max_tokens": 2, "temperature": 0}


def chat(url: str, key: str | None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.post(f"{url}/v1/chat/completions", json=SHORT, headers=headers, timeout=300)


def keyed_metrics(url: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    text = httpx.get(f"{url}/metrics", headers={"Authorization": "Bearer team-a-secret"}, timeout=30).text
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def test_rate_limiter_is_a_sliding_minute() -> None:
    limiter = RateLimiter()
    assert [limiter.admit("k", 2, now=t) for t in (0.0, 10.0)] == [None, None]
    assert limiter.admit("k", 2, now=30.0) == 30  # the request at 0 s leaves the window at 60 s
    assert limiter.admit("other", 2, now=30.0) is None  # keys are counted apart
    assert limiter.admit("k", 2, now=60.5) is None  # refused requests did not count
    assert limiter.admit("k", 2, now=61.0) == 9
    assert limiter.admit("k", None, now=61.0) is None  # no limit


def test_keys_are_matched_by_hash() -> None:
    keys = [ApiKey(as_hash("alpha-key-1"), "alpha"), ApiKey(hash_key("beta-key-22"), "beta", 5)]
    assert as_hash(keys[0].hash) == keys[0].hash  # a stored hash is kept as is
    found = find_key(keys, "beta-key-22")
    assert found is not None and found.name == "beta"
    assert find_key(keys, "") is None and find_key(keys, "gamma") is None
    assert find_key(keys, keys[0].hash) is None  # the stored hash itself is not a key


def test_config_keys_validate_and_count_for_the_bind_check(tmp_path: Path) -> None:
    good = tmp_path / "good.toml"
    good.write_text(f'[server]\nhost = "0.0.0.0"\nport = 0\nkey_rpm = 60\n[[server.keys]]\n'
                    f'key = "{hash_key("team-a-secret")}"\nname = "team-a"\nrpm = 10\n', encoding="utf-8")
    config = load_config(good)
    assert config.server.keys[0].rpm == 10 and config.server.key_rpm == 60
    check_bind(config)  # a named key is enough to bind a public address
    bad = tmp_path / "bad.toml"
    bad.write_text('[[server.keys]]\nkey = "short"\nname = "has space"\nrpm = 0\n', encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(bad)
    message = str(caught.value)
    assert "server.keys.0.key" in message and "server.keys.0.name" in message and "server.keys.0.rpm" in message


@pytest.fixture(scope="module")
def keyed(smol_engine: EngineProcess) -> Iterator[str]:
    keys = [ApiKey(hash_key("team-a-secret"), "team-a", 2), ApiKey(hash_key("team-b-secret"), "team-b")]
    with serve_app(state_for(smol_engine, api_keys=keys, api_key_hashes=[hash_key("legacy-key-1")],
                             key_rpm=3)) as url:
        yield url


def test_per_key_rpm_answers_429_with_retry_after(keyed: str) -> None:
    assert [chat(keyed, "team-a-secret").status_code for _ in range(2)] == [200, 200]
    refused = chat(keyed, "team-a-secret")
    assert refused.status_code == 429
    assert 1 <= int(refused.headers["Retry-After"]) <= 60
    error = refused.json()["error"]
    assert error["type"] == "rate_limit_exceeded" and error["code"] == "rpm_exceeded"
    assert "2 requests" in error["message"]
    # other keys have their own budget: team-b and the legacy key get the default key_rpm = 3
    assert [chat(keyed, "team-b-secret").status_code for _ in range(4)] == [200, 200, 200, 429]
    assert chat(keyed, "legacy-key-1").status_code == 200
    samples = keyed_metrics(keyed)  # /metrics itself is not rate limited
    assert total(samples, "tiankong_rejections_total", reason="key_rpm") == 2
    assert total(samples, "tiankong_key_requests_total", key="team-a", status="200") == 2
    assert total(samples, "tiankong_key_requests_total", key="team-a", status="429") == 1


def test_wrong_or_missing_key_is_401_and_not_counted(keyed: str) -> None:
    for key in (None, "nope-nope-nope"):
        answer = chat(keyed, key)
        assert answer.status_code == 401 and answer.json()["error"]["code"] == "invalid_api_key"
    stored_hash = hash_key("team-b-secret")
    assert chat(keyed, stored_hash).status_code == 401  # what the config holds is useless to a caller
    assert httpx.get(f"{keyed}/v1/models", headers={"x-api-key": "team-a-secret"}, timeout=10).status_code == 200
