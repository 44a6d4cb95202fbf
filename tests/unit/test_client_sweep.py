"""What a users'-conditions sweep of the Python library found (2026-12-07): the same call gave a different error
type by which server answered, a traceback on an answer that is not JSON, a stream cut short read as a whole
answer, a closed client that quietly reopened, and arguments taken that an engine then wrapped, ignored or
crashed on. ``Client`` and ``AsyncClient`` over a scripted transport (``httpx.MockTransport``): no engine."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tiankong import AsyncClient, Client
from tiankong.errors import ConfigError, ServerError, TransportError, TruncatedOutput, Unreachable

URL = "http://127.0.0.1:9"
Handler = Callable[[httpx.Request], httpx.Response]


def sync_call(handler: Handler, method: str, *args: Any, **kwargs: Any) -> Any:
    with Client(URL, transport=httpx.MockTransport(handler)) as client:
        result = getattr(client, method)(*args, **kwargs)
        return list(result) if method.startswith("stream") else result


def async_call(handler: Handler, method: str, *args: Any, **kwargs: Any) -> Any:
    async def run() -> Any:
        async with AsyncClient(URL, transport=httpx.MockTransport(handler)) as client:
            if method.startswith("stream"):
                return [chunk async for chunk in getattr(client, method)(*args, **kwargs)]
            return await getattr(client, method)(*args, **kwargs)
    return asyncio.run(run())


BOTH = pytest.mark.parametrize("call", [sync_call, async_call], ids=["Client", "AsyncClient"])


def gateway_error(status: int, type_: str, param: str | None = None) -> Handler:
    body = {"error": {"message": "nope", "type": type_, "code": type_, "param": param}}
    return lambda request: httpx.Response(status, json=body)


@BOTH
def test_a_gateways_typed_error_is_the_class_a_local_engine_raises(call: Callable[..., Any]) -> None:
    with pytest.raises(TruncatedOutput) as cut:
        call(gateway_error(422, "truncated_output"), "chat", "hi")
    assert isinstance(cut.value, ServerError) and cut.value.status == 422  # still what it was, for old callers
    with pytest.raises(ConfigError) as refused:
        call(gateway_error(400, "invalid_request_error", "labels"), "chat", "hi")
    assert isinstance(refused.value, ServerError) and refused.value.param == "labels"
    with pytest.raises(ServerError) as down:
        call(gateway_error(503, "engine_error"), "chat", "hi")
    assert not isinstance(down.value, ConfigError)


@BOTH
@pytest.mark.parametrize("answer, method", [
    ({"text": "<html>proxy login</html>", "headers": {"content-type": "text/html"}}, "models"),
    ({"json": [1, 2, 3]}, "models"),
    ({"json": [1, 2, 3]}, "tokenize"),
    ({"text": "<html></html>"}, "chat"),
])
def test_an_answer_that_is_not_the_expected_json_is_a_transport_error(call: Callable[..., Any],
                                                                     answer: dict[str, Any], method: str) -> None:
    with pytest.raises(TransportError, match="answered"):
        # chat with a small budget: a larger one is read as a stream (client/assemble.py), which says so itself
        args, options = (["hi"], {"max_tokens": 5}) if method == "chat" else (["hi"], {}) if method == "tokenize" \
            else ([], {})
        call(lambda request: httpx.Response(200, **answer), method, *args, **options)


@BOTH
@pytest.mark.parametrize("method", ["stream_chat", "stream_complete"])
def test_a_stream_that_stops_before_its_end_is_an_error(call: Callable[..., Any], method: str) -> None:
    delta = {"choices": [{"index": 0, "delta": {"content": "Hel"}, "text": "Hel", "finish_reason": None}]}
    cut = f"data: {json.dumps(delta)}\n\n"
    with pytest.raises(ServerError, match="ended without a final chunk"):
        call(lambda request: httpx.Response(200, text=cut), method, "hi")
    done = {"choices": [{"index": 0, "delta": {}, "text": "", "finish_reason": "stop"}]}
    whole = cut + f"data: {json.dumps(done)}\n\ndata: [DONE]\n\n"
    chunks = call(lambda request: httpx.Response(200, text=whole), method, "hi")
    assert [c.finish_reason for c in chunks] == [None, "stop"]


@BOTH
@pytest.mark.parametrize("options, field", [({"max_tokens": 0}, "max_tokens"), ({"max_tokens": -1}, "max_tokens"),
                                            ({"max_tokens": 2**32 + 1}, "max_tokens"), ({"extra": "x"}, "extra")])
def test_a_token_budget_an_engine_would_wrap_or_ignore_is_refused_before_sending(
        call: Callable[..., Any], options: dict[str, Any], field: str) -> None:
    sent: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(500)

    with pytest.raises(ConfigError) as refused:
        call(record, "chat", "hi", **options)
    assert refused.value.param == field and not sent


@pytest.mark.parametrize("options, field", [({"max_tokens": 0}, "max_tokens"), ({"max_attempts": 0}, "max_attempts"),
                                            ({"max_attempts": -1}, "max_attempts")])
def test_extract_refuses_a_budget_or_attempts_it_would_replace(options: dict[str, Any], field: str) -> None:
    schema = {"type": "object", "properties": {"age": {"type": "integer"}}, "required": ["age"]}
    with pytest.raises(ConfigError) as refused:
        sync_call(lambda request: httpx.Response(500), "extract_result", "John is 30", schema, **options)
    assert refused.value.param == field


def test_a_closed_client_says_so_sync_and_async() -> None:
    ok: Handler = lambda request: httpx.Response(200, json={"data": [{"id": "m"}]})  # noqa: E731
    client = Client(URL, transport=httpx.MockTransport(ok))
    assert client.models() == ["m"]
    client.close()
    with pytest.raises(ConfigError, match="closed"):
        client.models()

    async def closed_async() -> None:
        aclient = AsyncClient(URL, transport=httpx.MockTransport(ok))
        assert await aclient.models() == ["m"]
        await aclient.close()
        await aclient.models()  # it used to open a new connection pool and answer

    with pytest.raises(ConfigError, match="closed"):
        asyncio.run(closed_async())


@pytest.mark.parametrize("kind", [Client, AsyncClient])
@pytest.mark.parametrize("args, field", [
    ({"url": "localhost:8080"}, "url"), ({"url": "http://localhost:8080x"}, "url"), ({"url": 5}, "url"),
    ({"url": "http://127.0.0.1:99999"}, "url"), ({"url": URL, "api_key": "ключ-ключ-ключ"}, "api_key"),
    ({"url": URL, "timeout_s": -1}, "timeout_s"), ({"model": 5}, "model"),
    ({"model": "smollm2-135m-instruct:q4_0", "adapters": "formal"}, "adapters"),
    ({"model": "smollm2-135m-instruct:q4_0", "api_key": "ключ-ключ-ключ"}, "api_key"),
])
def test_a_bad_constructor_argument_is_a_config_error_before_any_engine_starts(kind: type, args: dict[str, Any],
                                                                              field: str) -> None:
    # the unit tier's conftest fails any test that starts an engine: these must be refused before one would start
    with pytest.raises(ConfigError) as refused:
        kind(**args)
    assert refused.value.param == field


@pytest.mark.parametrize("messages, needle", [("hi", None), ({"role": "user"}, "got dict"),
                                              ([{"content": "x"}], r"messages\[0\]"),
                                              ([{"role": "user", "content": "a"}, 5], r"messages\[1\]"),
                                              # content missing or not text: refused here, not by the server
                                              ([{"role": "user"}], r"messages\[0\] \(user\) has no content"),
                                              ([{"role": "user", "content": 5}], r"messages\[0\]\.content"),
                                              # a tool's result may be null or an object, an assistant turn empty
                                              ([{"role": "user", "content": "a"}, {"role": "assistant"},
                                                {"role": "function", "name": "w", "content": None},
                                                {"role": "tool", "tool_call_id": "1", "content": {"t": 1}}], "ok")])
def test_a_malformed_conversation_is_invalid_messages_naming_the_index(messages: Any, needle: str | None) -> None:
    from tiankong.client._shared import as_messages
    from tiankong.client.images import InvalidMessages

    if needle is None:
        assert as_messages(messages) == [{"role": "user", "content": "hi"}]
        return
    if needle == "ok":
        assert as_messages(messages) == messages
        return
    with pytest.raises(InvalidMessages, match=needle):
        as_messages(messages)


@BOTH
@pytest.mark.parametrize("failure, needle", [
    (httpx.ConnectError("refused"), "is the server running"),
    (httpx.ReadTimeout("slow"), "did not answer in time"),
    (httpx.RemoteProtocolError("peer closed connection mid-body"), "closed the connection"),
    (httpx.DecodingError("bad gzip"), "exchange with"),  # it connected: not "is it running?" (nor Unreachable,
    (httpx.CloseError("odd close"), "exchange with"),    # which marks a gateway's remote upstream as down)
])
def test_a_failed_exchange_says_where_it_failed(call: Callable[..., Any], failure: Exception, needle: str) -> None:
    # every failure used to say "cannot reach … is the server running?", also when it had answered half a body
    def fail(request: httpx.Request) -> httpx.Response:
        raise failure

    with pytest.raises(TransportError, match=needle) as raised:
        call(fail, "models")
    assert isinstance(raised.value, Unreachable) == isinstance(failure, httpx.ConnectError)


def test_an_async_client_serves_a_second_event_loop() -> None:
    # a script calling asyncio.run twice with one AsyncClient got "RuntimeError: Event loop is closed": its pooled
    # keep-alive connection (a real socket here, on loopback) belonged to the first loop
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Models(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            body = json.dumps({"data": [{"id": "m"}]}).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Models)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        client = AsyncClient(f"http://127.0.0.1:{server.server_address[1]}")
        assert asyncio.run(client.models()) == ["m"]
        assert asyncio.run(client.models()) == ["m"]
        asyncio.run(client.close())
    finally:
        server.shutdown()
        server.server_close()


def test_a_remote_error_keeps_its_status_and_port_0_is_refused() -> None:
    # the review: Remote* answered 502 (TransportError's) when re-raised on a gateway; `port or 80` let port 0 pass
    from tiankong.client.answers import check_response

    with pytest.raises(TruncatedOutput) as cut:
        check_response(422, json.dumps({"error": {"message": "cut", "type": "truncated_output"}}))
    assert cut.value.http_status == 422
    with pytest.raises(ConfigError) as bad:
        Client("http://127.0.0.1:0")
    assert bad.value.param == "url"


def _engine_answer(request: httpx.Request) -> httpx.Response:
    if request.url.path == "/tokenize":  # classify reads its labels' tokens first
        return httpx.Response(200, json={"tokens": [1]})
    return httpx.Response(200, json={"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}]})


@BOTH
@pytest.mark.parametrize(("method", "args"), [("chat", ("x\ud800y",)), ("complete", ("x\udcffy",)),
                                               ("tokenize", ("x\ud800y",))])
def test_a_lone_surrogate_is_one_config_error_not_a_traceback(call: Callable[..., Any], method: str,
                                                                args: tuple[Any, ...]) -> None:
    """Text left by a bad decode (``errors='surrogateescape'``): httpx's UnicodeEncodeError came out of every
    method as a traceback."""
    with pytest.raises(ConfigError, match="lone surrogate") as raised:
        call(_engine_answer, method, *args)
    assert "\n" not in raised.value.one_line() and "replace" in raised.value.one_line()


@BOTH
def test_an_error_page_that_is_not_json_is_one_line_with_a_hint(call: Callable[..., Any]) -> None:
    page = "<!DOCTYPE HTML>\n<html lang=\"en\">\n <head>\n  <title>Error response</title>\n </head>\n" * 3

    def html(request: httpx.Request) -> httpx.Response:
        return httpx.Response(501, text=page, headers={"content-type": "text/html"})

    with pytest.raises(ServerError) as raised:
        call(html, "chat", "hi")
    said = raised.value.one_line()
    assert "\n" not in said and "llama-server or tiankong gateway" in said and raised.value.body == page


@BOTH
@pytest.mark.parametrize(("options", "named"), [({"foo": 1}, "foo"), ({"temperature": "hot"}, "temperature"),
                                                ({"temperature": -1}, "temperature")])
def test_a_misspelt_or_bad_option_is_a_config_error_naming_it(call: Callable[..., Any], options: dict[str, Any],
                                                               named: str) -> None:
    """``chat("x", foo=1)`` was a TypeError naming an internal helper; a temperature of "hot" reached the server."""
    sent: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return _engine_answer(request)

    with pytest.raises(ConfigError, match=named):
        call(record, "chat", "hi", **options)
    assert not sent


@BOTH
@pytest.mark.parametrize(("method", "value"), [("tokenize", None), ("tokenize", 5), ("complete", None),
                                                ("complete", ["a", "b"])])
def test_a_raw_endpoint_refuses_a_text_that_is_not_a_string(call: Callable[..., Any], method: str,
                                                             value: Any) -> None:
    """llama-server answered ``tokenize(None)`` with an HTTP 500 and took ``complete(["a", "b"])`` as two
    prompts."""
    with pytest.raises(ConfigError, match="must be a string"):
        call(_engine_answer, method, value)


@BOTH
@pytest.mark.parametrize(("method", "args"), [("extract", (["a", "b"], {"type": "object"})), ("extract", (5, {})),
                                               ("choose", (None, ["a", "b"])), ("classify", (5, ["a", "b"]))])
def test_a_text_of_the_wrong_type_is_named_as_such_not_as_empty(call: Callable[..., Any], method: str,
                                                                 args: tuple[Any, ...]) -> None:
    with pytest.raises(ConfigError, match="must be a string|should be a valid string"):  # classify: pydantic's
        call(_engine_answer, method, *args)


@BOTH
@pytest.mark.parametrize("threshold", [-1, 1.5, float("nan"), True, "0.5"])
def test_a_choose_threshold_outside_zero_to_one_is_refused_before_any_call(call: Callable[..., Any],
                                                                           threshold: Any) -> None:
    """``choose(threshold=-1)`` listed every label and ``threshold=2`` none but the top one, silently (classify and
    route refuse the same values at the gateway)."""
    asked: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.path)
        return httpx.Response(500)

    with pytest.raises(ConfigError, match="threshold must be a probability from 0 to 1"):
        call(handler, "choose", "hi", ["a", "b"], threshold=threshold)
    assert asked == []
