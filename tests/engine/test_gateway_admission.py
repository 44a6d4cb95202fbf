"""Gateway admission control, metrics, supervision and OpenAPI, with the real engine behind an in-process app.

The app runs in real uvicorn on a free port (a thread of this process) so concurrency, streaming and client
disconnects behave as they do in production. No wall-clock assertions: everything that waits polls a
condition with a generous bound.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import FAKE_SERVER, serve_app, wait_until
from tiankong.engine import EngineBinary, EngineConfig, EngineProcess
from tiankong.engine.watch import WedgeWatch
from tiankong.gateway import GatewayState, create_app
from tiankong.gateway.admission import Admission, QueueFull
from tiankong.models import TEST_MODEL

LONG = {"messages": [{"role": "user", "content": "Count from 1 to 1000, one number per line."}],
        "max_tokens": 24, "ignore_eos": True, "temperature": 0}




def state_for(engine: EngineProcess, **settings: Any) -> GatewayState:
    return GatewayState.for_engine(engine, TEST_MODEL, **settings)


def slots_busy(engine: EngineProcess) -> list[bool]:
    return [bool(s.get("is_processing")) for s in httpx.get(f"{engine.url}/slots", timeout=10).json()]


def idle(engine: EngineProcess) -> bool:
    try:
        return not any(slots_busy(engine))
    except httpx.HTTPError:
        return False


def metrics(url: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Samples by name → {sorted labels: value}."""
    text = httpx.get(f"{url}/metrics", timeout=30).text
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def total(samples: dict[str, dict[tuple[tuple[str, str], ...], float]], name: str, **labels: str) -> float:
    wanted = set(labels.items())
    return sum(v for k, v in samples.get(name, {}).items() if wanted <= set(k))


def post(url: str, body: dict[str, Any], path: str = "/v1/chat/completions", timeout: float = 300) -> httpx.Response:
    return httpx.post(f"{url}{path}", json=body, timeout=timeout)


@pytest.fixture(scope="module")
def gateway(smol_engine: EngineProcess) -> Iterator[str]:
    with serve_app(state_for(smol_engine, keepalive_s=0.05)) as url:
        yield url


# --- admission -----------------------------------------------------------------------------------------------


def test_queue_full_answers_429_with_retry_after_and_no_5xx(smol_engine: EngineProcess) -> None:
    assert wait_until(lambda: idle(smol_engine), 300)
    with serve_app(state_for(smol_engine, queue_size=1)) as url:
        barrier = threading.Barrier(8)

        def one(_: int) -> httpx.Response:
            barrier.wait()
            return post(url, LONG)

        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(one, range(8)))
        statuses = sorted(a.status_code for a in answers)
        assert set(statuses) <= {200, 429} and statuses.count(200) >= 2, statuses
        refused = [a for a in answers if a.status_code == 429]
        assert refused, statuses
        for answer in refused:
            assert int(answer.headers["Retry-After"]) >= 1
            error = answer.json()["error"]
            assert error["type"] == "rate_limit_exceeded" and error["code"] == "queue_full" and error["message"]
        samples = metrics(url)
        assert total(samples, "tiankong_rejections_total", reason="queue_full") == len(refused)
        assert total(samples, "tiankong_requests_total", status="429") == len(refused)


def test_tokenize_and_templates_are_answered_while_every_slot_and_the_queue_are_full(
        smol_engine: EngineProcess) -> None:
    """A task client's preparation calls take no engine slot (llama-server answers them on its HTTP thread), so
    the gateway neither queues nor refuses them: with 1 slot and no queue held by a long generation, /tokenize,
    /detokenize and /apply-template answer 200 while a second generation gets 429 (before, all of them did —
    the local batch executor through a busy gateway spent most of its calls on those 429s)."""
    assert wait_until(lambda: idle(smol_engine), 300)
    with serve_app(state_for(smol_engine, max_in_flight=1, queue_size=0)) as url, ThreadPoolExecutor(1) as pool:
        holding = pool.submit(post, url, {**LONG, "max_tokens": 200})
        assert wait_until(lambda: total(metrics(url), "tiankong_in_flight") >= 1, 60)
        assert post(url, LONG).status_code == 429  # the slot and the queue are full
        tokens = post(url, {"content": "hello there"}, "/tokenize")
        assert tokens.status_code == 200 and tokens.json()["tokens"], tokens.text
        text = post(url, {"tokens": tokens.json()["tokens"]}, "/detokenize")
        assert text.status_code == 200 and "hello" in text.json()["content"], text.text
        template = post(url, {"messages": [{"role": "user", "content": "hi"}]}, "/apply-template")
        assert template.status_code == 200 and "hi" in template.json()["prompt"], template.text
        assert not holding.done()  # all of it while the generation held the slot
        assert holding.result().status_code == 200


def test_admission_is_fifo_and_bounded() -> None:
    import asyncio

    async def scenario() -> list[str]:
        admission = Admission(limit=1, queue_size=2)
        order: list[str] = []
        await admission.acquire()

        async def waiter(name: str) -> None:
            await admission.acquire()
            order.append(name)
            admission.release(0.01)

        tasks = [asyncio.ensure_future(waiter(n)) for n in ("a", "b")]
        await asyncio.sleep(0)
        assert admission.waiting == 2 and not admission.has_room()
        with pytest.raises(QueueFull):
            await admission.acquire()
        cancelled = asyncio.ensure_future(waiter("never"))
        await asyncio.sleep(0)
        cancelled.cancel()
        admission.release(0.01)
        await asyncio.gather(*tasks)
        assert admission.in_flight == 0 and admission.waiting == 0
        return order

    assert asyncio.run(scenario()) == ["a", "b"]


def decoded_by_slot(engine: EngineProcess) -> dict[int, int]:
    slots = httpx.get(f"{engine.url}/slots", timeout=10).json()
    return {s["id"]: int(s.get("next_token", [{}])[0].get("n_decoded", 0)) if s.get("next_token") else 0
            for s in slots}


def test_deadline_gives_504_and_cancels_the_engine_request(smol_engine: EngineProcess) -> None:
    assert wait_until(lambda: idle(smol_engine), 300)
    with serve_app(state_for(smol_engine, request_timeout_s=0.5)) as url:
        answer = post(url, {**LONG, "max_tokens": 1500})
        assert answer.status_code == 504, answer.text
        assert answer.json()["error"]["code"] == "deadline_exceeded"
        streamed = httpx.post(f"{url}/v1/chat/completions", json={**LONG, "max_tokens": 1500, "stream": True},
                              timeout=60)
        assert streamed.status_code in (200, 504)
        if streamed.status_code == 200:
            assert "deadline_exceeded" in streamed.text
        assert wait_until(lambda: idle(smol_engine), 300)  # generous: a starved CI machine answers /slots slowly
        assert max(decoded_by_slot(smol_engine).values()) < 1500  # cancelled, not run to max_tokens


# --- client disconnect ----------------------------------------------------------------------------------------


def test_client_disconnect_mid_stream_cancels_the_engine(gateway: str, smol_engine: EngineProcess) -> None:
    assert wait_until(lambda: idle(smol_engine), 300)
    body = {**LONG, "max_tokens": 1500, "stream": True}
    with httpx.stream("POST", f"{gateway}/v1/chat/completions", json=body, timeout=120) as answer:
        assert answer.status_code == 200
        seen = 0
        for line in answer.iter_lines():
            seen += line.startswith("data: {")
            if seen >= 3:
                break
    assert wait_until(lambda: idle(smol_engine), 300)
    assert max(decoded_by_slot(smol_engine).values()) < 1500  # stopped early, not run to max_tokens
    assert wait_until(lambda: total(metrics(gateway), "tiankong_client_disconnects_total") >= 1, 30)


def test_client_disconnect_without_stream_cancels_the_engine(gateway: str, smol_engine: EngineProcess) -> None:
    assert wait_until(lambda: idle(smol_engine), 300)
    before = total(metrics(gateway), "tiankong_client_disconnects_total")

    def impatient() -> None:
        with pytest.raises(httpx.ReadTimeout):
            post(gateway, {**LONG, "max_tokens": 1500}, timeout=1.5)

    impatient()
    assert wait_until(lambda: idle(smol_engine), 300)
    assert max(decoded_by_slot(smol_engine).values()) < 1500
    assert wait_until(lambda: total(metrics(gateway), "tiankong_client_disconnects_total") > before, 30)


# --- streaming, SDK, keep-alive ------------------------------------------------------------------------------


def test_openai_sdk_streams_through_the_gateway(gateway: str) -> None:
    client = openai.OpenAI(base_url=f"{gateway}/v1", api_key="unused", max_retries=0)
    reply = client.chat.completions.create(model=TEST_MODEL, messages=[{"role": "user", "content": "Hi!"}],
                                           max_tokens=10, temperature=0)
    stream = client.chat.completions.create(model=TEST_MODEL, stream=True, max_tokens=10, temperature=0,
                                            messages=[{"role": "user", "content": "Hi!"}])
    pieces = [chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices]
    assert "".join(pieces) == reply.choices[0].message.content


def test_queued_stream_gets_keepalive_comments(gateway: str, smol_engine: EngineProcess) -> None:
    assert wait_until(lambda: idle(smol_engine), 300)
    with ThreadPoolExecutor(2) as pool:
        hogs = [pool.submit(post, gateway, {**LONG, "max_tokens": 32}) for _ in range(2)]
        assert wait_until(lambda: all(slots_busy(smol_engine)), 60)
        answer = httpx.post(f"{gateway}/v1/chat/completions", json={**LONG, "max_tokens": 4, "stream": True},
                            timeout=300)
        assert [h.result().status_code for h in hogs] == [200, 200]
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/event-stream")
    assert ": keep-alive" in answer.text and answer.text.rstrip().endswith("data: [DONE]")


# --- metrics -------------------------------------------------------------------------------------------------


def test_metrics_parse_and_count_requests(gateway: str) -> None:
    assert post(gateway, {**LONG, "max_tokens": 8}).status_code == 200
    assert post(gateway, {"prompt": "1, 2, 3,", "max_tokens": 4}, "/v1/completions").status_code == 200
    streamed = httpx.post(f"{gateway}/v1/chat/completions", json={**LONG, "max_tokens": 8, "stream": True,
                                                                   "stream_options": {"include_usage": True}},
                          timeout=120)
    assert streamed.status_code == 200
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    extracted = post(gateway, {"text": "It works.", "schema": schema}, "/v1/tasks/extract")
    assert extracted.status_code == 200
    assert post(gateway, {"model": "gpt-4", "messages": []}).status_code == 404
    samples = metrics(gateway)
    chat = "/v1/chat/completions"
    assert total(samples, "tiankong_requests_total", route=chat, status="200") >= 2
    assert total(samples, "tiankong_requests_total", route="/v1/tasks/extract", status="200") >= 1
    assert total(samples, "tiankong_requests_total", route=chat, status="404") >= 1
    for histogram in ("tiankong_request_duration_seconds", "tiankong_time_to_first_token_seconds"):
        assert total(samples, f"{histogram}_count", route=chat) >= 2, histogram
    assert total(samples, "tiankong_queue_wait_seconds_count") >= 4
    assert total(samples, "tiankong_prompt_tokens_total") > 0 and total(samples, "tiankong_completion_tokens_total") > 0
    assert total(samples, "tiankong_generation_tokens_per_second_count") >= 1
    for gauge in ("tiankong_queue_depth", "tiankong_in_flight", "tiankong_engine_busy_slots",
                  "tiankong_engine_rss_bytes", "tiankong_engine_restarts_total", "tiankong_engine_up"):
        assert gauge in samples, gauge
    assert total(samples, "tiankong_engine_rss_bytes") > 10_000_000
    # a stream without stream_options.include_usage (the SDK's default) counts its tokens too (from the engine's
    # timings): the counters had stayed still while the dashboard counted them
    before = (total(samples, "tiankong_completion_tokens_total"), total(samples, "tiankong_prompt_tokens_total"))
    plain = httpx.post(f"{gateway}/v1/chat/completions", json={**LONG, "max_tokens": 8, "stream": True},
                       timeout=120)
    assert plain.status_code == 200 and '"usage"' not in plain.text.split("data: [DONE]")[0].rsplit("data:", 2)[-2]
    after = metrics(gateway)
    assert total(after, "tiankong_completion_tokens_total") > before[0]
    assert total(after, "tiankong_prompt_tokens_total") > before[1]
    assert total(samples, "tiankong_engine_slots") == 2


def test_a_tasks_side_by_side_engine_calls_hold_admission_slots(gateway: str) -> None:
    """Issue 21 row 3: a rerank runs its documents' calls side by side; every call beyond the request's first
    holds a slot of the admission (``tiankong_task_extra_in_flight``), ``tiankong_in_flight`` never passes the
    limit, and a chat sent meanwhile is answered before the rerank ends (extra calls never pass a waiter)."""
    topics = ["sales", "hiring", "travel", "security", "weather", "budget", "support", "outage"]
    docs = [f"Note {i}: the {topics[i % 8]} update for week {i} lists {i + 3} open items and one decision."
            for i in range(40)]
    finished: dict[str, float] = {}
    seen_extra = seen_in_flight = 0.0
    limit = 0.0
    with ThreadPoolExecutor(2) as pool:
        def timed(name: str, body: dict[str, Any], path: str) -> httpx.Response:
            answer = post(gateway, body, path)
            finished[name] = time.monotonic()
            return answer

        rerank = pool.submit(timed, "rerank", {"query": "security incidents", "documents": docs, "mode": "pointwise"},
                             "/v1/tasks/rerank")
        chat = None
        while not rerank.done():
            samples = metrics(gateway)
            extra = total(samples, "tiankong_task_extra_in_flight")
            seen_extra = max(seen_extra, extra)
            seen_in_flight = max(seen_in_flight, total(samples, "tiankong_in_flight"))
            limit = total(samples, "tiankong_in_flight_limit")
            if extra and chat is None:
                chat = pool.submit(timed, "chat", {"messages": [{"role": "user", "content": "Say hi."}],
                                                   "max_tokens": 4, "temperature": 0}, "/v1/chat/completions")
            time.sleep(0.01)
        assert rerank.result().status_code == 200, rerank.result().text
        assert len(rerank.result().json()["results"]) == len(docs)
        assert chat is not None, "no extra slot was ever held: the rerank's calls were not counted in admission"
        assert chat.result().status_code == 200, chat.result().text
    assert limit >= 2 and seen_extra >= 1 and seen_in_flight <= limit, (seen_extra, seen_in_flight, limit)
    assert finished["chat"] < finished["rerank"]
    after = metrics(gateway)
    assert total(after, "tiankong_task_extra_in_flight") == 0 and total(after, "tiankong_in_flight") == 0


def test_metrics_registries_are_per_app(smol_engine: EngineProcess) -> None:
    first = create_app(state_for(smol_engine))
    second = create_app(state_for(smol_engine))
    assert first.state.metrics.registry is not second.state.metrics.registry


# --- errors and OpenAPI ---------------------------------------------------------------------------------------


def test_bad_requests_are_openai_style_4xx(smol_engine: EngineProcess) -> None:
    with serve_app(state_for(smol_engine, max_body_bytes=2048)) as url:
        cases: list[tuple[str, bytes, int, str]] = [
            ("/v1/chat/completions", b"{not json", 400, "invalid_json"),
            ("/v1/chat/completions", b"\xff\xfe\x00garbage", 400, "invalid_utf8"),
            ("/v1/chat/completions", b"[1, 2]", 400, "invalid_body"),
            ("/v1/chat/completions", json.dumps({"messages": "x" * 4096}).encode(), 413, "body_too_large"),
            ("/v1/tasks/classify", json.dumps({"text": 5, "labels": "ab"}).encode(), 400, "invalid_request_error"),
            ("/v1/tasks/nope", b"{}", 404, "not_found"),
        ]
        for path, raw, status, code in cases:
            answer = httpx.post(f"{url}{path}", content=raw, headers={"content-type": "application/json"},
                                timeout=60)
            assert answer.status_code == status, (path, raw[:40], answer.text)
            error = answer.json()["error"]
            assert error["code"] == code and error["message"] and error["type"], error
        wrong_type = post(url, {"messages": 5, "max_tokens": 4})
        assert 400 <= wrong_type.status_code < 500 and wrong_type.json()["error"]["message"]
        method = httpx.get(f"{url}/v1/chat/completions", timeout=10)
        assert method.status_code == 405 and method.json()["error"]["code"] == "method_not_allowed"


def test_openapi_lists_every_route(gateway: str) -> None:
    answer = httpx.get(f"{gateway}/openapi.json", timeout=10)
    assert answer.status_code == 200
    document = answer.json()
    assert document["openapi"].startswith("3.")
    paths = set(document["paths"])
    assert {"/health", "/metrics", "/v1/models", "/v1/chat/completions", "/v1/completions", "/v1/embeddings",
            "/v1/tasks/extract", "/v1/tasks/classify", "/v1/tasks/guard", "/v1/tasks/rerank"} <= paths
    classify = document["paths"]["/v1/tasks/classify"]["post"]
    ref = classify["requestBody"]["content"]["application/json"]["schema"]["$ref"].split("/")[-1]
    body = document["components"]["schemas"][ref]
    assert set(body["required"]) == {"text"} and {"labels", "decider"} <= set(body["properties"])  # labels | decider
    assert classify["responses"]["429"]["content"]["application/json"]["schema"]["$ref"].endswith("/Error")


# --- supervision ---------------------------------------------------------------------------------------------


def test_engine_killed_under_load_fails_only_in_flight_and_comes_back(engine_binary: EngineBinary,
                                                                     smol_path: Path) -> None:
    engine = EngineProcess(EngineConfig(model=smol_path, ctx=2048, slots=2, alias=TEST_MODEL), engine_binary)
    engine.start()
    try:
        with serve_app(state_for(engine, queue_size=8, engine_retry_wait_s=60)) as url:
            # 256 tokens each: on a fast CPU six 32-token answers came and went between two /slots probes (a fresh
            # clone's run never saw the engine busy); the engine is killed as soon as it is seen busy
            body = {**LONG, "max_tokens": 256}
            with ThreadPoolExecutor(6) as pool:
                plain = [pool.submit(post, url, body) for _ in range(4)]
                streams = [pool.submit(post, url, {**body, "stream": True}) for _ in range(2)]
                seen_busy = wait_until(lambda: idle(engine) is False, 60, step_s=0.02)
                assert seen_busy, [f.result().status_code for f in plain if f.done()]
                first_pid = engine.pid
                assert first_pid is not None
                os.kill(first_pid, signal.SIGKILL)
                answers = [f.result() for f in plain]
                streamed = [f.result() for f in streams]
            for answer in answers:
                assert answer.status_code in (200, 503), answer.text
                if answer.status_code == 503:
                    assert answer.json()["error"]["type"] == "engine_error"
            for answer in streamed:
                assert answer.status_code in (200, 503), answer.text
                assert answer.status_code == 503 or "data: [DONE]" in answer.text or "engine_error" in answer.text
            assert wait_until(lambda: engine.state.value == "ready" and engine.pid != first_pid, 120)
            assert engine.restarts == 1
            assert post(url, {**LONG, "max_tokens": 4}).status_code == 200
            assert total(metrics(url), "tiankong_engine_restarts_total") == 1
            samples = metrics(url)  # the gateway hears the engine's state changes as events
            assert total(samples, "tiankong_engine_transitions_total", state="starting") == 1
            assert total(samples, "tiankong_engine_transitions_total", state="ready") == 1
    finally:
        engine.stop()


def test_wedge_watch_restarts_an_engine_whose_slots_hang(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_MODE", "wedge")
    engine = EngineProcess(EngineConfig(model=Path("/dev/null")), FAKE_SERVER, stop_grace_s=1.0)
    with engine:
        first = engine.pid
        watch = WedgeWatch(engine, interval_s=0.05, timeout_s=0.3, failures=2, log=lambda _: None)
        assert not watch.check_once()  # one miss is not a wedge …
        assert watch.check_once()  # … the second one is
        assert engine.restarts == 1 and engine.pid != first


def test_restart_after_n_requests_drains_then_recycles(engine_binary: EngineBinary, smol_path: Path) -> None:
    engine = EngineProcess(EngineConfig(model=smol_path, ctx=1024, slots=2, alias=TEST_MODEL), engine_binary,
                           restart_after_requests=3)
    engine.start()
    try:
        first = engine.pid
        with serve_app(state_for(engine, queue_size=8)) as url:
            with ThreadPoolExecutor(5) as pool:
                answers = list(pool.map(lambda _: post(url, {**LONG, "max_tokens": 4}), range(5)))
            assert [a.status_code for a in answers] == [200] * 5, [a.text for a in answers]
            assert wait_until(lambda: engine.pid != first and engine.state.value == "ready", 120)
            assert engine.restarts >= 1
            assert post(url, {**LONG, "max_tokens": 4}).status_code == 200
            assert total(metrics(url), "tiankong_engine_retries_total") == 0  # drained: nobody was cut off
    finally:
        engine.stop()


def test_waiters_that_batch_with_the_running_adapter_set_go_first_without_starving_anyone() -> None:
    import asyncio

    async def scenario(batching: bool) -> tuple[list[str], int]:
        admission = Admission(limit=2, queue_size=16, group_batching=batching)
        await admission.acquire(("A",))
        await admission.acquire(("B",))  # two slots: one base-ish group A, one group B
        order: list[str] = []

        async def waiter(name: str, group: tuple[str]) -> None:
            await admission.acquire(group)
            order.append(name)

        names = ["b1", "a1", "b2", "a2", "b3", "a3"]
        tasks = [asyncio.ensure_future(waiter(n, ("A",) if n[0] == "a" else ("B",))) for n in names]
        await asyncio.sleep(0)
        admission.release(0.1, ("A",))  # A left: B runs, so a B waiter is let in (b1 is the head anyway)
        await asyncio.sleep(0)
        admission.release(0.1, ("B",))  # the other B leaves; b1 still runs: b2 goes ahead of a1
        await asyncio.sleep(0)
        for _ in range(4):
            admission.release(0.1, ("B",))
            await asyncio.sleep(0)
        await asyncio.gather(*tasks)
        return order, admission.reordered

    grouped, reordered = asyncio.run(scenario(True))
    assert grouped[:3] == ["b1", "b2", "b3"] and sorted(grouped) == sorted(["b1", "a1", "b2", "a2", "b3", "a3"])
    assert reordered == 2
    fifo, none = asyncio.run(scenario(False))
    assert fifo == ["b1", "a1", "b2", "a2", "b3", "a3"] and none == 0


def test_grouping_skips_a_waiter_only_a_bounded_number_of_times() -> None:
    import asyncio

    from tiankong.gateway.admission import MAX_SKIPS_PER_SLOT

    async def scenario() -> int:
        admission = Admission(limit=2, queue_size=64)
        await admission.acquire(("B",))  # holds its slot throughout: B is always running
        await admission.acquire(("B",))
        served: list[str] = []

        async def waiter(name: str, group: tuple[str]) -> None:
            await admission.acquire(group)
            served.append(name)

        tasks = [asyncio.ensure_future(waiter("a", ("A",)))]
        tasks += [asyncio.ensure_future(waiter(f"b{i}", ("B",))) for i in range(20)]
        await asyncio.sleep(0)
        while len(served) < 21:
            admission.release(0.1, ("A",) if served and served[-1] == "a" else ("B",))
            await asyncio.sleep(0)
        await asyncio.gather(*tasks)
        return served.index("a")

    assert asyncio.run(scenario()) == MAX_SKIPS_PER_SLOT * 2  # passed over exactly the bound (× slots), then served
