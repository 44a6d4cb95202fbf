"""The guarantees that matter most, each on its own small input with no engine (the mutation check,
``tools/mutants.py``, removes each guarantee from a copy of the source and expects a test here to fail):
SQL's EXPLAIN check, schema validation of a structured answer, tool arguments valid against their schema,
fast-forward's token counts, one result per id in a batch output, a keyless gateway answers loopback Hosts only,
redaction redacts a near-miss ID (fail safe)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from helpers.scripted import ScriptedEngine, chat_as_asked, chat_reply, completion
from tiankong import Client
from tiankong.batch.store import OutputWriter
from tiankong.errors import RetriesExhausted
from tiankong.gateway.origin import OriginCheck
from tiankong.structured.fastforward import _PROBE as LAYOUT_PROBE
from tiankong.tasks.sql import check_query, empty_copy, schema_from_ddl

URL = "http://engine.test"
DDL = ("CREATE TABLE artist (id INTEGER PRIMARY KEY, name TEXT);\n"
       "CREATE TABLE album (id INTEGER PRIMARY KEY, title TEXT, year INTEGER, artist_id INTEGER);")
CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


# --- SQL: SQLite's EXPLAIN refuses what the names check and sqlglot let through -------------------------------

#: every name is in the schema and sqlglot parses them: only EXPLAIN can refuse these
EXPLAIN_ONLY = ("SELECT album.title FROM album WHERE COUNT(*) > 1", "SELECT SUM(COUNT(*)) FROM album",
                "SELECT no_such_function(album.title) FROM album",
                "SELECT id FROM album AS T1 JOIN artist AS T2 ON T1.artist_id = T2.id")


@pytest.mark.parametrize("sql", EXPLAIN_ONLY)
def test_sqlite_explain_refuses_queries_the_other_checks_pass(sql: str) -> None:
    schema = schema_from_ddl(DDL)
    errors = check_query(sql, schema, empty_copy(schema))[0]
    assert len(errors) == 1 and errors[0].startswith("SQLite:"), errors


def test_a_query_explain_refuses_is_retried_with_sqlites_words() -> None:
    answers = iter(["SELECT album.title FROM album WHERE COUNT(*) > 1", "SELECT COUNT(*) FROM album"])
    engine = ScriptedEngine().on("/v1/chat/completions", lambda body: chat_as_asked(body, next(answers)))
    with Client(URL, transport=engine.transport()) as client:
        result = client.sql("how many albums", DDL)
    assert result.sql == "SELECT COUNT(*) FROM album" and result.attempts == 2
    retry = engine.bodies("/v1/chat/completions")[1]["messages"][-1]["content"]
    assert "SQLite:" in retry and "misuse of aggregate" in retry


def test_explain_refusal_twice_is_an_error_not_a_query() -> None:
    engine = ScriptedEngine().on("/v1/chat/completions",
                                 lambda body: chat_as_asked(body, "SELECT SUM(COUNT(*)) FROM album"))
    with Client(URL, transport=engine.transport()) as client, pytest.raises(RetriesExhausted) as err:
        client.sql("how many albums", DDL)
    assert any(e.startswith("SQLite:") for e in err.value.errors)


# --- structured output: the answer is validated against the schema -----------------------------------------


@pytest.mark.parametrize("answer", ['{"city": 5}', '{"town": "Paris"}', '"Paris"'])
def test_an_answer_against_the_schema_is_retried_then_refused(answer: str) -> None:
    engine = ScriptedEngine().on("/v1/chat/completions", lambda body: chat_reply(answer))
    with Client(URL, transport=engine.transport()) as client:
        client.fast_forward = False
        with pytest.raises(RetriesExhausted) as err:
            client.extract_result("Paris is in France", CITY)
    assert err.value.attempts == 2 and err.value.errors


def test_an_invalid_first_answer_is_repaired_by_the_second() -> None:
    answers = iter(['{"city": 5}', '{"city": "Paris"}'])
    engine = ScriptedEngine().on("/v1/chat/completions", lambda body: chat_reply(next(answers)))
    with Client(URL, transport=engine.transport()) as client:
        client.fast_forward = False
        result = client.extract_result("Paris is in France", CITY)
    assert result.data == {"city": "Paris"} and result.attempts == 2
    assert "/city" in engine.bodies("/v1/chat/completions")[1]["messages"][-1]["content"]  # the validator's words


# --- fast-forward: forced text is read as prompt, only free values are decoded -------------------------------


def test_fast_forward_counts_decoded_and_forced_tokens() -> None:
    # the scripted tokenizer is one token per character: the answer {"city":"Paris"} is 16 tokens, of which the
    # engine decoded the 2 it says (tokens_predicted) for the free value; the 14 others were forced
    engine = ScriptedEngine().on("/completion", lambda body: completion("Paris", stopping_word='"}', predicted=2))
    with Client(URL, transport=engine.transport()) as client:
        result = client.extract_result("Paris is in France", CITY)
    assert result.path == "fast_forward" and result.raw == '{"city":"Paris"}'
    assert (result.decoded_tokens, result.forced_tokens) == (2, 14)
    probe, body = engine.bodies("/completion")  # the layout probe (the model's own first tokens), the value
    assert probe["grammar"] == LAYOUT_PROBE and probe["prompt"] == body["prompt"][:len(probe["prompt"])]
    assert body["prompt"].endswith('{"city":"')  # the forced prefix is prompt, not decoded


def test_fast_forward_decodes_fewer_tokens_than_the_whole_answer() -> None:
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                                               "member": {"type": "boolean"}},
              "required": ["name", "age", "member"], "additionalProperties": False}

    def reply(body: dict[str, object]) -> dict[str, object]:
        grammar = str(body.get("grammar", ""))
        if "char" in grammar:
            return completion("Ana", stopping_word='",', predicted=1)
        if "[0-9]" in grammar:
            return completion("41", stopping_word=",", predicted=1)
        return completion("true", predicted=1)  # the boolean: one token narrows true/false

    engine = ScriptedEngine().on("/completion", reply)
    with Client(URL, transport=engine.transport()) as client:
        result = client.extract_result("Ana, 41, is a member", schema)
    assert result.data == {"name": "Ana", "age": 41, "member": True} and result.path == "fast_forward"
    assert result.decoded_tokens == 3 and result.forced_tokens == len(result.raw) - 3
    assert result.decoded_tokens < result.forced_tokens


# --- batch store: one result per input id --------------------------------------------------------------------


def test_the_output_takes_one_result_per_id(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    writer = OutputWriter(out, group=1)
    assert writer.add({"id": "a", "answer": 1}, "attempt-1")
    assert not writer.add({"id": "a", "answer": 2}, "attempt-2")  # a second result for a: refused
    assert writer.add({"id": "b", "answer": 3}, "attempt-1")
    writer.close()
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["id"], r["answer"]) for r in lines] == [("a", 1), ("b", 3)] and writer.refused == 1
    again = OutputWriter(out, group=1)  # the next run reads what is written: a is done
    assert not again.add({"id": "a", "answer": 4}, "attempt-3")
    again.close()


# --- gateway: without API keys only loopback Hosts are answered (DNS rebinding) ------------------------------


def _guarded(keyless: bool) -> TestClient:
    app = Starlette(routes=[Route("/health", lambda request: PlainTextResponse("ok"))])
    return TestClient(OriginCheck(app, keyless=lambda: keyless))


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8080", "127.0.0.1.evil.example", "10.0.0.2"])
def test_a_keyless_gateway_refuses_a_foreign_host(host: str) -> None:
    answer = _guarded(True).get("/health", headers={"host": host})
    assert answer.status_code == 403 and answer.json()["error"]["code"] == "host_not_allowed"


@pytest.mark.parametrize("host", ["127.0.0.1:8000", "localhost", "[::1]:8000", "app.localhost"])
def test_a_keyless_gateway_answers_loopback_hosts(host: str) -> None:
    assert _guarded(True).get("/health", headers={"host": host}).status_code == 200


def test_a_gateway_with_keys_answers_any_host() -> None:
    assert _guarded(False).get("/health", headers={"host": "api.example.com"}).status_code == 200


# --- redaction: a near-miss ID is redacted (fail safe) -------------------------------------------------------


def test_a_near_miss_id_number_is_still_redacted() -> None:
    engine = ScriptedEngine()
    with Client(URL, transport=engine.transport()) as client:
        # a card number after its keyword whose Luhn check fails: still somebody's number
        result = client.redact("my card number: 4111 1111 1111 1112", use_model=False)
    assert "4111" not in result.text and [e.validated for e in result.entities] == [False]
    assert engine.calls == []
