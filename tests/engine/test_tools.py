"""Tool calls, fail-closed: the declared tools reach the model, calls are generated under their schemas and
validated, OpenAI's response shapes (plain and streamed), errors name the field. SmolLM2 end to end."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import jsonschema
import pytest
from pydantic import BaseModel

from conftest import serve_app
from tiankong import Client
from tiankong.engine import EngineProcess
from tiankong.errors import ConfigError
from tiankong.gateway import GatewayState
from tiankong.models import TEST_MODEL
from tiankong.structured.tools import (
    MAX_PARALLEL,
    REPLY,
    calls_schema,
    parse_tool_choice,
    parse_tools,
    plain_messages,
)

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 40},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"], "additionalProperties": False}}}
TICKET = {"type": "function", "function": {
    "name": "open_ticket", "description": "Open a support ticket.",
    "parameters": {"type": "object", "properties": {
        "title": {"type": "string", "maxLength": 60}, "priority": {"type": "integer", "minimum": 1, "maximum": 3}},
        "required": ["title", "priority"], "additionalProperties": False}}}
TOOLS = [WEATHER, TICKET]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}


def assert_valid_calls(calls: list[dict[str, Any]]) -> None:
    """Every OpenAI-shaped call names a declared function and its arguments are valid JSON for it."""
    assert calls
    for call in calls:
        assert call["type"] == "function" and call["id"].startswith("call_")
        name = call["function"]["name"]
        assert name in SCHEMAS
        jsonschema.validate(json.loads(call["function"]["arguments"]), SCHEMAS[name])


# --- parsing and planning (no engine) ---------------------------------------------------------------------

def test_tools_and_tool_choice_are_checked_with_the_field_named() -> None:
    tools = parse_tools(TOOLS)
    assert [t.name for t in tools] == ["get_weather", "open_ticket"]
    for bad, needle in (([], "non-empty"), ([{"type": "retrieval"}], r"tools\[0\]"),
                        ([{"type": "function", "function": {"name": "has space"}}], "name"),
                        ([WEATHER, WEATHER], "twice"),
                        ([{"type": "function", "function": {"name": "f", "parameters": "x"}}], "parameters")):
        with pytest.raises(ConfigError, match=needle) as caught:
            parse_tools(bad)
        assert caught.value.param == "tools"
    assert parse_tool_choice(None, tools) == ("auto", None)
    assert parse_tool_choice("required", tools) == ("required", None)
    assert parse_tool_choice({"type": "function", "function": {"name": "open_ticket"}}, tools) == \
        ("function", "open_ticket")
    for bad in ("sometimes", {"type": "function", "function": {"name": "nope"}}, {"type": "function"}):
        with pytest.raises(ConfigError) as caught:
            parse_tool_choice(bad, tools)
        assert caught.value.param == "tool_choice"


def test_the_call_schema_fixes_the_decided_function_first_and_the_count() -> None:
    weather, ticket = parse_tools(TOOLS)
    one = calls_schema([weather, ticket], ticket, 1)
    assert one["minItems"] == one["maxItems"] == 1
    assert one["items"]["properties"]["name"] == {"const": "open_ticket"}
    two = calls_schema([weather, ticket], ticket, 2)
    assert two["prefixItems"][0]["properties"]["name"] == {"const": "open_ticket"}
    assert two["minItems"] == two["maxItems"] == 2
    names = {item["properties"]["name"]["const"] for item in two["items"]["anyOf"]}
    assert names == {"get_weather", "open_ticket"}
    good = [{"name": "open_ticket", "arguments": {"title": "x", "priority": 2}},
            {"name": "get_weather", "arguments": {"city": "Oslo", "unit": "celsius"}}]
    jsonschema.validate(good, two)
    with pytest.raises(jsonschema.ValidationError):  # the first call must be the decided function's
        jsonschema.validate(list(reversed(good)), two)
    with pytest.raises(jsonschema.ValidationError):  # exactly the decided number of calls
        jsonschema.validate(good[:1], two)
    with pytest.raises(jsonschema.ValidationError):  # arguments hold to the function's parameters
        jsonschema.validate([{"name": "open_ticket", "arguments": {"title": "x", "priority": 9}}], one)


def test_tool_turns_become_text_any_template_reads() -> None:
    messages = [{"role": "developer", "content": "be brief"},
                {"role": "user", "content": "weather in Oslo?"},
                {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
                    "name": "get_weather", "arguments": '{"city":"Oslo","unit":"celsius"}'}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "4 degrees, rain"}]
    plain = plain_messages(messages)
    assert [m["role"] for m in plain] == ["system", "user", "assistant", "user"]
    assert json.loads(plain[2]["content"]) == [{"name": "get_weather", "arguments": {"city": "Oslo",
                                                                                     "unit": "celsius"}}]
    assert "get_weather" in plain[3]["content"] and "4 degrees" in plain[3]["content"]
    assert all(isinstance(m["content"], str) for m in plain)


# --- end to end on SmolLM2 -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def client(smol_engine: EngineProcess) -> Iterator[Client]:
    with Client(smol_engine.url) as c:
        yield c


def test_a_named_function_is_called_with_valid_arguments(client: Client) -> None:
    result = client.call("What is the weather in Paris, in celsius?", TOOLS,
                         tool_choice={"type": "function", "function": {"name": "get_weather"}},
                         parallel_tool_calls=False)
    assert len(result.calls) == 1 and result.calls[0].name == "get_weather"
    jsonschema.validate(result.calls[0].arguments, SCHEMAS["get_weather"])
    assert result.probabilities == {}  # nothing was left to decide
    assert result.structured is not None and result.structured.path in ("fast_forward", "grammar")


def test_auto_decides_with_probabilities_and_required_never_replies(client: Client) -> None:
    auto = client.call("Please open a ticket: the printer on floor 3 is broken, priority 2.", TOOLS)
    assert set(auto.probabilities) == {"get_weather", "open_ticket", REPLY}
    assert abs(sum(auto.probabilities.values()) - 1.0) < 1e-6
    if auto.calls:  # the decided function is the first call
        assert auto.calls[0].name == max(("get_weather", "open_ticket"), key=auto.probabilities.__getitem__)
        assert_valid_calls([c.to_openai() for c in auto.calls])
    else:
        assert max(auto.probabilities, key=auto.probabilities.__getitem__) == REPLY and auto.content
    required = client.call("Please open a ticket: the printer on floor 3 is broken, priority 2.", TOOLS,
                           tool_choice="required")
    assert set(required.probabilities) == {"get_weather", "open_ticket"} and required.calls
    assert_valid_calls([c.to_openai() for c in required.calls])
    assert set(required.counts) == {str(n) for n in range(1, MAX_PARALLEL + 1)}
    assert len(required.calls) + required.duplicates_dropped == int(max(required.counts,
                                                                         key=required.counts.__getitem__))


def test_tool_choice_none_replies_in_words(client: Client) -> None:
    result = client.call("Say hello.", TOOLS, tool_choice="none")
    assert result.calls == [] and isinstance(result.content, str) and result.decision == REPLY


def test_a_parameters_schema_the_grammar_cannot_hold_is_refused_before_any_call(client: Client) -> None:
    bad = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "x": {"type": "strng"}}}}}
    with pytest.raises(ConfigError, match="tool 'f'"):
        client.call("hi", [bad])


@pytest.fixture(scope="module")
def gateway(smol_engine: EngineProcess) -> Iterator[str]:
    with serve_app(GatewayState.for_engine(smol_engine, TEST_MODEL)) as url:
        yield url


def test_gateway_answers_tool_calls_in_openai_shapes(gateway: str) -> None:
    body = {"model": TEST_MODEL, "messages": [{"role": "user", "content": "Weather in Rome, celsius please."}],
            "tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}
    answer = httpx.post(f"{gateway}/v1/chat/completions", json=body, timeout=300)
    assert answer.status_code == 200, answer.text
    data = answer.json()
    choice = data["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    assert_valid_calls(choice["message"]["tool_calls"])
    assert choice["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert data["tiankong"]["validated"] is True and data["usage"]["completion_tokens"] > 0

    streamed = httpx.post(f"{gateway}/v1/chat/completions", json={**body, "stream": True}, timeout=300)
    events = [json.loads(line[6:]) for line in streamed.text.splitlines()
              if line.startswith("data: ") and line != "data: [DONE]"]
    deltas = [e["choices"][0]["delta"] for e in events]
    calls = [c for d in deltas for c in d.get("tool_calls", [])]
    assert [c["index"] for c in calls] == list(range(len(calls))) and calls
    assert_valid_calls([{k: v for k, v in c.items() if k != "index"} for c in calls])
    assert events[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert streamed.text.rstrip().endswith("data: [DONE]")


def test_gateway_continues_after_a_tool_result(gateway: str) -> None:
    messages = [{"role": "user", "content": "Weather in Rome?"},
                {"role": "assistant", "content": None, "tool_calls": [{"id": "call_9", "type": "function",
                 "function": {"name": "get_weather", "arguments": '{"city":"Rome","unit":"celsius"}'}}]},
                {"role": "tool", "tool_call_id": "call_9", "content": "21 degrees, sunny"}]
    answer = httpx.post(f"{gateway}/v1/chat/completions", json={"model": TEST_MODEL, "messages": messages,
                                                                 "tools": TOOLS, "max_tokens": 40}, timeout=300)
    assert answer.status_code == 200, answer.text
    choice = answer.json()["choices"][0]
    if choice["finish_reason"] == "tool_calls":
        assert_valid_calls(choice["message"]["tool_calls"])
    else:
        assert isinstance(choice["message"]["content"], str) and choice["finish_reason"] in ("stop", "length")
    assert set(answer.json()["tiankong"]["probabilities"]) == {"get_weather", "open_ticket", REPLY}


@pytest.mark.parametrize(("extra", "param"), [
    ({"tool_choice": "required"}, "tool_choice"),  # tool_choice without tools
    ({"tools": TOOLS, "tool_choice": "maybe"}, "tool_choice"),
    ({"tools": [{"type": "function", "function": {"name": "a b"}}]}, "tools"),
    ({"tools": TOOLS, "parallel_tool_calls": "yes"}, "parallel_tool_calls"),
    ({"tools": TOOLS, "response_format": {"type": "json_object"}}, "response_format"),
    ({"functions": [{"name": "f"}]}, "functions"),
    ({"tools": {}}, "tools"), ({"tools": ""}, "tools"), ({"tools": 0, "tool_choice": "auto"}, "tools"),  # were 500s
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {  # an unresolvable $ref: named where
        "type": "object", "properties": {"a": {"$ref": "#/$defs/Missing"}}}}}]}, "tools"),  # the client wrote it
])
def test_gateway_refuses_bad_tool_requests_with_the_field_named(gateway: str, extra: dict[str, Any],
                                                                 param: str) -> None:
    body = {"model": TEST_MODEL, "messages": [{"role": "user", "content": "hi"}], **extra}
    answer = httpx.post(f"{gateway}/v1/chat/completions", json=body, timeout=60)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["param"] == param
    if "$ref" in json.dumps(extra):
        message = answer.json()["error"]["message"]
        assert "'f'" in message and "/properties/a/$ref" in message and "#/$defs/Missing" in message, message


class _Address(BaseModel):
    city: str
    country: str


class _Person(BaseModel):
    name: str
    home: _Address


def test_parameters_with_defs_refs_are_resolved_against_the_parameters(gateway: str) -> None:
    """Issue 40: what Pydantic makes for a nested model ($defs + #/$defs/… refs), sent through the openai SDK."""
    from openai import OpenAI

    parameters = _Person.model_json_schema()
    assert "$defs" in parameters and "#/$defs/" in json.dumps(parameters)
    tools = [{"type": "function", "function": {"name": "save_person", "description": "Store a person.",
                                               "parameters": parameters}}]
    sdk = OpenAI(base_url=f"{gateway}/v1", api_key="unused", max_retries=0, timeout=300)
    answer = sdk.chat.completions.create(
        model=TEST_MODEL, messages=[{"role": "user", "content": "Save Ana, who lives in Lisbon, Portugal."}],
        tools=tools, tool_choice={"type": "function", "function": {"name": "save_person"}})  # type: ignore[list-item]
    calls = answer.choices[0].message.tool_calls
    assert calls and calls[0].function.name == "save_person"  # type: ignore[union-attr]
    arguments = json.loads(calls[0].function.arguments)  # type: ignore[union-attr]
    jsonschema.validate(arguments, parameters)  # the nested object came back whole and valid
    assert isinstance(arguments["home"], dict) and set(arguments["home"]) >= {"city", "country"}
    several = calls_schema(parse_tools([*tools, *TOOLS]), parse_tools(tools)[0], 2)
    assert set(several["$defs"]) == {"t0__Address"}  # lifted to the root once, under the tool's prefix
