"""Fast-forward decoding end to end on SmolLM2: forced text is prompt, free values are decoded, the answer is
validated like every other; schemas where it cannot help take the whole-answer grammar. Then Qwen2.5-Coder-0.5B
(the default model, which lays JSON out): the values after forced keys are the grammar path's, and lists end
where the model ends them (issue 40)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import jsonschema
import pytest

from tiankong import AsyncClient, Client
from tiankong.engine import EngineBinary, EngineConfig, EngineProcess
from tiankong.errors import TruncatedOutput
from tiankong.structured.prompts import EXTRACT_LEAN, extract_prompt

LOG_EVENT = {"type": "object", "properties": {
    "level": {"type": "string", "enum": ["DEBUG", "INFO", "WARN", "ERROR"]}, "service": {"type": "string"},
    "message": {"type": "string", "maxLength": 80}, "duration_ms": {"type": "integer"}},
    "required": ["level", "service", "message", "duration_ms"]}
LINE = "2026-11-03T10:04:00Z ERROR billing: invoice batch finished in 57ms"
ORDER = {"type": "object", "properties": {
    "customer": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 40},
                                                  "vip": {"type": "boolean"}}, "required": ["name", "vip"]},
    "lines": {"type": "array", "minItems": 1, "maxItems": 3, "items": {"type": "object", "properties": {
        "sku": {"type": "string", "maxLength": 20}, "qty": {"type": "integer"}}, "required": ["sku", "qty"]}},
    "tags": {"type": "array", "maxItems": 3, "items": {"enum": ["gift", "express", "fragile"]}},
    "total": {"type": "number"}, "note": {"type": "string", "maxLength": 40}},
    "required": ["customer", "lines", "tags", "total"]}
ORDER_TEXT = "Order from Ann Lee (VIP): 2 x SKU-1 and 1 x SKU-9, express, gift wrapped; total 41.50 EUR."


@pytest.fixture(scope="module")
def client(smol_engine: EngineProcess) -> Iterator[Client]:
    with Client(smol_engine.url) as c:
        yield c


def test_log_event_is_fast_forwarded_and_decodes_fewer_tokens(client: Client, smol_engine: EngineProcess) -> None:
    quick = client.extract_result(LINE, LOG_EVENT)
    jsonschema.validate(quick.data, LOG_EVENT)
    assert quick.path == "fast_forward" and not quick.fallback_reason
    assert quick.forced_tokens >= 8 and quick.attempts == 1
    assert quick.usage.completion_tokens == quick.decoded_tokens + quick.forced_tokens
    client.fast_forward = False
    try:
        whole = client.extract_result(LINE, LOG_EVENT)
    finally:
        client.fast_forward = True
    jsonschema.validate(whole.data, LOG_EVENT)
    assert whole.path == "grammar" and whole.forced_tokens == 0 and not whole.fallback_reason
    # the keys and punctuation are the forced text, laid out as the model lays out JSON itself (the whitespace
    # before the first key is the grammar path's; issue 40: a compact layout forced on it shifted the values)
    assert quick.raw.split('"level"')[0] == whole.raw.split('"level"')[0], (quick.raw, whole.raw)
    assert '"service":' in quick.raw and '"duration_ms":' in quick.raw
    # the tokens compared: the grammar path decodes every token of its answer; fast-forward decodes only the free
    # values of its own answer — fewer than that answer holds by at least the forced keys and punctuation. (Compared
    # on the same answer, not against the grammar path's: SmolLM2's free values differ between the two paths and
    # once looped, "Billing.Billing…", 51 decoded against the grammar path's 49 — a model loop, not the forcing.)
    assert whole.decoded_tokens == whole.usage.completion_tokens, whole
    answer_tokens = len(httpx.post(f"{smol_engine.url}/tokenize", json={"content": quick.raw}, timeout=60)
                        .json()["tokens"])
    assert quick.decoded_tokens + 8 <= answer_tokens, (quick.decoded_tokens, answer_tokens)


def test_nested_objects_arrays_enums_and_optional_keys(client: Client) -> None:
    result = client.extract_result(ORDER_TEXT, ORDER)
    jsonschema.validate(result.data, ORDER)
    assert result.path == "fast_forward", result.fallback_reason
    assert 1 <= len(result.data["lines"]) <= 3
    # in the schema's property order, laid out as the model lays JSON out (its first whitespace, probed): compact,
    # or one member a line indented by one unit a level (seen on CI's AVX2 CPU: SmolLM2 began with a newline)
    assert list(result.data) == [k for k in ORDER["properties"] if k in result.data]
    assert list(result.data["customer"]) == ["name", "vip"]
    outside = re.sub(r'"(?:[^"\\]|\\.)*"', '""', result.raw)  # the layout: the text outside strings
    if "\n" not in outside:
        assert not re.search(r"\s", outside), result.raw
    else:
        second = outside.split("\n")[1]
        unit = second[:len(second) - len(second.lstrip())]  # the probed indent ("" too: one member a line, flush)
        for line in outside.split("\n")[1:]:
            indent = line[:len(line) - len(line.lstrip())]
            assert indent == unit * (len(indent) // len(unit) if unit else 0), (line, result.raw)
        assert '"": ' in outside, result.raw  # a space after a key's colon, as Qwen2.5 and SmolLM2 write it


def test_async_twin_gives_the_same_answer(client: Client, smol_engine: EngineProcess) -> None:
    async def run() -> object:
        async with AsyncClient(smol_engine.url) as aclient:
            return await aclient.extract_result(LINE, LOG_EVENT)

    sync, aio = client.extract_result(LINE, LOG_EVENT), asyncio.run(run())
    assert aio.path == sync.path == "fast_forward"  # type: ignore[attr-defined]
    assert set(aio.data) == set(sync.data)  # type: ignore[attr-defined]
    assert aio.data["level"] == sync.data["level"]  # type: ignore[attr-defined]


@pytest.mark.parametrize(("schema", "why"), [
    ({"type": "object", "properties": {k: {"type": "integer"} for k in "xyz"}, "required": ["x", "y", "z"]},
     "forced structure"),
    ({"type": "array", "items": {"type": "string", "maxLength": 20}, "maxItems": 3}, "single value"),
    ({"type": "string", "maxLength": 30}, "single value"),
])
def test_a_schema_where_fast_forward_cannot_help_takes_the_grammar(client: Client, schema: dict, why: str) -> None:
    result = client.generate("List three fruits.", schema=schema)
    jsonschema.validate(result.data, schema)
    assert result.path == "grammar" and why in result.fallback_reason


def test_sampling_decodes_the_whole_answer(client: Client) -> None:
    result = client.generate("A log line.", schema=LOG_EVENT, temperature=0.7, seed=3)
    jsonschema.validate(result.data, LOG_EVENT)
    assert result.path == "grammar" and "temperature" in result.fallback_reason


def test_a_budget_too_small_abandons_then_fails_closed(client: Client) -> None:
    with pytest.raises(TruncatedOutput):
        client.extract_result(LINE, LOG_EVENT, max_tokens=4)


def test_a_schema_that_does_not_fit_beside_the_text_is_left_out_of_the_prompt(client: Client) -> None:
    fields = {f"field_{i}": {"type": "string", "maxLength": 8, "description": "a short code found in the text"}
              for i in range(8)}
    schema = {"type": "object", "properties": fields, "required": ["field_0"]}
    sentence = "Lot 7 arrived at the depot on time and was checked by the night shift. "

    def tokens(messages: list[dict]) -> int:
        prompt = client._request("POST", "/apply-template", {"messages": messages})["prompt"]
        return len(client.tokenize(prompt))

    slot = 2048  # the shared test engine: 4,096 tokens over 2 slots
    per = len(client.tokenize(sentence))
    for count in range(slot // per, 0, -1):  # the longest text that fits alone but not beside the schema
        text = sentence * count
        full, _ = extract_prompt(text, schema, None)
        lean = [{"role": "system", "content": EXTRACT_LEAN["en"]}, full[-1]]
        if tokens(lean) < slot - 8:
            assert tokens(full) > slot, "the schema line is too short for this test"
            break
    result = client.extract_result(text, schema, max_tokens=48)
    jsonschema.validate(result.data, schema)
    assert result.schema_in_prompt == "none"


# --- Qwen2.5-Coder-0.5B: the forced text is laid out as the model writes JSON (issue 40) ------------------------

ADDRESS = {"type": "object", "properties": {field: {"type": "string", "description": f"{what}; empty string if none"}
                                            for field, what in (
    ("recipient", "person or organisation the address is for"), ("address_number", "house or building number"),
    ("street", "street name with its direction and type words"), ("unit", "apartment, suite, floor or room"),
    ("po_box", "PO box or other postal box"), ("city", "city or town"), ("state", "state"),
    ("zip_code", "ZIP code"))}, "required": ["recipient", "address_number", "street", "unit", "po_box", "city",
                                             "state", "zip_code"]}
ENTITIES = {"type": "object", "properties": {
    key: {"type": "array", "items": {"type": "string"}, "maxItems": 12, "description": what}
    for key, what in (("persons", "文中的人名"), ("locations", "文中的地名"), ("organizations", "文中的机构名"))},
    "required": ["persons", "locations", "organizations"]}


@pytest.fixture(scope="module")
def qwen(engine_binary: EngineBinary, default_model_path: Path) -> Iterator[Client]:
    with EngineProcess(EngineConfig(model=default_model_path, ctx=4096, slots=1), engine_binary) as engine, \
            Client(engine.url) as c:
        yield c


def both_paths(client: Client, text: str, schema: dict) -> tuple[object, object]:
    quick = client.extract_result(text, schema)
    client.fast_forward = False
    try:
        whole = client.extract_result(text, schema)
    finally:
        client.fast_forward = True
    assert quick.path == "fast_forward" and whole.path == "grammar"
    jsonschema.validate(quick.data, schema)
    return quick.data, whole.data


AGREEING = [(text, ADDRESS) for text in ("6750 Poplar Ave, Memphis, TN 38138", "PO Box 512, Austin, TX 78701",
                                         "1200 Elm Street, Springfield, IL 62704")] + \
    [(text, ENTITIES) for text in ("安徽省公路运输部门组织乘务人员学习。", "国共两党主导的海峡两岸政治谈判受到关注。")]


def test_values_after_forced_keys_are_the_grammar_paths(qwen: Client) -> None:
    """Texts written for the test (not from the benchmark's sets). Measured at temperature 0, 2026-12-05: with
    the fix fast-forward gave the grammar path's answer on 5 of these 5 (engine with 2 threads) and 4 of 5 (this
    fixture's engine: there the grammar path itself answered the first Chinese text differently — a near tie that
    the engine's batch shapes flip); before the fix on 0 of 5 (forced compact text made Qwen write "None" or another
    field's text where it writes "", and fill the lists differently). Hence at least 3 of 5."""
    agreed = []
    for text, schema in AGREEING:
        quick, whole = both_paths(qwen, text, schema)
        agreed.append(quick == whole)
    assert sum(agreed) >= 3, agreed


def test_a_list_ends_where_the_model_ends_it_not_at_max_items(qwen: Client) -> None:
    """Before: under the engine's grammar for the list alone Qwen could not write the token it closes a list with
    (``"],``), and ran to maxItems repeating items (12 persons, 上海 ×12 on this sentence)."""
    quick, _ = both_paths(qwen, "新华社上海５月１日电，上海市人民政府今天召开会议。", ENTITIES)
    assert isinstance(quick, dict)
    for key, items in quick.items():
        assert len(items) < 12 and len(set(items)) == len(items), (key, items)
