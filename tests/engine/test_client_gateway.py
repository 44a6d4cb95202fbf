"""tiankong's own client and CLI through a tiankong gateway (issue 23, item 3): the flows' llama.cpp calls
(``/props``, ``/tokenize``, ``/apply-template``, ``/completion``) are served by the gateway, so a task called
with ``--url <gateway>`` starts no engine of its own, and the gateway's API key is sent from ``--api-key`` /
``TIANKONG_API_KEY``."""

from __future__ import annotations

import json
import stat
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from test_gateway import Served, start_serve, stop_serve

from conftest import assert_one_line_error, run_cli
from tiankong import Client, ConfigError, TransportError

KEY = "gateway-key-4711"


@pytest.fixture(scope="module")
def keyed_gateway() -> Iterator[Served]:
    served = start_serve("--api-key", KEY)
    try:
        yield served
    finally:
        stop_serve(served)


def tripwire(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """An environment whose llama-server is a script that records being started (and fails)."""
    marker = tmp_path / "engine-started"
    script = tmp_path / "llama-server"
    script.write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n", encoding="utf-8")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return {"TIANKONG_LLAMA_SERVER": str(script)}, marker


def test_cli_tasks_through_the_gateway_start_no_engine(keyed_gateway: Served, tmp_path: Path) -> None:
    env, marker = tripwire(tmp_path)
    answer = run_cli("classify", "The invoice was charged twice, please refund me.", "--labels", "billing,bug",
                     "--url", keyed_gateway.url, "--api-key", KEY, "--json", env=env)
    assert answer.returncode == 0, answer.stderr
    result = json.loads(answer.stdout)
    assert result["label"] in ("billing", "bug") and set(result["scores"]) == {"billing", "bug"}
    assert abs(sum(result["scores"].values()) - 1.0) < 1e-6
    by_env = run_cli("redact", "Call me at 13800138000.", "--json",
                     env={**env, "TIANKONG_URL": keyed_gateway.url, "TIANKONG_API_KEY": KEY})
    assert by_env.returncode == 0, by_env.stderr
    assert [e["type"] for e in json.loads(by_env.stdout)["entities"]] == ["PHONE"]
    assert not marker.exists(), "the CLI started an engine of its own"
    refused = run_cli("classify", "x", "--labels", "a,b", "--url", keyed_gateway.url, env=env)
    assert_one_line_error(refused, "401")


def test_client_flows_run_through_the_gateway(keyed_gateway: Served) -> None:
    text = "Refund my double charge from last week."
    with Client(keyed_gateway.url, api_key=KEY) as client:
        via = client.classify(text, ["billing", "bug", "other"])
        chosen = client.choose(text, ["billing", "bug", "other"])
        data = client.extract("Ada Lovelace, 36, London.", {"type": "object", "properties": {
            "name": {"type": "string"}, "age": {"type": "integer"}}, "required": ["name", "age"]})
        ranked = client.rerank("refund", ["a refund was issued", "the printer is broken"], top_n=1)
    assert via.label in ("billing", "bug", "other") and abs(sum(via.scores.values()) - 1) < 1e-6
    assert set(chosen.scores) == {"billing", "bug", "other"}
    assert chosen.label == max(chosen.scores, key=lambda label: chosen.scores[label])
    assert isinstance(data["name"], str) and isinstance(data["age"], int)
    assert len(ranked.results) == 1
    with Client(keyed_gateway.url) as anonymous, pytest.raises((ConfigError, TransportError)):
        anonymous.classify(text, ["billing", "bug"])


def test_native_endpoints_check_their_field_and_hide_the_model_path(keyed_gateway: Served) -> None:
    headers = {"Authorization": f"Bearer {KEY}"}
    props = httpx.get(f"{keyed_gateway.url}/props", headers=headers, timeout=30)
    assert props.status_code == 200 and "model_path" not in props.json() and props.json().get("total_slots") == 2
    tokens = httpx.post(f"{keyed_gateway.url}/tokenize", json={"content": "hello"}, headers=headers, timeout=30)
    assert tokens.status_code == 200 and tokens.json()["tokens"]
    missing = httpx.post(f"{keyed_gateway.url}/tokenize", json={"text": "hello"}, headers=headers, timeout=30)
    assert missing.status_code == 400 and "content" in missing.json()["error"]["message"]
    schema = httpx.post(f"{keyed_gateway.url}/completion", json={"prompt": "x", "json_schema": {"type": "object"}},
                        headers=headers, timeout=30)
    assert schema.status_code == 400  # never unvalidated structured output
    assert httpx.get(f"{keyed_gateway.url}/props", timeout=30).status_code == 401
