"""Our client against our gateway (issue 45): a default ``tiankong serve`` (2 slots, a queue of 4) answers every task
verb of the CLI and of ``Client(url=…)`` — each task one ``/v1/tasks/<task>`` call — and 8 CLI users at once get
their answers, not a 429: the client keeps within the server's slots and honours ``Retry-After``."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from conftest import run_cli, serve_app
from tiankong import AsyncClient, Client
from tiankong.client._shared import RETRIES, retry_delay, server_info
from tiankong.engine import EngineProcess
from tiankong.gateway import GatewayState
from tiankong.models import TEST_MODEL

ROUTES = [{"name": "billing", "description": "payments, refunds, invoices", "target": "task:classify"},
          {"name": "tech", "description": "bugs, crashes, errors", "target": "task:classify"}]
TOOLS = [{"type": "function", "function": {"name": "refund", "description": "Refund an order",
                                           "parameters": {"type": "object", "properties": {"order": {"type": "string"}},
                                                          "required": ["order"]}}}]
DDL = "CREATE TABLE orders (id INTEGER, amount REAL, customer TEXT);"
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
TEXT = "I was charged twice for order 42, please refund me."
#: requests on which a client's own flow talks to the engine through the gateway, call by call
ENGINE_ROUTES = ("/completion", "/v1/chat/completions", "/tokenize", "/apply-template", "/v1/completions")


@pytest.fixture(scope="module")
def gateway(smol_engine: EngineProcess) -> Iterator[str]:
    """A gateway with its defaults: the engine's 2 slots, 4 waiting, the rest 429."""
    with serve_app(GatewayState(upstream_url=smol_engine.url, model_name=TEST_MODEL)) as url:
        yield url


def requests_by_route(url: str) -> dict[str, float]:
    counts: dict[str, float] = {}
    for line in httpx.get(f"{url}/metrics", timeout=30).text.splitlines():
        found = re.match(r'tiankong_requests_total\{.*route="([^"]+)".*\} ([0-9.e+]+)$', line)
        if found:
            counts[found[1]] = counts.get(found[1], 0.0) + float(found[2])
    return counts


def rejected(url: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in httpx.get(f"{url}/metrics", timeout=30).text.splitlines()
               if line.startswith("tiankong_rejections_total{"))


def cli_invocations(tmp_path: Path) -> dict[str, list[str]]:
    routes, tools, ddl, schema = (tmp_path / n for n in ("routes.json", "tools.json", "shop.sql", "schema.json"))
    routes.write_text(json.dumps(ROUTES))
    tools.write_text(json.dumps(TOOLS))
    ddl.write_text(DDL)
    schema.write_text(json.dumps(SCHEMA))
    return {
        "classify": ["classify", TEXT, "--labels", "billing,bug,account"],
        "route": ["route", TEXT, "--routes", str(routes)],
        "rewrite": ["rewrite", "refund double charge", "-n", "2"],
        "rerank": ["rerank", "refund", "-d", "a refund was issued", "-d", "the printer is broken"],
        "redact": ["redact", "Call Ada Lovelace at 13800138000."],
        "guard": ["guard", "hello there, how are you", "--no-decider", "--use-model"],
        "compress": ["compress", TEXT + " The order was placed on Monday.", "--budget", "32"],
        "summarize": ["summarize", TEXT, "--words", "10"],
        "tag": ["tag", TEXT, "--max-keywords", "3"],
        "ask": ["ask", TEXT, "--yes-no", "Is a refund requested?", "--yes-no", "Is it about a bug?"],
        "call": ["call", "Refund order 42", "--tools", str(tools)],
        "sql": ["sql", "How many orders are there?", "--ddl", str(ddl)],
        "extract": ["extract", "Ada Lovelace wrote the first program.", "--schema", str(schema)],
    }


def test_every_cli_task_verb_answers_through_a_default_gateway(gateway: str, tmp_path: Path) -> None:
    for verb, args in cli_invocations(tmp_path).items():
        proc = run_cli(*args, "--url", gateway, *(["--json"] if verb != "extract" else []))
        assert proc.returncode == 0, (verb, proc.stderr)
        assert "429" not in proc.stderr, (verb, proc.stderr)
        assert isinstance(json.loads(proc.stdout), dict), verb
    assert rejected(gateway) == 0


def test_eight_cli_users_at_once_get_answers_not_429(gateway: str) -> None:
    def user(i: int) -> tuple[int, str, str]:
        proc = run_cli("classify", f"{TEXT} (ticket {i})", "--labels", "billing,bug,account", "--url", gateway,
                       "--json", timeout=600)
        return proc.returncode, proc.stdout, proc.stderr

    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(user, range(8)))
    for code, out, err in answers:
        assert code == 0 and "429" not in err, err
        result = json.loads(out)
        assert result["label"] in ("billing", "bug", "account")
        assert abs(sum(result["scores"].values()) - 1.0) < 1e-6


def test_client_sends_each_task_as_one_gateway_call(gateway: str) -> None:
    with Client(gateway) as client:
        assert client.server().gateway and client.server().slots == 2
        before = requests_by_route(gateway)
        results = {
            "classify": client.classify(TEXT, ["billing", "bug", "account"]),
            "route": client.route(TEXT, ROUTES),
            "rewrite": client.rewrite("refund double charge", n=2),
            "rerank": client.rerank("refund", ["a refund was issued", "the printer is broken"], top_n=1),
            "redact": client.redact("Call Ada Lovelace at 13800138000."),
            "guard": client.guard("hello there", decider=None, use_model=True),
            "compress": client.compress(TEXT, budget_tokens=32),
            "summarize": client.summarize(TEXT, words=10),
            "tag": client.tag(TEXT, max_keywords=3),
            "ask": client.ask(TEXT, [{"id": "q1", "type": "yes_no", "question": "Is a refund requested?"}]),
            "call": client.call("Refund order 42", TOOLS),
            "sql": client.sql("How many orders are there?", DDL),
        }
        after = requests_by_route(gateway)
    for task, result in results.items():
        assert after.get(f"/v1/tasks/{task}", 0) - before.get(f"/v1/tasks/{task}", 0) == 1, task
        assert hasattr(result, "to_json") or task == "tag", task
    for route in ENGINE_ROUTES:  # no flow ran call by call on the client's side
        assert after.get(route, 0) == before.get(route, 0), route
    classified = results["classify"]
    assert classified.label in ("billing", "bug", "account") and abs(sum(classified.scores.values()) - 1) < 1e-6
    assert [e.type for e in results["redact"].entities if e.type == "PHONE"] == ["PHONE"]
    assert len(results["rerank"].results) == 1 and results["guard"].verdict in ("allow", "flag", "block")
    assert results["sql"].sql.lower().startswith("select") and results["ask"].answers[0].id == "q1"
    assert isinstance(results["tag"].data, dict)


def test_async_clients_at_once_get_answers_not_429(gateway: str) -> None:
    async def users() -> list[str]:
        async def one(i: int) -> str:
            async with AsyncClient(gateway) as client:
                return (await client.classify(f"{TEXT} ({i})", ["billing", "bug"])).label

        return await asyncio.gather(*(one(i) for i in range(8)))

    assert set(asyncio.run(users())) <= {"billing", "bug"}


def test_retry_after_is_honoured_and_bounded() -> None:
    assert retry_delay(200, "3", 0, 0.0) is None and retry_delay(500, "3", 0, 0.0) is None
    delay = retry_delay(429, "3", 0, 0.0)
    assert delay is not None and 3.0 <= delay <= 3.6
    assert retry_delay(503, None, 0, 0.0) is None  # down, not busy
    assert retry_delay(503, "2", 0, 0.0) is not None
    assert retry_delay(429, "3", RETRIES, 0.0) is None  # retries spent
    assert retry_delay(429, "30", 1, 170.0) is None  # waiting budget spent
    assert server_info(200, {"status": "ok"}, {"total_slots": 4}).gateway is False
    info = server_info(503, {"status": "unavailable", "engine": "starting", "pool": []}, None)
    assert info.gateway and info.slots == 2
