"""What a second read-only sweep of the Python library found (2026-12-07): a tool call on an empty conversation
answered from nothing, classify options taken and ignored, `detokenize` wrong types reaching the engine as a 500,
a gateway's too-long error wrapped twice, and a call or tag through a gateway losing its finish reason and usage.
``Client`` and ``AsyncClient`` over a scripted transport: no engine (any engine call fails the test)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tiankong import AsyncClient, Client
from tiankong.errors import ConfigError, InputTooLong

URL = "http://127.0.0.1:9"
Handler = Callable[[httpx.Request], httpx.Response]


def sync_call(handler: Handler, method: str, *args: Any, **kwargs: Any) -> Any:
    with Client(URL, transport=httpx.MockTransport(handler)) as client:
        return getattr(client, method)(*args, **kwargs)


def async_call(handler: Handler, method: str, *args: Any, **kwargs: Any) -> Any:
    async def run() -> Any:
        async with AsyncClient(URL, transport=httpx.MockTransport(handler)) as client:
            return await getattr(client, method)(*args, **kwargs)
    return asyncio.run(run())


BOTH = pytest.mark.parametrize("call", [sync_call, async_call], ids=["Client", "AsyncClient"])

TOOLS = [{"type": "function", "function": {"name": "weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def no_engine(request: httpx.Request) -> httpx.Response:
    if request.url.path in ("/health", "/props"):
        return httpx.Response(200, json={"status": "ok"} if request.url.path == "/health" else {})
    raise AssertionError(f"the engine was asked {request.url.path}")


@BOTH
@pytest.mark.parametrize("conversation", [[], [{"role": "bogus", "content": "hi"}], [{"foo": 1}],
                                          [{"role": "user", "content": "  "}], [{"role": "system", "content": "x"}]])
def test_a_call_needs_a_conversation_with_a_user_request(call: Any, conversation: list[Any]) -> None:
    with pytest.raises(ConfigError, match="text"):
        call(no_engine, "call", conversation, TOOLS)


@BOTH
@pytest.mark.parametrize("options, needle", [
    ({"multi_label": True, "instructions": "Always answer negative."}, "multi_label"),
    ({"multi_label": True, "examples": [{"text": "a", "label": "x"}, {"text": "b", "label": "y"}]}, "multi_label"),
    ({"multi_label": True, "calibrate": True}, "multi_label"),
    ({"threshold": 0.99}, "threshold"),
])
def test_classify_refuses_options_its_answer_would_ignore(call: Any, options: dict[str, Any], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        call(no_engine, "classify", "I love it", ["x", "y"], **options)


@BOTH
@pytest.mark.parametrize("tokens", ["abc", [1, -2], [1.5], [True], None])
def test_detokenize_takes_token_ids_only(call: Any, tokens: Any) -> None:
    with pytest.raises(ConfigError, match="token ids"):
        call(no_engine, "detokenize", tokens)


@BOTH
def test_a_gateways_too_long_error_is_said_once(call: Any) -> None:
    said = "the input is too long for the engine's context (request 9000 tokens, context 4096)"
    hint = "shorten the text, use the compress task, or start the engine with a larger ctx per slot"

    def gateway(request: httpx.Request) -> httpx.Response:
        if request.url.path in ("/health", "/props"):
            return no_engine(request)
        return httpx.Response(413, json={"error": {"message": f"{said} — {hint}", "type": "context_length_exceeded"}})

    with pytest.raises(InputTooLong) as raised:
        call(gateway, "classify", "word " * 10, ["x", "y"])
    assert raised.value.one_line().count("too long") == 1 and raised.value.one_line().count("shorten") == 1


def test_a_call_and_a_tag_keep_their_finish_reason_and_usage_through_a_gateway() -> None:
    from tiankong.client._shared import Usage
    from tiankong.structured.flow import Structured
    from tiankong.structured.tools import ToolCalls
    from tiankong.tasks.remote import READERS
    from tiankong.tasks.specs import TASK_SPECS

    cut = ToolCalls(calls=[], content="Theft of the …", probabilities={"reply": 0.9}, attempts=1,
                    usage=Usage(10, 512), finish_reason="length", counts={"1": 0.8})
    back = READERS["call"](json.loads(json.dumps(cut.to_json())))
    assert (back.finish_reason, back.counts, back.usage.completion_tokens) == ("length", {"1": 0.8}, 512)
    tagged = Structured(data={"topic": "billing"}, raw="{}", attempts=1, usage=Usage(123, 30), finish_reason="stop")
    wire = TASK_SPECS["tag"].to_json(tagged)
    back_tag = READERS["tag"](json.loads(json.dumps(wire)))
    assert (back_tag.usage.prompt_tokens, back_tag.usage.completion_tokens, back_tag.finish_reason) == (123, 30, "stop")


def test_a_text_without_sentence_ends_is_cut_into_chunks_that_fit() -> None:
    """`summarize` on a log or a transcript without full stops: one "sentence" of 60,000 tokens was one chunk, and
    the engine answered 413 instead of the summary the docs promise for long texts."""
    from tiankong.structured.drivers import run_sync
    from tiankong.tasks.compress import chunk_text

    text = "word " * 3000 + "and one sentence. Then another one."

    def engine(method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        assert path == "/tokenize" and body is not None
        pieces = [piece for piece in body["content"].split(" ")]
        return {"tokens": [{"id": i, "piece": piece + (" " if i < len(pieces) - 1 else "")}
                           for i, piece in enumerate(pieces)]}

    chunks, total = run_sync(chunk_text(text, 256), engine)
    assert "".join(chunks) == text and total == len(text.split(" "))
    assert len(chunks) >= 3000 // 256 and all(len(chunk.split()) <= 256 for chunk in chunks)


def test_a_summary_keeps_its_word_limit_and_ends_cleanly() -> None:
    """`summarize --words 5` gave 8 words ending "to final": only a character limit stopped the answer."""
    from tiankong.tasks.compress import fit_words

    cut = fit_words("The city council met on Tuesday to final", 5, "en", cut=True)
    assert len(cut.rstrip("…").split()) <= 5 and cut.endswith("…") and "final" not in cut
    assert fit_words("The council met. It voted to fund", 10, "en", cut=False) == "The council met. It voted to fund"
    assert fit_words("The council met today. It voted to fund buses by", 8, "en", cut=True) == \
        "The council met today."  # a sentence end in the second half: cut there
    assert fit_words("市议会周二开会。决定增加公交预", 10, "zh", cut=True) == "市议会周二开会。"
    # Chinese: the "…" counts among the 2-per-word characters (`--words 5` gave 11 characters)
    long_cut = fit_words("2022年10月18日市议会召开会议", 5, "zh", cut=True)
    assert long_cut.endswith("…") and len(long_cut) <= 10, long_cut


@pytest.mark.parametrize("text", ["电话：01062345678", "座机075586013388", "电话 86-10-62345678"])
def test_a_compact_mainland_landline_after_a_phone_word_is_redacted(text: str) -> None:
    from tiankong.tasks.pii_rules import detect_rules

    assert [e for e in detect_rules(text) if e.type == "PHONE"], text


def test_an_order_number_is_not_a_landline() -> None:
    from tiankong.tasks.pii_rules import detect_rules

    assert not [e for e in detect_rules("订单号01062345678已发货") if e.type == "PHONE"]


def test_a_salt_without_the_hash_style_is_refused() -> None:
    with pytest.raises(ConfigError, match="salt"):
        sync_call(no_engine, "redact", "call 13800138000", use_model=False, salt="s1")


def test_a_cut_candidate_is_said_in_every_rerank_mode() -> None:
    from helpers.scripted import ScriptedEngine, scored

    engine = ScriptedEngine().on("/completion", scored({"yes": 0.7, "no": 0.3}))
    with Client(URL, transport=engine.transport()) as client:
        result = client.rerank("cats", ["cats meow " * 400, "dogs"], mode="pointwise")
    assert result.truncated == [0] and result.notes, result


@pytest.mark.parametrize("cls", [Client, AsyncClient])
def test_engine_settings_beside_tiankong_url_are_a_callers_defaults(cls: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """cascade and tune start their engines with settings of their own; with TIANKONG_URL exported they talk to that
    server, as before — refusing the settings the user never typed stopped them."""
    monkeypatch.setenv("TIANKONG_URL", URL)
    cls(model="m", slots=1, ctx=4096, transport=httpx.MockTransport(no_engine))
    with pytest.raises(ConfigError, match="adapters"):
        cls(model="m", adapters=["formal"])  # an adapter cannot be loaded into that server: still said


def test_an_upstreams_error_keeps_its_type_code_param_and_retry_after() -> None:
    """A remote pool model's 429 came back without Retry-After, typed invalid_request_error; its 400 lost the code
    and the field (`unsupported_field`, `param: n`): a client could not back off or tell what was wrong."""
    import httpx

    from tiankong.gateway.responses import upstream_error

    busy = json.dumps({"error": {"message": "queue full", "type": "rate_limit_exceeded", "code": "queue_full"}})
    answer = upstream_error(429, busy.encode(), httpx.Headers({"Retry-After": "2"}))
    body = json.loads(answer.body)["error"]
    assert answer.status_code == 429 and answer.headers["retry-after"] == "2"
    assert (body["type"], body["code"]) == ("rate_limit_exceeded", "queue_full")
    field = json.dumps({"error": {"message": "n: one choice", "type": "invalid_request_error",
                                  "code": "unsupported_field", "param": "n"}})
    body = json.loads(upstream_error(400, field.encode()).body)["error"]
    assert (body["code"], body["param"]) == ("unsupported_field", "n")
    refused = json.dumps({"error": {"message": "bad key", "type": "authentication_error"}})
    body = json.loads(upstream_error(401, refused.encode()).body)["error"]  # the gateway's key, not the client's
    assert (body["type"], body["code"]) == ("upstream_error", "upstream_auth")
    own = json.dumps({"error": {"code": 400, "message": "bad", "type": "invalid_request_error"}})  # llama-server's
    assert json.loads(upstream_error(400, own.encode()).body)["error"]["code"] == "invalid_request_error"
