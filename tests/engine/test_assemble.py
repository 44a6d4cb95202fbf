"""Non-streamed answers assembled from a stream (``tiankong.client.assemble``): the same answer llama-server
gives, and an abandoned request really stops the engine even while ``/slots`` is polled (which starves
llama-server's own closed-connection check for non-streamed requests)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from test_gateway_admission import LONG, decoded_by_slot, idle, state_for

from conftest import serve_app, wait_until
from tiankong import AsyncClient, Client
from tiankong.client.assemble import MIN_TOKENS, StreamAssembler, StreamFailed, assembles, streamed_body
from tiankong.engine import EngineProcess
from tiankong.errors import ServerError

CHAT = {"messages": [{"role": "user", "content": "Name three colours."}], "max_tokens": 24, "temperature": 0,
        "seed": 42}
PROMPT = {"prompt": "The capital of France is", "max_tokens": 12, "temperature": 0, "seed": 42}


def own_answer(engine: EngineProcess, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """llama-server's own non-streamed answer (assembly is a client-side choice; the raw API still has it)."""
    answer = httpx.post(f"{engine.url}{path}", json=body, timeout=300)
    assert answer.status_code == 200, answer.text
    data: dict[str, Any] = answer.json()
    return data


def comparable(data: dict[str, Any]) -> dict[str, Any]:
    choice = data["choices"][0]
    usage = data["usage"]
    return {"object": data["object"], "model": data["model"], "finish_reason": choice["finish_reason"],
            "message": choice.get("message"), "text": choice.get("text"),
            "tokens": (usage["prompt_tokens"], usage["completion_tokens"]), "has_timings": "timings" in data}


def test_assembled_answers_equal_llama_servers_own(smol_engine: EngineProcess) -> None:
    chat_own = own_answer(smol_engine, "/v1/chat/completions", CHAT)
    text_own = own_answer(smol_engine, "/v1/completions", PROMPT)
    with serve_app(state_for(smol_engine, assemble_min_tokens=0)) as url:  # 0: assemble even short ones
        chat_gw = httpx.post(f"{url}/v1/chat/completions", json=CHAT, timeout=300).json()
        text_gw = httpx.post(f"{url}/v1/completions", json=PROMPT, timeout=300).json()
    assert comparable(chat_gw) == comparable(chat_own)
    assert comparable(text_gw) == comparable(text_own)
    assert chat_gw["id"].startswith("chatcmpl") and isinstance(chat_gw["created"], int)
    # the client assembles budgets above MIN_TOKENS; a stop string keeps the answer short
    line = {**CHAT, "max_tokens": MIN_TOKENS + 1, "stop": ["\n"]}
    assert assembles("/v1/chat/completions", line)
    line_own = own_answer(smol_engine, "/v1/chat/completions", line)
    with Client(smol_engine.url) as client:
        result = client.chat(CHAT["messages"], max_tokens=MIN_TOKENS + 1, stop=["\n"])
        assert result.text == line_own["choices"][0]["message"]["content"]
        assert result.finish_reason == line_own["choices"][0]["finish_reason"] == "stop"
        assert result.usage.completion_tokens == line_own["usage"]["completion_tokens"]
        short = client.chat(CHAT["messages"], max_tokens=24)  # sent as it is (budget <= MIN_TOKENS)
        assert short.text == chat_own["choices"][0]["message"]["content"]
    # a list of prompts over the gateway with a long budget: one choice per prompt, each llama-server's own (they
    # had been interleaved into one choice of both prompts' tokens)
    prompts = {**PROMPT, "prompt": ["The capital of France is", "My favourite colour is"],
               "max_tokens": MIN_TOKENS + 1, "stop": ["."]}
    both_own = own_answer(smol_engine, "/v1/completions", prompts)
    with serve_app(state_for(smol_engine)) as url:
        both_gw = httpx.post(f"{url}/v1/completions", json=prompts, timeout=300).json()
    assert len(both_gw["choices"]) == 2
    assert [c["text"] for c in both_gw["choices"]] == [c["text"] for c in both_own["choices"]]


def test_prompt_progress_events_carry_no_tokens(smol_engine: EngineProcess) -> None:
    """Batch lines that step aside stream with ``return_progress`` (gateway/preempt.py): llama-server then writes
    progress events while it reads the prompt; they must not count as tokens or add text (a completion's holds
    ``"text": ""``)."""
    def assembled(path: str, body: dict[str, Any], chat: bool) -> StreamAssembler:
        assembler = StreamAssembler(chat=chat)
        with httpx.stream("POST", f"{smol_engine.url}{path}", json=body, timeout=300) as answer:
            for chunk in answer.iter_raw():
                assembler.feed(chunk)
        return assembler

    for path, body, chat in (("/v1/completions", PROMPT, False), ("/v1/chat/completions", CHAT, True)):
        own = own_answer(smol_engine, path, body)
        plain = assembled(path, streamed_body(body), chat)
        progress = assembled(path, {**streamed_body(body), "return_progress": True}, chat)
        assert progress.progress_events >= 1 and plain.progress_events == 0  # the engine did send them
        assert progress.content == plain.content, path  # the same content events, one per token
        assert comparable(progress.result()) == comparable(own), path


def test_which_requests_are_assembled() -> None:
    assert assembles("/v1/chat/completions", CHAT, 0) and assembles("/v1/completions", PROMPT, 0)
    assert not assembles("/v1/chat/completions", CHAT)  # 24 tokens: not worth a stream by default
    assert assembles("/v1/chat/completions", {"messages": CHAT["messages"]})  # no budget: unlimited
    assert assembles("/v1/chat/completions", {**CHAT, "max_tokens": MIN_TOKENS + 1})
    assert assembles("/v1/completions", {**PROMPT, "max_tokens": None, "n_predict": -1})
    assert not assembles("/v1/chat/completions", {**CHAT, "max_tokens": None, "max_completion_tokens": 100})
    assert not assembles("/v1/chat/completions", {**CHAT, "stream": True}, 0)
    assert not assembles("/v1/chat/completions", {**CHAT, "logprobs": True, "top_logprobs": 3}, 0)
    assert not assembles("/v1/completions", {**PROMPT, "n_probs": 5}, 0)
    assert not assembles("/v1/chat/completions", {**CHAT, "n": 2}, 0)
    assert not assembles("/v1/completions", {**PROMPT, "prompt": ["a", "b"]}, 0)  # one choice per prompt
    assert assembles("/v1/completions", {**PROMPT, "prompt": [1, 2, 3]}, 0)  # one prompt's tokens
    assert not assembles("/v1/embeddings", {"input": "x"}, 0)
    body = streamed_body({**CHAT, "stream_options": {"foo": 1}})
    assert body["stream"] is True and body["stream_options"] == {"foo": 1, "include_usage": True}


def sse(*events: str) -> bytes:
    return b"".join(f"data: {e}\n\n".encode() for e in events)


def test_tool_call_deltas_and_reasoning_are_merged() -> None:
    # the delta shapes llama-server sends (tools/server/server-chat.cpp: server_chat_msg_diff_to_json_oaicompat)
    assembler = StreamAssembler(chat=True)
    stream = sse(
        '{"choices":[{"index":0,"delta":{"role":"assistant","content":null}}],"id":"chatcmpl-1","created":5,'
        '"model":"m","object":"chat.completion.chunk"}',
        '{"choices":[{"index":0,"delta":{"reasoning_content":"think "}}],"id":"chatcmpl-1"}',
        '{"choices":[{"index":0,"delta":{"reasoning_content":"more"}}],"id":"chatcmpl-1"}',
        '{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function",'
        '"function":{"name":"get_weather"}}]}}]}',
        '{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\\"city\\":"}}]}}]}',
        '{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\\"Paris\\"}"}}]}}]}',
        '{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_b","type":"function",'
        '"function":{"name":"now","arguments":"{}"}}]}}]}',
        '{"choices":[{"finish_reason":"tool_calls","index":0,"delta":{}}]}',
        '{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":7,"total_tokens":16},'
        '"timings":{"predicted_n":7}}',
        "[DONE]")
    for cut in range(0, len(stream), 37):  # arbitrary chunk boundaries, as TCP delivers them
        assembler.feed(stream[cut:cut + 37])
    answer = assembler.result()
    message = answer["choices"][0]["message"]
    assert message["content"] == "" and message["reasoning_content"] == "think more"
    assert message["tool_calls"] == [
        {"type": "function", "id": "call_a", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}},
        {"type": "function", "id": "call_b", "function": {"name": "now", "arguments": "{}"}}]
    assert answer["choices"][0]["finish_reason"] == "tool_calls" and answer["usage"]["total_tokens"] == 16
    assert answer["id"] == "chatcmpl-1" and answer["object"] == "chat.completion" and answer["timings"]


def test_error_events_and_cut_streams_fail_loudly() -> None:
    broken = StreamAssembler(chat=True)
    with pytest.raises(StreamFailed, match="out of memory"):
        broken.feed(sse('{"error":{"code":500,"message":"out of memory","type":"server_error"}}'))
    cut = StreamAssembler(chat=False)
    cut.feed(sse('{"choices":[{"text":"Par","index":0,"finish_reason":null}]}'))
    with pytest.raises(StreamFailed, match="without a final chunk"):
        cut.result()  # never an answer that silently lost its end
    garbage = StreamAssembler(chat=False)
    with pytest.raises(StreamFailed, match="malformed"):
        garbage.feed(b"data: {not json\n\n")


def test_client_maps_an_engine_error_to_server_error(smol_engine: EngineProcess) -> None:
    with Client(smol_engine.url) as client, pytest.raises(ServerError):
        client.chat("hi", max_tokens=4, grammar="root ::= (")  # a grammar llama-server cannot parse


@pytest.fixture
def busy_probe(smol_engine: EngineProcess) -> Iterator[None]:
    """Poll /slots every 20 ms, as dashboards and the tests' own waits do (it starves llama-server's check)."""
    stop = threading.Event()

    def probe() -> None:
        while not stop.is_set():
            with contextlib.suppress(httpx.HTTPError):
                httpx.get(f"{smol_engine.url}/slots", timeout=10)
            stop.wait(0.02)

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=30)


def test_abandoned_gateway_request_stops_the_engine_under_probing(smol_engine: EngineProcess,
                                                                  busy_probe: None) -> None:
    assert wait_until(lambda: idle(smol_engine), 300)
    with serve_app(state_for(smol_engine)) as url:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{url}/v1/chat/completions", json={**LONG, "max_tokens": 1500}, timeout=2.0)
        assert wait_until(lambda: idle(smol_engine), 300)
    assert max(decoded_by_slot(smol_engine).values()) < 1500  # stopped early, not run to max_tokens


def test_abandoned_async_client_call_stops_the_engine_under_probing(smol_engine: EngineProcess,
                                                                    busy_probe: None) -> None:
    assert wait_until(lambda: idle(smol_engine), 300)

    async def impatient() -> None:
        async with AsyncClient(smol_engine.url) as client:
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(client.chat(LONG["messages"], max_tokens=1500, extra={"ignore_eos": True}), 2.0)

    asyncio.run(impatient())
    assert wait_until(lambda: idle(smol_engine), 300)
    assert max(decoded_by_slot(smol_engine).values()) < 1500
