"""The clients people already use, against a real gateway: the openai SDK (chat, stream, ``parse`` with a
Pydantic model, tools, embeddings, ``models.retrieve``), langchain-openai (``with_structured_output`` by
json_schema and by function_calling, ``bind_tools``), instructor (TOOLS, its default, and JSON) and litellm."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from pydantic import BaseModel

from conftest import serve_app
from tiankong.engine import EngineBinary, EngineConfig, EngineProcess
from tiankong.gateway import GatewayState
from tiankong.models import TEST_MODEL

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # litellm fetches a price list on import otherwise


class City(BaseModel):
    city: str
    country: str


@pytest.fixture(scope="module")
def sdk(engine_binary: EngineBinary, smol_path: Path) -> Iterator[openai.OpenAI]:
    config = EngineConfig(model=smol_path, ctx=4096, slots=2, alias=TEST_MODEL, embeddings=True, pooling="none")
    engine = EngineProcess(config, engine_binary).start()
    try:
        with serve_app(GatewayState.for_engine(engine, TEST_MODEL)) as url:
            yield openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
    finally:
        engine.stop()


def test_openai_sdk_chat_stream_parse_embeddings_and_models(sdk: openai.OpenAI) -> None:
    chat = sdk.chat.completions.create(model=TEST_MODEL, messages=[{"role": "user", "content": "Say hi."}],
                                       max_tokens=8, temperature=0, seed=42)
    assert chat.choices[0].message.role == "assistant" and chat.usage is not None and chat.usage.total_tokens > 0
    pieces = [c.choices[0].delta.content or "" for c in sdk.chat.completions.create(
        model=TEST_MODEL, messages=[{"role": "user", "content": "Say hi."}], max_tokens=8, temperature=0, seed=42,
        stream=True) if c.choices]
    assert "".join(pieces).strip()
    parsed = sdk.beta.chat.completions.parse(
        model=TEST_MODEL, messages=[{"role": "user", "content": "The Louvre is in Paris, France. Where is it?"}],
        response_format=City, max_tokens=64, temperature=0, seed=42)
    city = parsed.choices[0].message.parsed
    assert isinstance(city, City) and city.city and city.country  # validated against the model's schema
    vectors = sdk.embeddings.create(model=TEST_MODEL, input=["a cat", "a dog"])
    assert len(vectors.data) == 2 and len(vectors.data[0].embedding) == len(vectors.data[1].embedding) > 100
    assert sdk.models.retrieve(TEST_MODEL).id == TEST_MODEL
    with pytest.raises(openai.BadRequestError) as refused:
        sdk.chat.completions.create(model=TEST_MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=0)
    assert refused.value.body["param"] == "max_tokens"  # type: ignore[index]


WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40}},
                   "required": ["city"], "additionalProperties": False}}}


def test_openai_sdk_tools_and_parse_with_a_pydantic_tool(sdk: openai.OpenAI) -> None:
    chat = sdk.chat.completions.create(
        model=TEST_MODEL, messages=[{"role": "user", "content": "What is the weather in Oslo?"}],
        tools=[WEATHER_TOOL], tool_choice="required", temperature=0, seed=42)  # type: ignore[list-item]
    choice = chat.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.tool_calls
    call = choice.message.tool_calls[0]
    assert call.function.name == "get_weather"  # type: ignore[union-attr]
    assert isinstance(json.loads(call.function.arguments)["city"], str)  # type: ignore[union-attr]
    parsed = sdk.beta.chat.completions.parse(
        model=TEST_MODEL, messages=[{"role": "user", "content": "The Louvre is in Paris, France."}],
        tools=[openai.pydantic_function_tool(City)], tool_choice="required", temperature=0, seed=42)
    calls = parsed.choices[0].message.tool_calls or []
    assert calls and isinstance(calls[0].function.parsed_arguments, City)


@pytest.fixture(scope="module")
def base_url(sdk: openai.OpenAI) -> str:
    return str(sdk.base_url).rstrip("/")


@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
def test_langchain_structured_output_both_methods(base_url: str, method: str) -> None:
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(model=TEST_MODEL, base_url=base_url, api_key="unused", temperature=0, max_retries=0)  # type: ignore[arg-type]
    city = llm.with_structured_output(City, method=method).invoke("The Louvre is in Paris, France. Where is it?")
    assert isinstance(city, City) and city.city and city.country  # never None: a failure would be an error


def test_langchain_bind_tools_returns_valid_tool_calls(base_url: str) -> None:
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(model=TEST_MODEL, base_url=base_url, api_key="unused", temperature=0, max_retries=0)  # type: ignore[arg-type]
    message = llm.bind_tools([WEATHER_TOOL], tool_choice="get_weather").invoke("Weather in Lima?")
    assert message.tool_calls and message.tool_calls[0]["name"] == "get_weather"  # type: ignore[attr-defined]
    assert isinstance(message.tool_calls[0]["args"]["city"], str)  # type: ignore[attr-defined]


@pytest.mark.parametrize("mode", ["TOOLS", "JSON"])
def test_instructor_default_and_json_modes(sdk: openai.OpenAI, mode: str) -> None:
    import instructor

    client = instructor.from_openai(sdk, mode=getattr(instructor.Mode, mode))
    city = client.chat.completions.create(model=TEST_MODEL, response_model=City, max_retries=1, temperature=0,
                                          messages=[{"role": "user", "content": "The Louvre is in Paris, France."}])
    assert isinstance(city, City) and city.city and city.country


def test_litellm_as_a_client(base_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network fetch of its price list
    import litellm

    answer = litellm.completion(model=f"openai/{TEST_MODEL}", api_base=base_url, api_key="unused", temperature=0,
                                max_tokens=8, messages=[{"role": "user", "content": "Say hi."}])
    assert answer.choices[0].message.role == "assistant" and answer.usage.total_tokens > 0  # type: ignore[union-attr]
    called = litellm.completion(model=f"openai/{TEST_MODEL}", api_base=base_url, api_key="unused", temperature=0,
                                messages=[{"role": "user", "content": "Weather in Lima?"}], tools=[WEATHER_TOOL],
                                tool_choice="required")
    calls = called.choices[0].message.tool_calls  # type: ignore[union-attr]
    assert calls and calls[0].function.name == "get_weather"


def test_an_embeddings_input_longer_than_the_engine_embeds_is_a_400_the_sdk_does_not_retry(
        sdk: openai.OpenAI) -> None:
    """llama-server's 500 "input (N tokens) is too large to process" came back as a 502 server error, which SDKs
    retry (a sweep of 2026-12-08): it is the caller's input, OpenAI's 400 ``context_length_exceeded``."""
    with pytest.raises(openai.BadRequestError) as refused:
        sdk.embeddings.create(model=TEST_MODEL, input="word " * 3000)  # > the 2,048-token batch an embedding uses
    assert refused.value.body["code"] == "context_length_exceeded"  # type: ignore[index]
    assert "tokens" in refused.value.body["message"]  # type: ignore[index]
