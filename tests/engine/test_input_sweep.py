"""Requests a users'-conditions sweep of the gateway found mishandled (2026-12-07): each is now a clear 4xx naming
the field, before any engine is asked, never a 500, a traceback or a silently different answer. Real gateway in
front of SmolLM2 (the rerank and dedupe routes start their embedding part)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from conftest import serve_app
from tiankong import jsonsafe
from tiankong.batch.files import InvalidFile, check_batch_input
from tiankong.engine import EngineProcess
from tiankong.gateway import GatewayState
from tiankong.models import TEST_MODEL

CHAT = "/v1/chat/completions"
#: a JSON string holding an escaped lone surrogate: Python's json accepts it, no encoder downstream does
LONE = '"mail a@b.com \\ud83d x"'


@pytest.fixture(scope="module")
def gateway(smol_engine: EngineProcess) -> Iterator[str]:
    with serve_app(GatewayState.for_engine(smol_engine, TEST_MODEL)) as url:
        yield url


def post(url: str, path: str, body: object = None, *, content: bytes | None = None) -> httpx.Response:
    raw = content if content is not None else json.dumps(body).encode()
    return httpx.post(f"{url}{path}", content=raw, headers={"content-type": "application/json"}, timeout=120)


def error_of(answer: httpx.Response, status: int = 400) -> dict[str, str]:
    assert answer.status_code == status, answer.text
    error: dict[str, str] = answer.json()["error"]
    assert error["message"] and error["type"] and "Traceback" not in answer.text
    return error


@pytest.mark.parametrize("path, template", [
    (CHAT, '{"messages": [{"role": "user", "content": %s}], "max_tokens": 2}'),
    ("/v1/completions", '{"prompt": %s, "max_tokens": 2}'),
    ("/v1/tasks/redact", '{"text": %s, "use_model": false}'),
    ("/v1/tasks/classify", '{"text": "fine", "labels": ["a", %s]}'),
    ("/v1/tasks/extract", '{"text": %s, "schema": {"type": "object"}}'),
    ("/v1/rerank", '{"query": "q", "documents": ["a", %s]}'),
])
def test_a_lone_surrogate_is_a_400_that_says_where(gateway: str, path: str, template: str) -> None:
    error = error_of(post(gateway, path, content=(template % LONE).encode()))
    assert error["code"] == "invalid_json" and "surrogate" in error["message"]


def test_surrogates_are_refused_only_when_lone() -> None:
    with pytest.raises(jsonsafe.UnsafeJSON, match=r"records\[1\]\.text holds a lone"):
        jsonsafe.loads('{"records": [{"text": "ok"}, {"text": "a \\udc00"}]}')
    with pytest.raises(jsonsafe.UnsafeJSON, match="a key of"):
        jsonsafe.loads('{"\\ud800": 1}')
    assert jsonsafe.loads('{"t": "\\ud83d\\ude00"}') == {"t": "\U0001f600"}  # a pair is one character
    assert jsonsafe.loads('{"t": "\\\\ud83d"}') == {"t": "\\ud83d"}  # an escaped backslash, not an escape


def test_a_batch_upload_with_a_lone_surrogate_is_refused_with_its_lines(tmp_path: Path) -> None:
    # before: the upload was taken, the batch failed as a whole and its valid lines were never answered
    lines = ['{"custom_id": "s1", "method": "POST", "url": "/v1/tasks/classify", "body": {"text": "x\\ud800", '
             '"labels": ["a", "b"]}}',
             '{"custom_id": "s2\\ud800", "method": "POST", "url": "/v1/tasks/classify", "body": {"text": "fine", '
             '"labels": ["a", "b"]}}',
             '{"custom_id": "s3", "method": "POST", "url": "/v1/tasks/classify", "body": {"text": "fine", '
             '"labels": ["a", "b"]}}']
    upload = tmp_path / "in.jsonl"
    upload.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(InvalidFile) as err:
        check_batch_input(upload, 100)
    assert [line for line, _ in err.value.problems] == [1, 2]
    assert all("surrogate" in text for _, text in err.value.problems)


def test_a_token_budget_the_engine_would_wrap_is_refused(gateway: str) -> None:
    # llama-server reads max_tokens as a 32-bit int: 2**32 + 1 came back as a 200 cut after 1 token
    for value in (2**32 + 1, 10**12):
        error = error_of(post(gateway, CHAT, {"messages": [{"role": "user", "content": "hi"}], "max_tokens": value}))
        assert error["code"] == "invalid_max_tokens" and error["param"] == "max_tokens" and "2147483647" in \
            error["message"]


def test_empty_messages_are_refused(gateway: str) -> None:
    error = error_of(post(gateway, CHAT, {"messages": [], "max_tokens": 4}))
    assert error["code"] == "invalid_messages" and "non-empty" in error["message"]


def test_v1_rerank_model_names_the_ranker_or_a_served_model(gateway: str) -> None:
    body = {"query": "reset my password", "documents": ["how to reset a password", "opening hours"]}
    unknown = error_of(post(gateway, "/v1/rerank", {**body, "model": "nope"}), 404)
    assert unknown["code"] == "model_not_found" and "nope" in unknown["message"]
    wrong = error_of(post(gateway, "/v1/rerank", {**body, "model": 5}))
    assert wrong["code"] == "invalid_model" and wrong["param"] == "model"
    for model, echoed in ((None, "tiankong-rerank"), ("tiankong-rerank", "tiankong-rerank"), (TEST_MODEL, TEST_MODEL)):
        answer = post(gateway, "/v1/rerank", {**body, **({"model": model} if model else {})})
        assert answer.status_code == 200, answer.text
        assert answer.json()["model"] == echoed and answer.json()["results"][0]["index"] == 0


def test_extract_refuses_a_field_it_would_ignore(gateway: str) -> None:
    schema = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    error = error_of(post(gateway, "/v1/tasks/extract", {"text": "Bob is 42", "schema": schema, "foo": 1}))
    assert error["param"] == "foo" and "instructions" in error["message"]
    for body, field in (({"schema": schema}, "text"), ({"text": "Bob"}, "schema"),
                        ({"text": "Bob", "schema": schema, "instructions": 3}, "instructions")):
        assert error_of(post(gateway, "/v1/tasks/extract", body))["param"] == field


def test_a_dedupe_decider_is_checked_even_when_no_pair_needs_it(gateway: str) -> None:
    # before: a typo passed whenever no pair fell in the uncertain band (200), and failed when one did (400)
    body = {"records": [{"id": 1, "text": "apples"}, {"id": 2, "text": "zebra crossing"}], "decider": "nosuch"}
    error = error_of(post(gateway, "/v1/tasks/dedupe", body))
    assert "no such decider" in error["message"]


def test_an_upload_that_is_not_multipart_is_told_how_to_upload(gateway: str) -> None:
    answer = httpx.post(f"{gateway}/v1/files", content=b'{"custom_id": "a"}\n', timeout=30,
                        headers={"content-type": "text/plain"})
    error = error_of(answer, 415)
    assert "multipart/form-data" in error["message"] and "purpose=batch" in error["message"]


def test_finding_a_lone_surrogate_is_bounded_in_memory_and_pairs_cost_no_walk() -> None:
    # a review found the first walk built every child's path: a 90 KB body (a long key, many list items) took ~1 GB
    import tracemalloc

    body = '{"' + "k" * 10_000 + '": ["\\ud83d", ' + ",".join(["0"] * 40_000) + "]}"
    tracemalloc.start()
    with pytest.raises(jsonsafe.UnsafeJSON) as err:
        jsonsafe.loads(body)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 64 * 2**20 and len(str(err.value)) < 400  # measured 3.2 MiB; the path is cut at 120 characters
    emoji = json.dumps({"records": [{"id": i, "text": "ok 😀"} for i in range(2000)]})  # escaped pairs
    assert len(jsonsafe.loads(emoji)["records"]) == 2000


def test_a_system_prompt_alone_is_a_conversation() -> None:
    from tiankong.client._shared import as_messages

    assert as_messages([], system="Be brief.") == [{"role": "system", "content": "Be brief."}]
    with pytest.raises(Exception, match="non-empty"):
        as_messages([])


def test_the_guard_shows_its_score_as_finely_as_its_thresholds() -> None:
    from tiankong.tasks.guard import _judgement

    words = _judgement(0.9575, 0.1059, 0.9578)  # shown as p=0.96 before, under "blocked from 0.958"
    assert "p=0.9575" in words and "0.9578" in words and words.startswith("finds it somewhat like")


def test_refusals_of_an_empty_field_name_it(gateway: str) -> None:
    cases = [("/v1/tasks/guard", {"text": "  "}, "text"),
             ("/v1/tasks/rerank", {"query": " ", "documents": ["a"]}, "query"),
             ("/v1/tasks/rerank", {"query": "q", "documents": []}, "documents"),
             ("/v1/rerank", {"query": "q"}, "documents"),
             ("/v1/tasks/redact", {"text": "", "use_model": False}, "text")]
    for path, body, field in cases:
        assert error_of(post(gateway, path, body))["param"] == field, (path, body)


def test_batch_lines_are_held_to_the_gateways_checks(tmp_path: Path) -> None:
    # a batch run straight against an engine forwarded these unchecked (an empty prompt; a budget wrapped to 1);
    # each fails on its own line, before the engine, as the gateway refuses them
    import asyncio

    from tiankong import AsyncClient
    from tiankong.batch.openai_fmt import run_request
    from tiankong.errors import ConfigError

    hi = [{"role": "user", "content": "hi"}]
    cases = [({"messages": []}, "non-empty"), ({"messages": hi, "max_tokens": 2**32 + 1}, "max_tokens"),
             ({"messages": hi, "max_completion_tokens": 0}, "max_completion_tokens")]

    async def answer(body: dict[str, object]) -> object:
        async with AsyncClient("http://127.0.0.1:9") as client:  # never reached
            return await run_request(client, {"custom_id": "a", "method": "POST", "url": CHAT, "body": body})

    for body, needle in cases:
        with pytest.raises(ConfigError, match=needle):
            asyncio.run(answer(body))


def test_a_body_value_of_the_wrong_json_type_is_refused_not_converted(gateway: str) -> None:
    # before: `"top_n": true` ranked as top 1, `"near": "0.5"` merged at 0.5, `"multi_label": "no"` was read as a flag
    records = [{"id": 1, "text": "apples and pears"}, {"id": 2, "text": "apples and pears"}]
    cases = [("/v1/rerank", {"query": "q", "documents": ["a", "b"], "top_n": True}, "top_n"),
             ("/v1/tasks/rerank", {"query": "q", "documents": ["a", "b"], "top_n": 1.0}, "top_n"),
             ("/v1/tasks/dedupe", {"records": records, "near": "0.5"}, "near"),
             ("/v1/tasks/classify", {"text": "hi", "labels": ["a", "b"], "multi_label": "no"}, "multi_label"),
             ("/v1/rerank", {"query": "q", "documents": ["a", "b"], "return_documents": "no"}, "return_documents")]
    for path, body, field in cases:
        error = error_of(post(gateway, path, body))
        assert error["param"] == field, (path, body, error)
    # the same values in their own JSON types are answered
    answer = post(gateway, "/v1/rerank", {"query": "q", "documents": ["a", "b"], "top_n": 1, "return_documents": True})
    assert answer.status_code == 200 and len(answer.json()["results"]) == 1
    assert post(gateway, "/v1/tasks/dedupe", {"records": records, "near": 0.5}).status_code == 200


def test_a_repeated_dedupe_id_and_bad_batch_metadata_name_their_field(gateway: str) -> None:
    records = [{"id": 1, "text": "a"}, {"id": "1", "text": "b"}]
    assert error_of(post(gateway, "/v1/tasks/dedupe", {"records": records}))["param"] == "records[1].id"
    body = {"records": [{"id": 1, "text": "a"}, {"id": 2, "text": "b"}], "near": 0.5, "near_low": 0.9}
    assert error_of(post(gateway, "/v1/tasks/dedupe", body))["param"] == "near_low"
    body = {"input_file_id": "file-x", "endpoint": CHAT, "completion_window": "24h", "metadata": {"k": 5}}
    assert error_of(post(gateway, "/v1/batches", body))["param"] == "metadata"


def test_a_temperature_outside_0_to_2_is_refused_on_every_generation_route(gateway: str) -> None:
    # before: only structured output checked it; 1e999 (read as infinity), -5 and "hot" went to the engine
    for path, body in ((CHAT, {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}),
                       ("/v1/completions", {"prompt": "hi", "max_tokens": 2})):
        for value in ("-5", "1e999", '"hot"', "true"):
            raw = json.dumps(body)[:-1] + f', "temperature": {value}}}'
            error = error_of(post(gateway, path, content=raw.encode()))
            assert error["code"] == "invalid_temperature" and error["param"] == "temperature", (path, value)
        assert post(gateway, path, {**body, "temperature": 0.7}).status_code == 200


def test_llama_cpps_own_completion_takes_its_own_temperatures(gateway: str) -> None:
    # the review: /completion is llama.cpp's, where a negative temperature means greedy with probabilities
    answer = post(gateway, "/completion", {"prompt": "hi", "n_predict": 2, "temperature": -1})
    assert answer.status_code == 200, answer.text
    raw = b'{"prompt": "hi", "n_predict": 2, "temperature": 1e999}'
    assert error_of(post(gateway, "/completion", content=raw))["code"] == "invalid_temperature"
