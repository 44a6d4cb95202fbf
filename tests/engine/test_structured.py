"""Structured output: preflight, bounded schemas, validation + retry, truncation, modes, choices."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Literal

import pytest
from pydantic import BaseModel, Field

from helpers.cloud_like import CloudLike, cloud_like
from tiankong import AsyncClient, Client, Decision
from tiankong.engine import EngineConfig, EngineProcess
from tiankong.errors import ConfigError, InvalidSchema, RetriesExhausted, SchemaNotSupported, TruncatedOutput
from tiankong.models import DEFAULT_MODEL
from tiankong.structured import constrained_flow, decide, preflight
from tiankong.structured.constraints import schema_constraint


class Person(BaseModel):
    name: str = Field(max_length=40)
    age: int


class LogEvent(BaseModel):
    level: Literal["DEBUG", "INFO", "WARN", "ERROR"]
    service: str = Field(max_length=60)
    latency_ms: int


@pytest.fixture(scope="module")
def client(smol_engine: EngineProcess) -> Iterator[Client]:
    with Client(smol_engine.url) as c:
        yield c


# --- preflight (pure) --------------------------------------------------------------------------------------


def test_strict_preflight_names_every_unenforced_pointer() -> None:
    schema = {"type": "object", "properties": {
        "a": {"type": "string", "not": {"const": "x"}},
        "b": {"type": "array", "items": {"type": "integer"}, "uniqueItems": True},
        "c": {"type": "number", "minimum": 0.5},
    }, "patternProperties": {"^x": {"type": "string"}}, "additionalProperties": False}  # keys by pattern
    with pytest.raises(SchemaNotSupported) as err:
        preflight(schema, strict=True)
    pointers = " ".join(err.value.pointers)
    for expected in ("/properties/a/not", "/properties/b/uniqueItems", "/properties/c/minimum", "/patternProperties"):
        assert expected in pointers
    plan = preflight(schema)  # default: enforced by validation + retry instead
    assert len(plan.unenforced) == 4


@pytest.mark.parametrize("schema, fragment", [
    ({"$ref": "https://example.com/schema.json"}, "remote $ref"),
    ({"properties": {"a": {"$ref": "#/$defs/missing"}}}, "unresolvable $ref"),
    ({"$dynamicRef": "#meta"}, "$dynamicRef"),
])
def test_unenforceable_schemas_are_refused(schema: dict, fragment: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(SchemaNotSupported, match=fragment.replace("$", r"\$")):
        preflight(schema)


@pytest.mark.parametrize("schema", ["{not json", "[1, 2]", {"type": "no-such-type"}, {"minLength": "ten"},
                                    {"type": "string", "pattern": "^(a$"}])
def test_invalid_schemas_are_refused(schema: object) -> None:
    with pytest.raises(InvalidSchema):
        preflight(schema)


def test_engine_copy_is_bounded_and_original_kept() -> None:
    schema = {"type": "object", "properties": {"s": {"type": "string"}, "l": {"type": "array", "items": {}}}}
    plan = preflight(schema, max_string=100, max_items=5)
    bounded = plan.engine_schema
    assert bounded["properties"]["s"]["maxLength"] == 100 and bounded["properties"]["l"]["maxItems"] == 5
    assert bounded["additionalProperties"] is False
    assert "maxLength" not in schema["properties"]["s"]  # the caller's schema is untouched
    assert 32 <= plan.budget_tokens <= 1024


@pytest.mark.parametrize("schema, pointer", [
    ({"if": {"properties": {"a": {"const": 1}}}, "then": {"required": ["b"]}, "else": {"required": ["c"]}},
     ["/if (if)", "/then (then)", "/else (else)"]),
    ({"type": "number", "exclusiveMaximum": 1.5}, ["/exclusiveMaximum (exclusiveMaximum on a non-integer)"]),
    ({"type": "string", "pattern": "^(?=a)b"}, ["/pattern (regex features the grammar does not support)"]),
    ({"type": "array", "items": {"type": "integer"}, "contains": {"const": 3}}, ["/contains (contains)"]),
    ({"type": "integer", "minimum": 0, "maximum": 9}, []),  # integer bounds: the grammar holds them
])
def test_unenforced_keywords_are_named_by_pointer(schema: dict, pointer: list[str]) -> None:  # type: ignore[type-arg]
    assert preflight(schema).unenforced == pointer


DRAFT7 = "http://json-schema.org/draft-07/schema#"


def test_preflight_walks_tuple_items_and_dependencies() -> None:
    tuple_items = {"$schema": DRAFT7, "type": "array", "items": [{"type": "integer"}, {"$ref": "other.json"}]}
    with pytest.raises(SchemaNotSupported) as err:
        preflight(tuple_items)
    assert err.value.pointers == ["/items/1/$ref (remote $ref other.json)"]
    deps = {"$schema": DRAFT7, "type": "object", "properties": {"a": {"type": "string"}},
            "dependencies": {"a": {"not": {"required": ["b"]}}, "c": ["a"]}}
    assert preflight(deps).unenforced == ["/dependencies (dependencies)", "/dependencies/a/not (not)"]


def _chat(content: str, finish_reason: str = "stop") -> dict:  # type: ignore[type-arg]
    return {"choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                         "finish_reason": finish_reason}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}


@pytest.mark.parametrize("text, marker", [("The level is loud.", "does not match the schema"),
                                          ("日志级别很高。", "不符合")])
def test_retry_carries_the_validators_message(text: str, marker: str) -> None:
    # the flow is sans-I/O: feed it engine answers and read the request it sends next
    constraint, _ = schema_constraint({"type": "object", "properties": {"level": {"enum": ["INFO", "ERROR"]}},
                                       "required": ["level"]})
    # the whole-answer grammar path (fast-forward has its own tests: test_fast_forward.py)
    flow = constrained_flow([{"role": "user", "content": text}], constraint, model=None, fast_forward=False)
    (first,) = next(flow)
    assert first.body is not None and first.body["temperature"] == 0 \
        and first.body["response_format"]["type"] == "json_schema"
    (second,) = flow.send([_chat('{"level":"LOUD"}')])
    assert second.body is not None
    repair = second.body["messages"][-1]
    assert repair["role"] == "user" and "'LOUD' is not one of ['INFO', 'ERROR']" in repair["content"]
    assert marker in repair["content"]  # the prompt's language follows the input's
    assert second.body["messages"][-2] == {"role": "assistant", "content": '{"level":"LOUD"}'}
    with pytest.raises(StopIteration) as done:
        flow.send([_chat('{"level":"ERROR"}')])
    assert done.value.value.data == {"level": "ERROR"} and done.value.value.attempts == 2


def test_multi_label_decision_keeps_every_label_above_the_threshold() -> None:
    decision = decide({"billing": 0.45, "bug": 0.4, "other": 0.15}, threshold=0.3)
    assert decision.label == "billing" and decision.labels == ["billing", "bug"]
    assert abs(decision.margin - 0.05) < 1e-9
    assert decide({"a": 0.5, "b": 0.5}, threshold=0.9).labels == ["a"]  # none above: the top label alone
    assert decide({"a": 0.7, "b": 0.3}).labels == ["a"]


# --- against the engine ------------------------------------------------------------------------------------


def test_pydantic_round_trip(client: Client) -> None:
    person = client.extract("Ada Lovelace was 36 years old.", Person)
    assert isinstance(person, Person) and isinstance(person.age, int) and len(person.name) <= 40
    result = client.extract_result("Ada Lovelace was 36 years old.", Person)
    assert result.attempts >= 1 and result.usage.completion_tokens > 0
    again = Person.model_validate(result.data)
    assert Person.model_validate_json(again.model_dump_json()) == again


def test_violated_schema_is_retried_with_the_error_then_refused(client: Client) -> None:
    # the grammar can only produce "abc"; validation (the `not`) always rejects it
    schema = {"const": "abc", "not": {"const": "abc"}}
    with pytest.raises(RetriesExhausted) as err:
        client.generate("Say something.", schema=schema)
    assert err.value.attempts == 2
    assert err.value.last_raw.strip() == '"abc"'
    assert err.value.errors and "should not be valid" in err.value.errors[0]


def test_truncation_retries_smallest_within_the_callers_max_tokens_then_raises(client: Client) -> None:
    schema = {"type": "object", "properties": {"story": {"type": "string", "minLength": 300, "maxLength": 400}},
              "required": ["story"]}
    with pytest.raises(TruncatedOutput) as err:
        client.generate("Write a story.", schema=schema, max_tokens=8)
    # 8 tokens, then 8 with the story at its minLength (300): still too long; the caller's max_tokens bounds each
    # attempt, so no retry with a doubled budget
    assert err.value.attempts == 2 and err.value.last_raw.startswith("{")


def test_engine_grammar_failure_is_an_error_not_text(client: Client) -> None:
    with pytest.raises(SchemaNotSupported, match="could not compile"):
        client.generate("Answer.", grammar='root ::= "yes" | "no')
    with pytest.raises(SchemaNotSupported, match="root"):
        client.generate("Answer.", grammar="root ::= ")


def test_regex_and_grammar_modes(client: Client) -> None:
    phone = client.generate("Give a phone number.", regex=r"\(\d{3}\) \d{3}-\d{4}")
    assert __import__("re").fullmatch(r"\(\d{3}\) \d{3}-\d{4}", phone.data)
    answer = client.generate("Is water wet?", grammar='root ::= "yes" | "no"')
    assert answer.data in ("yes", "no")
    with pytest.raises(InvalidSchema):
        client.generate("x", regex="(unclosed")


def test_choose_returns_a_distribution(client: Client) -> None:
    decision = client.choose("I love this phone, it is wonderful!", ["positive", "negative", "neutral"])
    assert isinstance(decision, Decision) and decision.label in ("positive", "negative", "neutral")
    assert abs(sum(decision.scores.values()) - 1.0) < 1e-6
    assert decision.scores[decision.label] == max(decision.scores.values())
    assert 0.0 <= decision.margin <= 1.0
    multi = client.choose("The cat sat on the mat.", ["animal", "animal husbandry", "finance", "no", "none"])
    assert set(multi.scores) == {"animal", "animal husbandry", "finance", "no", "none"}
    assert abs(sum(multi.scores.values()) - 1.0) < 1e-6


def test_choose_handles_labels_split_into_bytes(client: Client) -> None:
    # SmolLM2's tokenizer splits these characters into partial UTF-8 pieces
    decision = client.choose("这个产品太差了，我很失望", ["正面", "负面"])
    assert set(decision.scores) == {"正面", "负面"} and abs(sum(decision.scores.values()) - 1) < 1e-6
    assert decision.margin > 0.0


def test_bad_choices_are_refused(client: Client) -> None:
    for bad in (["only"], ["a", "a"], ["a", ""]):
        with pytest.raises(Exception, match="distinct"):
            client.choose("text", bad)


def test_async_twin(smol_engine: EngineProcess) -> None:
    async def main() -> tuple[Person, Decision]:
        async with AsyncClient(smol_engine.url) as client:
            return await asyncio.gather(client.extract("Bob is 7.", Person), client.choose("Great!", ["good", "bad"]))

    person, decision = asyncio.run(main())
    assert isinstance(person, Person) and decision.label in ("good", "bad")


def test_seed_log_line_with_the_default_model(engine_binary, default_model_path) -> None:  # type: ignore[no-untyped-def]
    config = EngineConfig(model=default_model_path, ctx=2048, slots=1)
    with EngineProcess(config, engine_binary) as engine, Client(engine.url) as client:
        event = client.extract("2026-09-13 21:03 ERROR payment-service timeout after 3000ms", LogEvent)
        assert event.level == "ERROR"
        assert "payment" in event.service
        assert event.latency_ms == 3000


def test_seed_log_line_enum_is_in_the_grammar() -> None:
    _, plan = schema_constraint(LogEvent)
    level = plan.engine_schema["properties"]["level"]
    assert level["enum"] == ["DEBUG", "INFO", "WARN", "ERROR"]  # the grammar can only write one of these
    assert plan.unenforced == [] and plan.errors({"level": "FATAL", "service": "x", "latency_ms": 1})


def test_default_model_name_is_pinned() -> None:
    assert DEFAULT_MODEL == "qwen2.5-coder-0.5b-instruct:q4_k_m"


def test_delimited_decoding_for_backends_without_grammars() -> None:
    from tiankong.structured import decode_delimited

    assert decode_delimited('Sure!\n<json>\n{"a": 1}\n</json>\nBye') == {"a": 1}
    assert decode_delimited('<json>{"a": 1}') == {"a": 1}  # the stop sequence removed the closing tag
    assert decode_delimited('```json\n[1, 2]\n```') == [1, 2]
    assert decode_delimited('The answer is {"a": {"b": 2}} as asked.') == {"a": {"b": 2}}
    with pytest.raises(ValueError):
        decode_delimited("no json here")


def test_backends_without_grammars_get_an_example_delimiters_and_validation() -> None:
    # an upstream that ignores grammars (like a hosted API): the first answer breaks the schema, the second is valid
    first = 'Sure! <json>{"name": "Ada Lovelace", "age": "36"}</json>'
    second = '<json>{"name": "Ada Lovelace", "age": 36}'
    with cloud_like(first, second) as url, Client(url, model="far") as client:
        client.grammar_support = False
        person = client.extract("Ada Lovelace was 36 years old.", Person)
    assert person == Person(name="Ada Lovelace", age=36)
    sent, retried = CloudLike.seen
    assert sent["model"] == "far" and sent["stop"] == ["</json>"] and "response_format" not in sent
    system = sent["messages"][0]["content"]
    assert "<json>" in system and '{"name": "…", "age": 0}' in system  # the filled-in example of the shape
    assert "'36' is not of type 'integer'" in retried["messages"][-1]["content"]  # validated, retried with why
    with cloud_like("<json>not json</json>") as url, Client(url, model="far") as client:
        client.grammar_support = False
        with pytest.raises(RetriesExhausted) as err:
            client.extract("Ada Lovelace was 36 years old.", Person)
    assert err.value.attempts == 2 and err.value.last_raw == "<json>not json</json>"


def test_prompt_only_mode_still_validates(smol_engine: EngineProcess) -> None:
    # a backend that ignores grammars: example + delimiters in the prompt, then parse, validate, retry
    with Client(smol_engine.url) as client:
        client.grammar_support = False
        try:
            result = client.extract_result("Ada Lovelace was 36 years old.", Person, max_tokens=120)
        except (RetriesExhausted, TruncatedOutput) as exc:  # a 135M model may fail; it must say so, not return junk
            assert exc.attempts >= (2 if isinstance(exc, RetriesExhausted) else 1) and exc.last_raw
        else:
            Person.model_validate(result.data)


def test_labels_of_byte_pieces_are_an_input_error_not_an_engine_failure(smol_engine: EngineProcess) -> None:
    """Labels the tokenizer splits into partial UTF-8 pieces cannot be scored: a ConfigError (HTTP 400) that
    says what to use instead, never a transport error (502)."""
    from tiankong.structured.drivers import run_sync
    from tiankong.structured.flow import UnscorableLabels, choose_flow

    with Client(smol_engine.url) as client:
        messages = [{"role": "user", "content": "Pick one."}]
        with pytest.raises(UnscorableLabels) as caught:
            run_sync(choose_flow(messages, ["\U0001f984\U0001f409", "\U0001f9a9\U0001f9ad"]), client._request)
    assert isinstance(caught.value, ConfigError) and caught.value.http_status == 400


def test_a_json_object_request_with_a_schema_in_its_system_prompt_is_held_to_that_schema() -> None:
    import json

    from tiankong.gateway.structured_routes import request_schema

    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    body = {"response_format": {"type": "json_object"}, "messages": [
        {"role": "system", "content": f"Answer in JSON matching this json_schema:\n{json.dumps(schema)}\nNot the "
                                      "schema itself. Example of something else: {\"a\": 1}"},
        {"role": "user", "content": "Paris"}]}
    assert request_schema(body) == (schema, True)
    body["messages"][0]["content"] = "Answer in JSON. {not json"
    assert request_schema(body) == ({"type": "object"}, False)


def test_a_json_object_request_is_not_shown_the_placeholder_schema(client: Client) -> None:
    """``response_format: json_object`` is held to ``{"type": "object"}``; shown that schema in the prompt, the
    135M model answered with a copy of it (``{"type":"object"}``) on every prompt tried."""
    messages = [{"role": "system", "content": "Reply in JSON with keys name and age."},
                {"role": "user", "content": "Alice is 30 years old."}]
    result = client.generate(messages, schema={"type": "object"}, max_tokens=40)
    assert result.schema_in_prompt == "object" and isinstance(result.data, dict)
    assert result.data != {"type": "object"}
