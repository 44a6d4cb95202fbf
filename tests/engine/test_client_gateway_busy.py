"""Our client against our gateway (issue 45): a default ``tiankong serve`` (2 slots, a queue of 4) answers every task
verb of the CLI and of ``Client(url=…)`` — each task one ``/v1/tasks/<task>`` call — and 8 CLI users at once get
their answers, not a 429: the client keeps within the server's slots and honours ``Retry-After``.

How many requests one client has in flight is counted by the server's side of the socket: a scripted HTTP server
that answers ``/health`` and ``/props`` like a tiankong gateway with 2 slots (the task calls), and a counting
proxy in front of the real engine (a task's own flow, call by call)."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import httpx
import pytest

from conftest import run_cli, serve_app
from helpers.cloud_like import serve_handler
from tiankong import AsyncClient, Client
from tiankong.client._shared import RETRIES, retry_delay, server_info
from tiankong.engine import EngineBinary, EngineConfig, EngineProcess
from tiankong.gateway import GatewayState
from tiankong.models import DEFAULT_MODEL

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
def gateway(engine_binary: EngineBinary, default_model_path: Path) -> Iterator[str]:
    """A gateway with its defaults over the default model (what `tiankong serve` starts): the engine's 2 slots, 4
    waiting, the rest 429. (On the test model, SmolLM2-135M as Q4_0, `sql` ran on past its 160-token cap twice in a
    row on one of three runs: docs/testing.md.)"""
    engine = EngineProcess(EngineConfig(model=default_model_path, ctx=4096, slots=2, alias=DEFAULT_MODEL),
                           engine_binary).start()
    try:
        with serve_app(GatewayState(upstream_url=engine.url, model_name=DEFAULT_MODEL)) as url:
            yield url
    finally:
        engine.stop()


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


class InFlight:
    """Requests in flight at a server, and the most there were at once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = self.peak = self.total = 0

    def __enter__(self) -> None:
        with self.lock:
            self.now += 1
            self.total += 1
            self.peak = max(self.peak, self.now)

    def __exit__(self, *exc: object) -> None:
        with self.lock:
            self.now -= 1


@contextmanager
def http_server(answer: Any) -> Iterator[str]:
    """A threading HTTP server on a free loopback port; ``answer(method, path, body) -> (status, type, bytes)``."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self, method: str) -> None:
            size = int(self.headers.get("content-length") or 0)
            status, kind, data = answer(method, self.path, self.rfile.read(size) if size else b"")
            self.send_response(status)
            self.send_header("content-type", kind)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._answer("GET")

        def do_POST(self) -> None:
            self._answer("POST")

        def log_message(self, *args: Any) -> None:
            pass

    with serve_handler(Handler) as url:
        yield url


CLASSIFIED = {"label": "billing", "labels": ["billing", "bug"], "scores": {"billing": 0.9, "bug": 0.1}, "margin": 0.8}


@contextmanager
def scripted_gateway(flight: InFlight, slots: int = 2) -> Iterator[str]:
    """Answers like a tiankong gateway with ``slots`` slots: ``/health`` with its engine and pool, ``/props`` with
    ``total_slots``, and each ``/v1/tasks/classify`` after 0.1 s (long enough for calls to overlap)."""

    def answer(method: str, path: str, body: bytes) -> tuple[int, str, bytes]:
        if path == "/health":
            return 200, "application/json", json.dumps({"status": "ok", "engine": "ready", "pool": []}).encode()
        if path == "/props":
            return 200, "application/json", json.dumps({"total_slots": slots}).encode()
        if method == "POST" and path == "/v1/tasks/classify":
            with flight:
                time.sleep(0.1)
            return 200, "application/json", json.dumps(CLASSIFIED).encode()
        return 404, "application/json", b'{"error": {"message": "no route"}}'

    with http_server(answer) as url:
        yield url


@contextmanager
def counting_proxy(upstream: str, flight: InFlight) -> Iterator[str]:
    """Forwards every request to ``upstream`` (the real engine), counting the engine calls in flight."""
    forward = httpx.Client(base_url=upstream, timeout=300)

    def answer(method: str, path: str, body: bytes) -> tuple[int, str, bytes]:
        counted = flight if path not in ("/health", "/props") else None
        if counted is not None:
            counted.__enter__()
        try:
            reply = forward.request(method, path, content=body or None,
                                    headers={"content-type": "application/json"} if body else None)
            return reply.status_code, reply.headers.get("content-type", "application/json"), reply.content
        finally:
            if counted is not None:
                counted.__exit__()

    try:
        with http_server(answer) as url:
            yield url
    finally:
        forward.close()


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
            "extract": client.extract_result("Ada Lovelace wrote the first program.", SCHEMA),
        }
        after = requests_by_route(gateway)
    for task, result in results.items():
        assert after.get(f"/v1/tasks/{task}", 0) - before.get(f"/v1/tasks/{task}", 0) == 1, task
        assert hasattr(result, "to_json") or task in ("tag", "extract"), task
    for route in ENGINE_ROUTES:  # no flow ran call by call on the client's side
        assert after.get(route, 0) == before.get(route, 0), route
    classified = results["classify"]
    assert classified.label in ("billing", "bug", "account") and abs(sum(classified.scores.values()) - 1) < 1e-6
    assert [e.type for e in results["redact"].entities if e.type == "PHONE"] == ["PHONE"]
    assert len(results["rerank"].results) == 1 and results["guard"].verdict in ("allow", "flag", "block")
    assert results["sql"].sql.lower().startswith("select") and results["ask"].answers[0].id == "q1"
    assert isinstance(results["tag"].data, dict)
    extracted = results["extract"]  # read back whole: the data and its evidence
    assert isinstance(extracted.data["name"], str) and extracted.attempts >= 1 and extracted.usage.total_tokens > 0
    assert extracted.path in ("fast_forward", "grammar")
    query = results["sql"].structured  # sql's evidence and usage too (a gateway's client had none)
    assert query is not None and query.usage.total_tokens > 0 and query.path in ("fast_forward", "grammar")
    assert query.decoded_tokens > 0 and query.finish_reason in ("stop", "length")


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


def test_a_client_keeps_its_task_calls_within_the_gateways_slots() -> None:
    """Many task calls at once from one ``Client`` (threads) and one ``AsyncClient`` (gather): at most the
    gateway's 2 slots reach it at a time (client/sync.py and aio.py ``_limited``); the rest wait in the client."""
    flight = InFlight()
    with scripted_gateway(flight) as url:
        with Client(url) as client, ThreadPoolExecutor(max_workers=10) as pool:
            labels = list(pool.map(lambda i: client.classify(f"{TEXT} ({i})", ["billing", "bug"]).label, range(10)))
        assert labels == ["billing"] * 10 and flight.total == 10
        assert flight.peak == 2, f"{flight.peak} task calls in flight at a gateway with 2 slots"

        async def many() -> list[str]:
            async with AsyncClient(url) as client:
                results = await asyncio.gather(*(client.classify(f"{TEXT} ({i})", ["billing", "bug"])
                                                 for i in range(10)))
                return [result.label for result in results]

        flight.peak = 0
        assert asyncio.run(many()) == ["billing"] * 10 and flight.total == 20
        assert flight.peak == 2, f"{flight.peak} task calls in flight at a gateway with 2 slots"


def test_a_tasks_own_flow_keeps_within_the_engines_slots(smol_engine: EngineProcess) -> None:
    """At an engine (not a gateway) the flow's calls run here, side by side: a pointwise rerank of 8 documents
    asks 8 questions at once, yet at most the engine's 2 slots of them are in flight (counted by a proxy)."""
    flight = InFlight()
    documents = [f"document {i}: {'a refund was issued' if i % 2 else 'the printer is broken'}" for i in range(8)]
    with counting_proxy(smol_engine.url, flight) as url:
        with Client(url) as client:
            assert not client.server().gateway and client.server().slots == 2
            ranked = client.rerank("refund", documents, mode="pointwise")
        assert len(ranked.scores) == 8 and flight.total >= 8
        assert flight.peak == 2, f"{flight.peak} engine calls in flight at an engine with 2 slots"

        async def reranked() -> int:
            async with AsyncClient(url) as client:
                return len((await client.rerank("refund", documents, mode="pointwise")).scores)

        flight.peak = 0
        assert asyncio.run(reranked()) == 8 and flight.total >= 16
        assert flight.peak == 2, f"{flight.peak} engine calls in flight at an engine with 2 slots"
