"""Hostile and careless input (issue 21): each case is a clear 4xx or a one-line CLI error, never a 500, a
traceback or silently wrong output. Real gateway in front of SmolLM2."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from conftest import assert_one_line_error, run_cli, serve_app
from tiankong import Client, jsonsafe
from tiankong.batch import build_job, run
from tiankong.config import TiankongConfig, load_config
from tiankong.engine import EngineProcess
from tiankong.errors import ConfigError
from tiankong.gateway import GatewayState
from tiankong.models import TEST_MODEL

CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def gateway(smol_engine: EngineProcess) -> Iterator[str]:
    with serve_app(GatewayState.for_engine(smol_engine, TEST_MODEL)) as url:
        yield url


def post(url: str, path: str, body: object = None, *, content: bytes | None = None,
         timeout: float = 60) -> httpx.Response:
    if content is None:
        content = json.dumps(body).encode()
    return httpx.post(f"{url}{path}", content=content, headers={"content-type": "application/json"}, timeout=timeout)


def error_of(answer: httpx.Response, status: int = 400) -> dict[str, str]:
    assert answer.status_code == status, answer.text
    error: dict[str, str] = answer.json()["error"]
    assert error["message"] and error["type"]
    return error


# --- row 4 and 6: JSON nested 100,000 deep; NaN / Infinity ---------------------------------------------------


@pytest.mark.parametrize("path", [CHAT, "/v1/completions", "/v1/embeddings", "/v1/tasks/classify",
                                  "/v1/tasks/extract"])
def test_deeply_nested_json_is_a_400_on_every_post_route(gateway: str, path: str) -> None:
    deep = b'{"messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    error = error_of(post(gateway, path, content=deep))
    assert error["code"] == "invalid_json" and "nested deeper" in error["message"]


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_numbers_are_refused(gateway: str, constant: str) -> None:
    raw = '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "temperature": ' + constant + "}"
    error = error_of(post(gateway, CHAT, content=raw.encode()))
    assert error["code"] == "invalid_json" and constant.lstrip("-") in error["message"]
    with pytest.raises(jsonsafe.UnsafeJSON):
        jsonsafe.loads('{"a": [1, ' + constant + "]}")


def test_json_depth_is_counted_without_recursion() -> None:
    value: object = 1
    for _ in range(5000):
        value = [value]
    assert jsonsafe.depth(value, limit=10) > 10 and jsonsafe.depth({"a": [{"b": 1}]}) == 3


# --- row 5: messages that are not objects ---------------------------------------------------------------------


@pytest.mark.parametrize("messages, where", [(["hi"], "messages[0]"), ([None], "messages[0]"),
                                             ([{"role": "user", "content": "a"}, 3], "messages[1]"),
                                             ("hi", "messages must be a non-empty list"),
                                             ([], "messages must be a non-empty list")])
def test_bad_messages_name_the_index(gateway: str, messages: object, where: str) -> None:
    error = error_of(post(gateway, CHAT, {"messages": messages, "max_tokens": 2}))
    assert where in error["message"] and error["code"] == "invalid_messages"


# --- row 7: image bytes that are not an image; an image to a text-only engine --------------------------------

PNG_1X1 = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQ"
                           "AAAABJRU5ErkJggg==")


def _image_chat(data: bytes, mime: str = "image/png") -> dict[str, object]:
    url = f"data:{mime};base64,{base64.b64encode(data).decode()}"
    return {"max_tokens": 4, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "What is it?"}, {"type": "image_url", "image_url": {"url": url}}]}]}


def test_image_parts_are_checked_by_their_bytes_and_the_engine(gateway: str) -> None:
    error = error_of(post(gateway, CHAT, _image_chat(b"this is plain text, not a picture")))
    assert error["code"] == "invalid_image" and "not a PNG, JPEG" in error["message"]
    error = error_of(post(gateway, CHAT, _image_chat(PNG_1X1)))  # a real image, but SmolLM2 reads no images
    assert error["code"] == "image_not_supported"


# --- row 3: list-valued task fields are capped ------------------------------------------------------------------


def test_list_fields_are_capped_with_a_400_naming_the_field(gateway: str) -> None:
    cases = [("/v1/tasks/guard", {"text": "hi", "policies": ["no swearing"] * 10_000}, "policies"),
             ("/v1/tasks/route", {"text": "hi", "routes": [{"name": f"r{i}", "target": "task:classify"}
                                                           for i in range(1000)]}, "routes"),
             ("/v1/tasks/classify", {"text": "hi", "labels": [f"l{i}" for i in range(5000)]}, "labels"),
             ("/v1/tasks/rerank", {"query": "q", "documents": ["d"] * 5000}, "documents"),
             ("/v1/tasks/redact", {"text": "hi", "types": ["EMAIL"] * 100}, "types"),
             # 3,000 inputs held the engine for minutes, unanswered (refused before the engine's check: this
             # gateway's engine gives no embeddings)
             ("/v1/embeddings", {"input": ["word"] * 3000}, "2048")]
    for path, body, field in cases:
        error = error_of(post(gateway, path, body))
        assert field in error["message"], (path, error)


# --- row 8: unknown redaction types ------------------------------------------------------------------------------


def test_unknown_redaction_types_are_refused(gateway: str) -> None:
    error = error_of(post(gateway, "/v1/tasks/redact", {"text": "call 13800138000", "types": ["PHONE_NUMBER"],
                                                        "use_model": False}))
    assert "PHONE_NUMBER" in error["message"] and "PHONE" in error["message"]
    ok = post(gateway, "/v1/tasks/redact", {"text": "call 13800138000", "types": ["phone"], "use_model": False})
    assert ok.status_code == 200 and "13800138000" not in ok.json()["text"]
    proc = run_cli("redact", "--no-model", "--type", "PHONE_NUMBER", "call 13800138000")
    assert_one_line_error(proc, "PHONE_NUMBER", "EMAIL")


# --- row 19: llama.cpp's own json_schema field is validated, never passed through -----------------------------


def test_top_level_json_schema_is_validated_like_response_format(gateway: str) -> None:
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    answer = post(gateway, CHAT, {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 32,
                                  "json_schema": schema})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["tiankong"]["validated"] is True
    assert isinstance(json.loads(body["choices"][0]["message"]["content"])["ok"], bool)
    both = post(gateway, CHAT, {"messages": [{"role": "user", "content": "x"}], "json_schema": schema,
                                "response_format": {"type": "json_object"}})
    assert "not both" in error_of(both)["message"]
    raw = post(gateway, "/v1/completions", {"prompt": "Say hello.", "max_tokens": 8, "json_schema": schema})
    assert error_of(raw)["code"] == "unsupported_field"


# --- rows 14, 15, 18, 20 and null ids: files and configuration ---------------------------------------------


def test_batch_refuses_to_write_over_its_input(tmp_path: Path) -> None:
    source = tmp_path / "x.jsonl"
    source.write_text('{"id": 1, "text": "a"}\n', encoding="utf-8")
    with pytest.raises(ConfigError, match="is the file the job writes"):
        run(build_job(input=str(source), output=str(source), task="redact", use_model=False))
    assert source.read_text(encoding="utf-8") == '{"id": 1, "text": "a"}\n'
    proc = run_cli("batch", "run", "--task", "redact", "--input", str(source), "--output", str(source))
    assert_one_line_error(proc, "is the file the job writes")


@pytest.mark.parametrize(("written", "said"), [("null", "id is null"), ('""', "id is empty")])
def test_a_null_id_is_an_error_not_a_line_number(tmp_path: Path, smol_engine: EngineProcess, written: str,
                                                 said: str) -> None:
    """An empty id was taken as the id "" (2026-12-08), while a CSV's empty id cell is the line number."""
    source = tmp_path / "in.jsonl"
    source.write_text(f'{{"id": {written}, "text": "mail a@b.example"}}\n{{"id": 2, "text": "mail c@d.example"}}\n',
                      encoding="utf-8")
    out = tmp_path / "out.jsonl"
    report = run(build_job(input=str(source), output=str(out), task="redact", use_model=False,
                           url=[smol_engine.url]))
    assert report.done == 1 and report.failed == 1
    errors = (tmp_path / "out.jsonl.errors.jsonl").read_text(encoding="utf-8")
    assert said in errors and [json.loads(x)["id"] for x in out.read_text().splitlines()] == [2]


def test_files_tiankong_reads_are_size_limited() -> None:
    with pytest.raises(ConfigError, match="larger than"):
        load_config("/dev/zero")
    assert_one_line_error(run_cli("serve", "--config", "/dev/zero"), "larger than")
    assert_one_line_error(run_cli("batch", "run", "--task", "extract", "--schema", "/dev/zero", "--input", "x.jsonl",
                                  "--output", "y.jsonl"), "larger than")


def test_empty_or_short_api_keys_are_refused(tmp_path: Path) -> None:
    for key in ("", "short", "   spaces   "):
        with pytest.raises(ValueError, match="at least 8 characters"):
            TiankongConfig.model_validate({"server": {"host": "0.0.0.0", "api_keys": [key]}})
    config = tmp_path / "c.toml"
    config.write_text('[server]\nhost = "0.0.0.0"\napi_keys = [""]\n', encoding="utf-8")
    assert_one_line_error(run_cli("serve", "--config", str(config)), "api_keys[0]", "at least 8")
    assert_one_line_error(run_cli("serve", "--api-key", "abc"), "--api-key", "at least 8")
    TiankongConfig.model_validate({"server": {"api_keys": ["a-long-enough-key", "sha256:" + "0" * 64]}})


def test_models_add_does_not_overwrite_without_force(tmp_path: Path, smol_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIANKONG_DATA_DIR", str(tmp_path / "data"))
    first = run_cli("models", "add", str(smol_path), "--family", "twice", "--json")
    assert first.returncode == 0, first.stderr
    installed = Path(json.loads(first.stdout)["path"])
    before = installed.stat().st_mtime_ns
    assert_one_line_error(run_cli("models", "add", str(smol_path), "--family", "twice"), "already installed",
                          "--force")
    assert installed.stat().st_mtime_ns == before
    again = run_cli("models", "add", str(smol_path), "--family", "twice", "--force")
    assert again.returncode == 0, again.stderr


# --- row 13: a keyless loopback gateway refuses foreign hosts, cross-site origins and non-JSON bodies ---------


def test_keyless_gateway_refuses_rebinding_cross_site_and_non_json(gateway: str) -> None:
    body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    json_type = {"content-type": "application/json"}
    cases = [({"content-type": "text/plain"}, 415, "unsupported_media_type"),
             ({"content-type": "application/x-www-form-urlencoded"}, 415, "unsupported_media_type"),
             ({**json_type, "host": "attacker.example"}, 403, "host_not_allowed"),
             ({**json_type, "origin": "http://attacker.example"}, 403, "origin_not_allowed")]
    for headers, status, code in cases:
        answer = httpx.post(f"{gateway}{CHAT}", content=body, headers=headers, timeout=30)
        assert answer.status_code == status and answer.json()["error"]["code"] == code, (headers, answer.text)
        assert "access-control-allow-origin" not in answer.headers
    for host in ("localhost:8080", "127.0.0.1", "[::1]:9"):
        answer = httpx.get(f"{gateway}/health", headers={"host": host}, timeout=30)
        assert answer.status_code == 200, host
    same_site = httpx.post(f"{gateway}{CHAT}", content=body, timeout=60,
                           headers={**json_type, "origin": gateway, "content-type": "application/json; charset=utf-8"})
    assert same_site.status_code == 200, same_site.text
    preflight = httpx.options(f"{gateway}{CHAT}", headers={"origin": "http://attacker.example",
                                                           "access-control-request-method": "POST"}, timeout=30)
    assert preflight.status_code >= 400 and "access-control-allow-origin" not in preflight.headers


# --- row 16: failed keys are throttled per client address ----------------------------------------------------


def test_failed_api_keys_are_throttled_per_address(smol_engine: EngineProcess) -> None:
    from tiankong.gateway.keys import ApiKey, hash_key

    state = GatewayState.for_engine(smol_engine, TEST_MODEL, api_keys=[ApiKey(hash_key("right-key-123"), "a", None)])
    with serve_app(state) as url:
        statuses = [httpx.get(f"{url}/v1/models", headers={"authorization": f"Bearer wrong-{i}"}, timeout=10)
                    for i in range(300)]
        codes = [a.status_code for a in statuses]
        assert codes[:20] == [401] * 20 and set(codes[20:]) == {429}
        assert 1 <= int(statuses[-1].headers["Retry-After"]) <= 60
        assert statuses[-1].json()["error"]["code"] == "auth_throttled"
        # the throttled address is refused even with the right key (a correct guess must not get through) ...
        assert httpx.get(f"{url}/v1/models", headers={"authorization": "Bearer right-key-123"},
                         timeout=10).status_code == 429
        # ... while another address is not affected, and /metrics counts both outcomes
        with httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2"), timeout=30) as other:
            answer = other.get(url + "/metrics", headers={"authorization": "Bearer right-key-123"})
        assert answer.status_code == 200, answer.text
        assert 'tiankong_auth_failures_total{outcome="unauthorized"} 20.0' in answer.text
        assert 'tiankong_auth_failures_total{outcome="throttled"} 281.0' in answer.text


# --- row 17: slow headers and slow bodies time out, with one log line each ------------------------------------


def test_slow_headers_and_bodies_time_out(smol_engine: EngineProcess, caplog: pytest.LogCaptureFixture) -> None:
    import logging
    import socket
    import time

    state = GatewayState.for_engine(smol_engine, TEST_MODEL, body_timeout_s=1.0)
    with caplog.at_level(logging.WARNING, logger="tiankong.gateway"), serve_app(state, header_timeout_s=1.0) as url:
        port = int(url.rsplit(":", 1)[1])
        slow_head, slow_body, silent = (socket.create_connection(("127.0.0.1", port)) for _ in range(3))
        slow_head.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never ends its head
        slow_body.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
                          b"\r\nContent-Length: 100\r\n\r\n{\"messages\": ")  # never ends its body
        for sock in (slow_head, slow_body, silent):
            sock.settimeout(10)
        started = time.monotonic()
        assert slow_head.recv(4096) == b""  # closed by the gateway
        answer = b""
        while chunk := slow_body.recv(4096):  # the head and the body may come in separate packets
            answer += chunk
        assert b" 408 " in answer.split(b"\r\n", 1)[0] and b"body_timeout" in answer
        assert silent.recv(4096) == b""
        assert time.monotonic() - started < 9  # closed by the deadlines, not by the test's own timeout
        for sock in (slow_head, slow_body, silent):
            sock.close()
        assert httpx.get(f"{url}/health", timeout=10).status_code == 200  # and the gateway still serves
    lines = [r.getMessage() for r in caplog.records if r.name == "tiankong.gateway"]
    assert sum("no complete request head" in m for m in lines) == 2
    assert sum("body not received" in m for m in lines) == 1
    assert not [r for r in caplog.records if r.exc_info]  # no tracebacks


# --- rows 1 and 2: hostile patterns never stall the gateway -------------------------------------------------


def test_patterns_are_checked_in_bounded_time_or_refused() -> None:
    import time

    from tiankong.structured import regex_constraint
    from tiankong.structured.patterns import engine_pattern
    from tiankong.structured.regex_safety import (
        AmbiguousPattern,
        UnsafePattern,
        ambiguous_nesting,
        complex_repetition,
        full_matcher,
        safe_search,
    )

    started = time.monotonic()
    assert not safe_search("^((a|aa)*)*c$", "a" * 5000 + "!")  # RE2: linear; Python's re would never finish
    assert safe_search("^((a|aa)*)*c$", "aaac") and safe_search(r"^\u4e2d+$", "中中")
    assert time.monotonic() - started < 5
    with pytest.raises(UnsafePattern):
        safe_search("^(?=a)(a+)+$", "a" * 29 + "!")  # a lookahead (no RE2) around a repeated group: refused
    assert safe_search("^(?=.*[A-Z]).{8,}$", "abcdefgH")  # lookahead over single characters: Python's re, safe
    assert ambiguous_nesting("^((a|aa)*)*c$") and ambiguous_nesting("(a+)+") and not ambiguous_nesting(r"^([a-z]+\.)*$")
    assert ambiguous_nesting("(a{2,3})*") and not ambiguous_nesting("^#([0-9a-fA-F]{3}){1,2}$")  # one length each
    assert engine_pattern("^#([0-9a-fA-F]{3}){1,2}$") is not None  # so the grammar enforces it
    # the regex= mode: whole-text matches in bounded time too, and the same refusals up front
    assert not full_matcher("(a|aa)*c")("a" * 5000 + "!") and full_matcher("(a|aa)*c")("aac")
    assert not full_matcher("ab")("xab") and full_matcher(r"^\u4e2d+$")("中中")
    with pytest.raises(AmbiguousPattern):
        regex_constraint("((a|aa)*)*c")
    with pytest.raises(UnsafePattern):
        regex_constraint("(?=a)(ab)+!")  # a lookahead around a repeated group, not ambiguous: RE2 cannot read it
    assert complex_repetition("(ab)+") and not complex_repetition(r"^\d{3}-[a-z]*$")
    assert engine_pattern("^((a|aa)*)*c$") is None and engine_pattern(r"^([a-z]+\.)*[a-z]+$") is not None


def _timed_health(url: str) -> float:
    import time

    started = time.monotonic()
    assert httpx.get(f"{url}/health", timeout=60).status_code == 200
    return time.monotonic() - started

def test_hostile_patterns_do_not_stall_the_gateway(gateway: str) -> None:

    def structured(pattern: str, prompt: str) -> httpx.Response:
        schema = {"type": "object", "properties": {"s": {"type": "string", "pattern": pattern}}, "required": ["s"]}
        return post(gateway, CHAT, {"messages": [{"role": "user", "content": prompt}], "max_tokens": 40,
                                    "response_format": {"type": "json_schema",
                                                        "json_schema": {"name": "x", "schema": schema}}},
                    timeout=600)

    # row 1: cannot be checked in bounded time → refused before the engine sees it
    refused = structured("^(?=a)(a+)+$", "Write 29 times the letter a, then !")
    assert refused.status_code == 400 and refused.json()["error"]["type"] == "schema_not_supported", refused.text
    # row 2: ambiguous nesting is refused up front too (the grammar cannot take it; kept out of it, it cost two
    # whole attempts no model satisfies), naming where it is; the same schema spelled plainly is served
    nested = structured("^((a|aa)*)*c$", "Write many letters a.")
    assert nested.status_code == 400, nested.text
    error = nested.json()["error"]
    assert error["type"] == "schema_not_supported" and "/properties/s/pattern" in json.dumps(error), error
    plain = structured("^(a|aa)*c$", "Write aac.")
    assert plain.status_code in (200, 422), plain.text  # valid, or fail-closed: never 5xx, never unvalidated
    if plain.status_code == 200:
        import re as python_re

        value = json.loads(plain.json()["choices"][0]["message"]["content"])["s"]
        assert python_re.fullmatch("(a|aa)*c", value)
    assert _timed_health(gateway) < 5.0


# --- log_prompts: off by default; on, one line per request with its prompt ------------------------------------


def test_log_prompts_logs_prompts_only_when_asked(smol_engine: EngineProcess, caplog: pytest.LogCaptureFixture) -> None:
    import logging

    body = {"messages": [{"role": "user", "content": "the secret plan"}], "max_tokens": 2}
    with caplog.at_level(logging.INFO, logger="tiankong.prompts"):
        for log_prompts in (False, True):
            state = GatewayState.for_engine(smol_engine, TEST_MODEL, log_prompts=log_prompts)
            with serve_app(state) as url:
                assert post(url, CHAT, body).status_code == 200
    lines = [r.getMessage() for r in caplog.records if r.name == "tiankong.prompts"]
    assert len(lines) == 1 and "the secret plan" in lines[0] and json.loads(lines[0])["route"] == CHAT


# --- issue 23 item 4: GET /v1/models/{id} (the openai SDK's models.retrieve) ----------------------------------


def test_models_retrieve(gateway: str) -> None:
    import openai

    sdk = openai.OpenAI(base_url=f"{gateway}/v1", api_key="unused", max_retries=0)
    assert sdk.models.retrieve(TEST_MODEL).id == TEST_MODEL
    with pytest.raises(openai.NotFoundError, match="not served here"):
        sdk.models.retrieve("gpt-4")


# --- fields a validated answer does not apply: a 400 naming them, never dropped without a word --------------------


def test_fields_a_validated_answer_does_not_apply_are_refused(gateway: str) -> None:
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    structured = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 16,
                  "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}
    tools = {"messages": [{"role": "user", "content": "Weather in Paris?"}], "max_tokens": 16, "tools": [
        {"type": "function", "function": {"name": "weather", "parameters": {
            "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]}
    for base in (structured, tools):
        for extra, field in (({"logprobs": True, "top_logprobs": 3}, "logprobs"), ({"stop": ["Paris"]}, "stop"),
                             ({"presence_penalty": 0.5}, "presence_penalty"),
                             ({"temperature": 0.7, "top_p": 0.1}, "top_p")):
            error = error_of(post(gateway, CHAT, {**base, **extra}))
            assert error["param"] == field and field in error["message"], (extra, error)
        # the neutral values a client sends by default, and truncation at temperature 0 (greedy), still answer
        fine = post(gateway, CHAT, {**base, "stop": None, "logprobs": False, "presence_penalty": 0, "top_p": 0.9})
        assert fine.status_code == 200, fine.text
        neutral = post(gateway, CHAT, {**base, "temperature": 0.7, "top_p": 1, "top_k": 0, "min_p": 0})
        assert neutral.status_code == 200, neutral.text  # what some clients send by default
    # a response_format that is a string was answered as plain text; a stream flag that is not a boolean was read
    # by its truth ("false" streamed)
    text = post(gateway, CHAT, {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3,
                                "response_format": "json_object"})
    assert error_of(text)["param"] == "response_format"
    for path, body in ((CHAT, {"messages": [{"role": "user", "content": "hi"}]}),
                       ("/v1/completions", {"prompt": "hi"})):
        assert error_of(post(gateway, path, {**body, "max_tokens": 300, "stream": "false"}))["param"] == "stream"


def test_model_fields_and_ids_and_the_embeddings_off_code(gateway: str) -> None:
    """A non-string model was answered by the default model; GET /v1/models/ (no id) answered the first model;
    embeddings off answered `invalid_request_error` where docs/gateway.md says `not_supported`."""
    for path, body in ((CHAT, {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}),
                       ("/v1/completions", {"prompt": "hi", "max_tokens": 2})):
        error = error_of(post(gateway, path, {**body, "model": 5}))
        assert error["code"] == "invalid_model" and error["param"] == "model", error
        missing = error_of(post(gateway, path, {**body, "model": "no-such-model"}), 404)
        assert missing["code"] == "model_not_found" and missing["param"] == "model", missing
    empty = httpx.get(f"{gateway}/v1/models/", timeout=30)
    assert empty.status_code == 404, empty.text
    assert httpx.get(f"{gateway}/v1/models/{TEST_MODEL}", timeout=30).status_code == 200
    off = error_of(post(gateway, "/v1/embeddings", {"input": "hello"}))
    assert off["code"] == "not_supported" and "--embeddings" in off["message"], off


def test_chat_roles_are_checked_and_developer_reads_as_system(gateway: str) -> None:
    """An unknown role was answered (a template renders it as text, or drops it); OpenAI's `developer` reached
    SmolLM2's template as itself, which has no such role."""
    chat = {"messages": [{"role": "wizard", "content": "Speak in riddles."}, {"role": "user", "content": "hi"}],
            "max_tokens": 2}
    error = error_of(post(gateway, CHAT, chat))
    assert "wizard" in error["message"] and "developer" in error["message"]
    usage = {}
    for role in ("developer", "system"):
        answer = post(gateway, CHAT, {**chat, "messages": [{"role": role, "content": "Speak in riddles."},
                                                            {"role": "user", "content": "hi"}]})
        assert answer.status_code == 200, answer.text
        usage[role] = answer.json()["usage"]["prompt_tokens"]
    assert usage["developer"] == usage["system"], usage


def test_a_chat_longer_than_the_context_is_openais_context_length_exceeded(gateway: str) -> None:
    """The engine's own refusal came back as a bare invalid_request_error; clients look for OpenAI's code
    ``context_length_exceeded`` to shorten the conversation and retry."""
    long_chat = {"messages": [{"role": "user", "content": "word " * 6000}], "max_tokens": 2}
    error = error_of(post(gateway, CHAT, long_chat, timeout=120))
    assert error["code"] == "context_length_exceeded" and error["type"] == "invalid_request_error", error


def test_a_down_remote_upstream_is_503_engine_unavailable_on_task_routes_too() -> None:
    """The chat route said 503 engine_unavailable with Retry-After; a task route said 502 upstream_error, no
    Retry-After, with the library's advice ("pass model= to manage an engine") sent to an HTTP client."""
    from starlette.testclient import TestClient

    from tiankong.gateway import create_app

    state = GatewayState(upstream_url="http://127.0.0.1:9", model_name="m", engine_retry_wait_s=0)
    with TestClient(create_app(state), base_url="http://127.0.0.1") as http:
        for path, body in (("/v1/tasks/classify", {"text": "refund please", "labels": ["billing", "bug"]}),
                           (CHAT, {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})):
            answer = http.post(path, json=body)
            assert answer.status_code == 503 and answer.headers.get("retry-after"), (path, answer.text)
            error = answer.json()["error"]
            assert error["code"] == "engine_unavailable" and "model=" not in error["message"], (path, error)


def test_a_structured_chat_longer_than_the_context_is_the_same_400(gateway: str) -> None:
    """With ``response_format`` the same over-long chat was a 413 (the library's InputTooLong), without it OpenAI's
    400 ``context_length_exceeded``: one condition, one answer on the OpenAI route (a sweep of 2026-12-08)."""
    long_chat = {"messages": [{"role": "user", "content": "word " * 6000}], "max_tokens": 2,
                 "response_format": {"type": "json_object"}}
    error = error_of(post(gateway, CHAT, long_chat, timeout=120))
    assert error["code"] == "context_length_exceeded" and error["type"] == "invalid_request_error", error


def _counter(url: str, name: str, route: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"{url}/metrics", timeout=10).text
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == name and s.labels.get("route") == route)


def test_a_failed_structured_answer_counts_its_attempts_and_tokens(gateway: str) -> None:
    """A structured answer cut off at every attempt (422) counted as a failure but not its retries, and the tokens
    its attempts decoded were not counted: only answered requests' were."""
    retries = _counter(gateway, "tiankong_schema_retries_total", CHAT)
    failures = _counter(gateway, "tiankong_schema_failures_total", CHAT)
    text = httpx.get(f"{gateway}/metrics", timeout=10).text
    tokens_before = sum(s.value for s in _samples(text, "tiankong_completion_tokens_total"))
    cut = {"messages": [{"role": "user", "content": "List three cities with their countries."}], "max_tokens": 2,
           "response_format": {"type": "json_object"}}
    error = error_of(post(gateway, CHAT, cut, timeout=120), 422)
    assert "after 2 attempts" in error["message"], error
    assert _counter(gateway, "tiankong_schema_failures_total", CHAT) == failures + 1
    assert _counter(gateway, "tiankong_schema_retries_total", CHAT) == retries + 1  # the second attempt
    text = httpx.get(f"{gateway}/metrics", timeout=10).text
    assert sum(s.value for s in _samples(text, "tiankong_completion_tokens_total")) >= tokens_before + 2


def _samples(text: str, name: str) -> list[object]:
    from prometheus_client.parser import text_string_to_metric_families

    return [s for f in text_string_to_metric_families(text) for s in f.samples if s.name == name]


@pytest.mark.parametrize(("path", "fields", "param"), [
    (CHAT, {"stop": 5}, "stop"), (CHAT, {"stop": ["a", 1]}, "stop"), (CHAT, {"n": True}, "n"),
    (CHAT, {"seed": "x"}, "seed"), (CHAT, {"logprobs": "yes"}, "logprobs"), (CHAT, {"top_logprobs": 1.5},
                                                                            "top_logprobs"),
    (CHAT, {"response_format": {"type": "xml"}}, "response_format"),
    (CHAT, {"max_tokens": 2, "max_completion_tokens": 6}, "max_completion_tokens"),
    ("/v1/completions", {"best_of": True}, "best_of"), ("/v1/completions", {"logprobs": "yes"}, "logprobs"),
    ("/v1/completions", {"prompt": None}, "prompt"), ("/v1/completions", {"stop": {"a": 1}}, "stop"),
])
def test_a_field_of_the_wrong_type_is_a_400_naming_it(gateway: str, path: str, fields: dict[str, object],
                                                       param: str) -> None:
    """Each was ignored (``"stop": 5`` ran to max_tokens; ``"n": true`` passed as 1), answered in the engine's own
    words with no param (``[json.exception.type_error.302]``), or — two budgets that differ — applied by the
    engine while the gateway chose how to relay by the other (a sweep of 2026-12-08)."""
    base: dict[str, object] = {"messages": [{"role": "user", "content": "hi"}]} if path == CHAT else {"prompt": "hi"}
    error = error_of(post(gateway, path, {**base, "max_tokens": 2, **fields}))
    assert error["param"] == param and "json.exception" not in error["message"], error


def test_fields_of_the_right_type_still_pass(gateway: str) -> None:
    ok = post(gateway, CHAT, {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "stop": ["\n"],
                              "seed": 7, "n": 1, "logprobs": False, "max_completion_tokens": 2,
                              "response_format": {"type": "text"}})
    assert ok.status_code == 200, ok.text
    ok = post(gateway, "/v1/completions", {"prompt": "hi", "max_tokens": 2, "stop": "\n", "logprobs": 1})
    assert ok.status_code == 200, ok.text
    with Client(gateway) as client:  # the library's own completions send logprobs true + top_logprobs (a review)
        assert client.complete("hi", max_tokens=2, logprobs=3).text is not None
    # llama.cpp's one prompt of tokens and strings mixed is one prompt, not a list of prompts to answer in turn
    mixed = post(gateway, "/v1/completions", {"prompt": [1, 2, "hello", 3], "max_tokens": 2})
    assert mixed.status_code == 200 and len(mixed.json()["choices"]) == 1, mixed.text
    error = error_of(post(gateway, "/v1/completions", {"prompt": ["a"] * 300, "max_tokens": 1}))
    assert error["param"] == "prompt" and "256" in error["message"], error


def test_a_completion_of_several_prompts_counts_every_prompt(gateway: str) -> None:
    """llama-server answered a list of prompts with the usage of the first alone (prompts of 1 and 9 tokens said
    1), and the token counters took it (a sweep of 2026-12-08): each prompt is answered in turn, usage summed."""
    prompts = ["a", "The capital of France is a city that"]
    singles = [post(gateway, "/v1/completions", {"prompt": p, "max_tokens": 4, "temperature": 0}).json()
               for p in prompts]
    both = post(gateway, "/v1/completions", {"prompt": prompts, "max_tokens": 4, "temperature": 0})
    assert both.status_code == 200, both.text
    answer = both.json()
    assert [c["index"] for c in answer["choices"]] == [0, 1]
    assert [c["text"] for c in answer["choices"]] == [s["choices"][0]["text"] for s in singles]  # in order
    for key in ("prompt_tokens", "completion_tokens"):
        assert answer["usage"][key] == sum(s["usage"][key] for s in singles), (key, answer["usage"])
