"""`tiankong serve`: the gateway + managed engine as a real process, used via httpx and the openai SDK."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest

from conftest import TIANKONG, assert_one_line_error, free_port, pid_alive, run_cli
from tiankong.models import TEST_MODEL


@dataclass
class Served:
    url: str
    proc: subprocess.Popen[str]
    engine_pid: int
    log: list[str]


def start_serve(*extra: str, port: int | None = None, ctx: int | None = 2048, url_host: str = "127.0.0.1",
                wrapper: tuple[str, ...] = ()) -> Served:
    """``tiankong serve`` on SmolLM2 with 2 slots (``ctx=None``: the default context, sized by the memory plan),
    run by ``wrapper`` (e.g. ``timeout 120``) when given."""
    port = port or free_port()
    sized = [] if ctx is None else ["--ctx", str(ctx)]
    proc = subprocess.Popen(
        [*wrapper, TIANKONG, "serve", "--model", TEST_MODEL, "--port", str(port), "--slots", "2", *sized, *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )
    log: list[str] = []
    assert proc.stdout is not None
    deadline = time.monotonic() + 180
    engine_pid = 0
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"serve exited early: {''.join(log)}")
        log.append(line)
        match = re.search(r"pid (\d+)", line)
        if match:
            engine_pid = int(match.group(1))
        if "gateway on" in line:
            break
    url = f"http://{url_host}:{port}"
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return Served(url, proc, engine_pid, log)
        except httpx.HTTPError:
            time.sleep(0.1)
    raise AssertionError("gateway never became healthy")


def stop_serve(served: Served) -> int:
    served.proc.send_signal(signal.SIGINT)  # what Ctrl-C sends
    try:
        return served.proc.wait(timeout=30)
    finally:
        if served.proc.poll() is None:
            os.killpg(served.proc.pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def gateway() -> Iterator[Served]:
    served = start_serve()
    try:
        yield served
    finally:
        stop_serve(served)


def test_chat_completion_with_curl_shape(gateway: Served) -> None:
    body = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 12, "temperature": 0}
    answer = httpx.post(f"{gateway.url}/v1/chat/completions", json=body, timeout=120)
    assert answer.status_code == 200
    data = answer.json()
    assert data["object"] == "chat.completion" and data["choices"][0]["message"]["content"].strip()
    assert data["model"] == TEST_MODEL and data["usage"]["completion_tokens"] > 0


def test_openai_sdk_chat_stream_and_models(gateway: Served) -> None:
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0)
    models = [m.id for m in client.models.list()]
    assert models == [TEST_MODEL]
    reply = client.chat.completions.create(model=TEST_MODEL, messages=[{"role": "user", "content": "Hi!"}],
                                           max_tokens=10, temperature=0)
    assert reply.choices[0].message.content
    stream = client.chat.completions.create(model=TEST_MODEL.split(":")[0], stream=True, max_tokens=10,
                                            messages=[{"role": "user", "content": "Hi!"}], temperature=0)
    pieces = [chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices]
    assert "".join(pieces) == reply.choices[0].message.content
    completion = client.completions.create(model=TEST_MODEL, prompt="1, 2, 3,", max_tokens=5, temperature=0)
    assert completion.choices[0].text


def test_bad_requests_get_openai_error_bodies(gateway: Served) -> None:
    url = f"{gateway.url}/v1/chat/completions"
    cases = [
        (b"{not json", 400, "invalid_json"),
        (b"\xff\xfe\x00garbage", 400, "invalid_utf8"),
        (b"[1, 2]", 400, "invalid_body"),
        (json.dumps({"model": "gpt-4", "messages": []}).encode(), 404, "model_not_found"),
    ]
    for raw, status, code in cases:
        answer = httpx.post(url, content=raw, headers={"content-type": "application/json"}, timeout=30)
        assert answer.status_code == status, (raw, answer.text)
        error = answer.json()["error"]
        assert error["code"] == code and error["message"] and error["type"]
    missing = httpx.get(f"{gateway.url}/v2/nothing", timeout=10)
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "invalid_request_error"
    sdk = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="x", max_retries=0)
    with pytest.raises(openai.NotFoundError):
        sdk.chat.completions.create(model="gpt-4", messages=[{"role": "user", "content": "hi"}])


def test_bad_image_parts_are_a_400_before_the_engine(gateway: Served) -> None:
    for url in ("data:text/plain;base64,aGVsbG8=", "data:image/png;base64,@@@", "http://example.invalid/x.png"):
        body = {"messages": [{"role": "user", "content": [{"type": "text", "text": "Describe it."},
                                                          {"type": "image_url", "image_url": {"url": url}}]}]}
        answer = httpx.post(f"{gateway.url}/v1/chat/completions", json=body, timeout=60)
        assert answer.status_code == 400, (url, answer.text)
        error = answer.json()["error"]
        assert "image" in error["message"].lower() and error["type"], error


def test_ctrl_c_stops_gateway_and_engine() -> None:
    served = start_serve()
    assert served.engine_pid and pid_alive(served.engine_pid)
    assert stop_serve(served) == 0
    deadline = time.monotonic() + 15
    while pid_alive(served.engine_pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not pid_alive(served.engine_pid)


def test_stopping_with_requests_in_flight_answers_them_without_a_traceback() -> None:
    """SIGTERM while a stream and a plain request run: past the 5 s grace uvicorn cancels them; each client is told
    (an error event ending the stream, a 503), and no ``Exception in ASGI application`` traceback is logged."""
    served = start_serve()
    body = {"messages": [{"role": "user", "content": "Write a very long story about a cat."}], "max_tokens": 900,
            "ignore_eos": True, "temperature": 0}  # runs ~20 s at two slots on one core: well past the grace
    events: list[str] = []
    plain: list[httpx.Response] = []

    def stream() -> None:
        with httpx.stream("POST", f"{served.url}/v1/chat/completions", json={**body, "stream": True},
                          timeout=120) as answer:
            events.extend(line for line in answer.iter_lines() if line.startswith("data: "))

    def post() -> None:
        plain.append(httpx.post(f"{served.url}/v1/chat/completions", json=body, timeout=120))

    threads = [threading.Thread(target=stream), threading.Thread(target=post)]
    try:
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 60
        while len(events) < 1 and time.monotonic() < deadline:  # the stream is under way (a token relayed)
            time.sleep(0.05)
        served.proc.send_signal(signal.SIGTERM)
        for thread in threads:
            thread.join(timeout=90)
        rest = served.proc.communicate(timeout=60)[0]
    finally:
        if served.proc.poll() is None:
            os.killpg(served.proc.pid, signal.SIGKILL)
    log = "".join(served.log) + rest
    assert "Traceback" not in log and "Exception in ASGI application" not in log, log
    assert events and json.loads(events[-1].removeprefix("data: "))["error"]["code"] == "gateway_shutdown", events
    assert plain and plain[0].status_code == 503, plain
    assert plain[0].json()["error"]["code"] == "gateway_shutdown" and plain[0].headers.get("retry-after")


def test_serve_takes_a_config_whose_pool_has_a_remote_model(tmp_path: Path) -> None:
    """docs/config.md's remote upstream (``[[pool.models]] url``): `serve` re-validated a full dump of the config,
    which set every engine key of the remote entry, and refused it ("… shape local engines")."""
    port = free_port()
    config = tmp_path / "remote.toml"
    config.write_text(f'[server]\nport = {port}\n\n[[pool.models]]\nname = "up"\nurl = "http://127.0.0.1:9"\n')
    proc = subprocess.Popen([TIANKONG, "serve", "--config", str(config)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert "gateway on" in first, first + proc.stdout.read()
        deadline = time.monotonic() + 30
        while True:  # the line is printed just before the port is bound
            try:
                models = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=10).json()
                break
            except httpx.ConnectError:
                assert time.monotonic() < deadline, "the gateway never answered"
                time.sleep(0.1)
        assert [m["id"] for m in models["data"]] == ["up"]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def test_ctrl_c_twice_stops_without_a_traceback_on_an_ipv6_loopback() -> None:
    """More than one Ctrl-C (here: `timeout` relays the one its process group gets to its child again) makes
    uvicorn skip the lifespan's shutdown, which logged a CancelledError traceback; and ``--host ::1`` was refused
    as "port … already in use" (an IPv4 socket tried to bind it)."""
    served = start_serve("--host", "::1", url_host="[::1]", wrapper=("timeout", "300"))
    assert "http://[::1]:" in "".join(served.log)
    os.killpg(served.proc.pid, signal.SIGINT)  # Ctrl-C in a terminal: the whole foreground group
    try:
        rest = served.proc.communicate(timeout=30)[0]
    finally:
        if served.proc.poll() is None:
            os.killpg(served.proc.pid, signal.SIGKILL)
    assert "Traceback" not in rest and "engines stopped" in rest, rest
    deadline = time.monotonic() + 15
    while pid_alive(served.engine_pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not pid_alive(served.engine_pid)


def test_api_key_is_enforced_when_configured() -> None:
    served = start_serve("--api-key", "s3cret-key")
    try:
        body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        denied = httpx.post(f"{served.url}/v1/chat/completions", json=body, timeout=30)
        assert denied.status_code == 401 and denied.json()["error"]["type"] == "authentication_error"
        ok = httpx.post(f"{served.url}/v1/chat/completions", json=body, timeout=60,
                        headers={"Authorization": "Bearer s3cret-key"})
        assert ok.status_code == 200
        assert "s3cret" not in "".join(served.log)
    finally:
        stop_serve(served)


def test_port_in_use_is_a_one_line_error() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        proc = run_cli("serve", "--model", TEST_MODEL, "--port", str(busy.getsockname()[1]))
    assert_one_line_error(proc, "already in use", "--port")


def test_public_bind_without_key_is_refused() -> None:
    proc = run_cli("serve", "--model", TEST_MODEL, "--host", "0.0.0.0", "--port", str(free_port()),
                   env={"TIANKONG_API_KEY": ""})
    assert_one_line_error(proc, "without an API key")


def test_unknown_model_and_bad_config_are_one_line_errors(tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert_one_line_error(run_cli("serve", "--model", "smolm2"), "did you mean", TEST_MODEL)
    bad = tmp_path / "bad.toml"
    bad.write_text("[engine]\nslots = 0\nbogus = 1\n")
    assert_one_line_error(run_cli("serve", "--config", str(bad)), "engine.slots", "engine.bogus")


# --- structured output through the gateway ------------------------------------------------------------------


def test_openai_sdk_parse_with_pydantic(gateway: Served) -> None:
    from pydantic import BaseModel, Field

    class City(BaseModel):
        name: str = Field(max_length=40)
        population: int

    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0)
    parse = client.beta.chat.completions.parse if hasattr(client, "beta") and hasattr(
        client.beta, "chat") else client.chat.completions.parse
    completion = parse(model=TEST_MODEL, messages=[{"role": "user", "content": "Describe Paris."}],
                       response_format=City, temperature=0)
    city = completion.choices[0].message.parsed
    assert isinstance(city, City) and isinstance(city.population, int)


def test_json_schema_response_format_is_validated(gateway: Served) -> None:
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    body = {"messages": [{"role": "user", "content": "Is the sky blue?"}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": True}}}
    answer = httpx.post(f"{gateway.url}/v1/chat/completions", json=body, timeout=120)
    assert answer.status_code == 200, answer.text
    data = answer.json()
    assert isinstance(json.loads(data["choices"][0]["message"]["content"])["ok"], bool)
    assert data["tiankong"]["validated"] is True
    # one boolean property: the keys and braces are forced, one token is decoded
    assert data["tiankong"]["path"] == "fast_forward", data["tiankong"]
    assert data["tiankong"]["decoded_tokens"] >= 1 and data["tiankong"]["fast_forwarded_tokens"] >= 3
    streamed = httpx.post(f"{gateway.url}/v1/chat/completions", json={**body, "stream": True}, timeout=120)
    events = [line for line in streamed.text.splitlines() if line.startswith("data: {")]
    assert streamed.status_code == 200 and len(events) == 2


def test_structured_requests_keep_their_sampling_fields(gateway: Served) -> None:
    schema = {"type": "object", "properties": {"colour": {"enum": ["red", "green", "blue"]}}, "required": ["colour"]}
    body = {"messages": [{"role": "user", "content": "Pick a colour."}], "temperature": 0.8, "seed": 7,
            "response_format": {"type": "json_schema", "json_schema": {"schema": schema}}}
    answer = httpx.post(f"{gateway.url}/v1/chat/completions", json=body, timeout=120)
    assert answer.status_code == 200, answer.text
    assert json.loads(answer.json()["choices"][0]["message"]["content"])["colour"] in ("red", "green", "blue")
    for field, value in (("temperature", "hot"), ("temperature", 3), ("seed", 1.5)):
        bad = httpx.post(f"{gateway.url}/v1/chat/completions", json={**body, field: value}, timeout=30)
        assert bad.status_code == 400 and field in bad.json()["error"]["message"], bad.text


def test_unsatisfiable_schema_is_an_error_never_a_200(gateway: Served) -> None:
    schema = {"const": "abc", "not": {"const": "abc"}}
    body = {"messages": [{"role": "user", "content": "Say it."}],
            "response_format": {"type": "json_schema", "json_schema": {"schema": schema}}}
    answer = httpx.post(f"{gateway.url}/v1/chat/completions", json=body, timeout=120)
    assert answer.status_code == 422
    assert answer.json()["error"]["type"] == "retries_exhausted"


@pytest.mark.parametrize("schema, status, type_, says", [
    ("{not json", 400, "invalid_schema", "not valid JSON"),
    ([1, 2], 400, "invalid_schema", "must be an object"),
    ({"type": "nonsense"}, 400, "invalid_schema", "not a valid JSON Schema at /type"),
    ({"$ref": "https://example.com/s.json"}, 400, "schema_not_supported", "/$ref (remote $ref"),
])
def test_invalid_schemas_get_400(gateway: Served, schema: object, status: int, type_: str, says: str) -> None:
    body = {"messages": [{"role": "user", "content": "hi"}],
            "response_format": {"type": "json_schema", "json_schema": {"schema": schema}}}
    answer = httpx.post(f"{gateway.url}/v1/chat/completions", json=body, timeout=60)
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert error["type"] == type_ and says in error["message"], error
    task = httpx.post(f"{gateway.url}/v1/tasks/extract", json={"text": "hello", "schema": schema}, timeout=60)
    assert task.status_code == status, task.text
    assert task.json()["error"]["type"] == type_ and says in task.json()["error"]["message"]


def test_extract_task_endpoint(gateway: Served) -> None:
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 30}, "age": {"type": "integer"}},
              "required": ["name", "age"]}
    answer = httpx.post(f"{gateway.url}/v1/tasks/extract", timeout=120,
                        json={"text": "Ada is 36 years old.", "schema": schema, "instructions": "Names as written."})
    assert answer.status_code == 200, answer.text
    data = answer.json()
    assert set(data) >= {"data", "attempts", "usage"} and isinstance(data["data"]["age"], int)
    for bad in ({"schema": schema}, {"text": "", "schema": schema}, {"text": "x"}):
        rejected = httpx.post(f"{gateway.url}/v1/tasks/extract", json=bad, timeout=30)
        assert rejected.status_code == 400 and rejected.json()["error"]["message"]


# --- metrics, OpenAPI and admission through `tiankong serve` ------------------------------------------------


def test_serve_exposes_metrics_openapi_and_queue_state(gateway: Served) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    body = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 4, "temperature": 0}
    assert httpx.post(f"{gateway.url}/v1/chat/completions", json=body, timeout=120).status_code == 200
    text = httpx.get(f"{gateway.url}/metrics", timeout=30).text
    names = {sample.name for family in text_string_to_metric_families(text) for sample in family.samples}
    assert {"tiankong_requests_total", "tiankong_request_duration_seconds_count", "tiankong_queue_depth",
            "tiankong_engine_rss_bytes", "tiankong_engine_restarts_total"} <= names
    assert "/v1/tasks/classify" in httpx.get(f"{gateway.url}/openapi.json", timeout=10).json()["paths"]
    health = httpx.get(f"{gateway.url}/health", timeout=10).json()
    assert health["status"] == "ok" and health["queued"] == 0


def test_the_engine_port_answers_only_the_gateway() -> None:
    """Issue 21 row 12: the managed engine has a random key that only the gateway knows (not in its argv)."""
    served = start_serve()
    try:
        line = next(x for x in served.log if "engine ready" in x)
        engine_url = re.search(r"(http://127\.0\.0\.1:\d+)[);]", line).group(1)  # type: ignore[union-attr]
        body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        direct = httpx.post(f"{engine_url}/v1/chat/completions", json=body, timeout=30)
        assert direct.status_code == 401, direct.text
        assert httpx.get(f"{engine_url}/slots", timeout=10).status_code == 401
        through = httpx.post(f"{served.url}/v1/chat/completions", json=body, timeout=60)
        assert through.status_code == 200, through.text
        metrics = httpx.get(f"{served.url}/metrics", timeout=30).text
        assert re.search(r"^tiankong_engine_slots\{.*\} 2\.0$", metrics, re.M), metrics  # its /slots probe has the key
        cmdline = Path(f"/proc/{served.engine_pid}/cmdline").read_bytes().split(b"\0")
        assert b"--api-key-file" in cmdline and b"--api-key" not in cmdline
        key_file = Path(cmdline[cmdline.index(b"--api-key-file") + 1].decode())
        assert not key_file.exists()  # read at start-up, then removed
    finally:
        stop_serve(served)
