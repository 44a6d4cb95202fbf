"""Forced-segment planning (structured/forced.py): pure, no engine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tiankong.structured.forced import (
    MIN_FORCED_PER_CALL,
    Arr,
    Const,
    Num,
    Obj,
    Pick,
    Str,
    Value,
    estimate,
    plan_forced,
)
from tiankong.structured.schema import preflight

LOG_EVENT = {"type": "object", "properties": {
    "level": {"type": "string", "enum": ["DEBUG", "INFO", "WARN", "ERROR"]}, "service": {"type": "string"},
    "message": {"type": "string"}, "duration_ms": {"type": "integer"}},
    "required": ["level", "service", "message", "duration_ms"]}
DEV = Path(__file__).parents[1] / "data" / "jsonschemabench-dev" / "schemas.jsonl"  # copied from the dev sample


def planned(schema: dict) -> Obj | Arr:
    plan = plan_forced(preflight(schema).engine_schema)
    assert plan.root is not None, plan.reason
    return plan.root


def test_flat_enum_heavy_object_forces_keys_and_picks_values() -> None:
    schema = {"type": "object", "properties": {
        "severity": {"enum": ["low", "medium", "high"]}, "urgent": {"type": "boolean"},
        "kind": {"const": "ticket"}, "team": {"type": "string", "enum": ["billing", "support"]}},
        "required": ["severity", "urgent", "kind", "team"]}
    root = planned(schema)
    assert isinstance(root, Obj) and not root.optional
    nodes = dict(root.required)
    assert nodes["severity"] == Pick(('"low"', '"medium"', '"high"'))
    assert nodes["urgent"] == Pick(("true", "false"))
    assert nodes["kind"] == Const('"ticket"')
    forced, calls = estimate(root)
    assert calls == 3 and forced / calls >= MIN_FORCED_PER_CALL


def test_log_event_keeps_property_order_and_caps_strings() -> None:
    root = planned(LOG_EVENT)
    assert [name for name, _ in root.required] == ["level", "service", "message", "duration_ms"]
    service = dict(root.required)["service"]
    assert isinstance(service, Str) and 0 < service.max_length <= 4096  # the bounded copy's cap
    assert dict(root.required)["duration_ms"] == Num(integer=True)


def test_nested_objects_and_optional_properties() -> None:
    schema = {"type": "object", "properties": {
        "user": {"type": "object", "properties": {"name": {"type": "string"}, "email": {"type": "string"}},
                 "required": ["name"]},
        "score": {"type": "number"}}, "required": ["user", "score"]}
    root = planned(schema)
    user = dict(root.required)["user"]
    assert isinstance(user, Obj)
    assert [n for n, _ in user.required] == ["name"] and [n for n, _ in user.optional] == ["email"]
    assert dict(root.required)["score"] == Num(integer=False)


def test_arrays_of_objects_with_bounds() -> None:
    schema = {"type": "object", "properties": {"items": {"type": "array", "minItems": 1, "maxItems": 5, "items": {
        "type": "object", "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}},
        "required": ["sku", "qty"]}}}, "required": ["items"]}
    items = dict(planned(schema).required)["items"]
    assert isinstance(items, Arr) and (items.min_items, items.max_items) == (1, 5)
    assert isinstance(items.item, Obj)
    tags = {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}}},
            "required": ["tags"]}
    tags_node = dict(planned(tags).required)["tags"]  # lists of strings: item by item, or under the engine's
    assert isinstance(tags_node, Arr) and isinstance(tags_node.fallback, Value)  # grammar when JSON is compact


def test_rich_keywords_become_engine_grammar_values() -> None:
    schema = {"type": "object", "properties": {
        "date": {"type": "string", "format": "date"}, "code": {"type": "string", "pattern": "^[A-Z]{3}$"},
        "either": {"anyOf": [{"type": "string"}, {"type": "integer"}]}, "age": {"type": "integer", "minimum": 0},
        "ids": {"type": "array", "items": {"type": "integer"}}, "title": {"type": "string"}},
        "required": ["date", "code", "either", "age", "ids", "title"]}
    nodes = dict(planned(schema).required)
    for name in ("date", "code", "either", "age", "ids"):
        assert isinstance(nodes[name], Value), name
    assert isinstance(nodes["title"], Str)


def test_numeric_enum_with_prefix_values_is_left_to_the_engine() -> None:
    schema = {"type": "object", "properties": {"n": {"enum": [1, 10, 100]}, "m": {"enum": ["a", "b"]}},
              "required": ["n", "m"]}
    nodes = dict(planned(schema).required)
    assert isinstance(nodes["n"], Value) and isinstance(nodes["m"], Pick)


def test_refs_are_resolved() -> None:
    schema = {"$defs": {"pt": {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
                               "required": ["x", "y"]}},
              "type": "object", "properties": {"a": {"$ref": "#/$defs/pt"}, "b": {"$ref": "#/$defs/pt"}},
              "required": ["a", "b"]}
    nodes = dict(planned(schema).required)
    assert isinstance(nodes["a"], Obj) and nodes["a"] == nodes["b"]


@pytest.mark.parametrize(("schema", "why"), [
    ({"type": "string"}, "single value"),
    ({"type": "integer", "minimum": 3}, "single value"),
    ({"type": "array", "items": {"type": "string"}}, "single value"),  # a list of strings: the engine's grammar
    ({"type": "object", "properties": {k: {"type": "integer"} for k in "abc"}, "required": ["a", "b", "c"]},
     "too little forced structure"),
    ({"anyOf": [{"type": "object"}, {"type": "array"}]}, "single value"),
])
def test_schemas_where_fast_forward_cannot_help_take_the_fallback(schema: dict, why: str) -> None:
    plan = plan_forced(preflight(schema).engine_schema)
    assert plan.root is None and why in plan.reason


def test_most_of_the_development_sample_plans() -> None:
    rows = [json.loads(line) for line in DEV.read_text().splitlines()]
    plans = [plan_forced(preflight(row["schema"]).engine_schema) for row in rows]
    planned_share = sum(p.root is not None for p in plans) / len(plans)
    assert planned_share > 0.6
    assert all(p.reason for p in plans if p.root is None)


def test_the_schema_in_a_prompt_stays_within_its_budget() -> None:
    from tiankong.structured.prompts import SCHEMA_PROMPT_CHARS, schema_prompt

    rows = [json.loads(line) for line in DEV.read_text().splitlines()]
    longest = max((row["schema"] for row in rows), key=lambda s: len(json.dumps(s)))
    assert len(json.dumps(longest)) > 4 * SCHEMA_PROMPT_CHARS
    line, form = schema_prompt(longest, "en")
    assert form in ("example", "keys") and len(line) <= SCHEMA_PROMPT_CHARS + 40
    small, form = schema_prompt(LOG_EVENT, "en")
    assert form == "schema" and '"duration_ms"' in small


def test_the_simplified_engine_copy_drops_string_shapes_not_property_names() -> None:
    from tiankong.structured.constraints import simplify_schema

    schema = {"type": "object", "properties": {
        "pattern": {"type": "string", "pattern": "^[a-z]+$"}, "when": {"type": "string", "format": "date-time"},
        "tags": {"type": "array", "items": {"type": "string", "pattern": "^#"}}},
        "patternProperties": {"^x": {"type": "string"}}, "required": ["pattern"]}
    simpler = simplify_schema(schema)
    assert set(simpler["properties"]) == {"pattern", "when", "tags"}  # a property called "pattern" stays
    assert "pattern" not in simpler["properties"]["pattern"] and "format" not in simpler["properties"]["when"]
    assert "pattern" not in simpler["properties"]["tags"]["items"] and "patternProperties" not in simpler
    assert simpler["required"] == ["pattern"]


# --- the forced text is the model's own (issue 40): a scripted engine whose model writes one answer ------------

class OwnAnswer:
    """A scripted engine whose model writes ``answer`` and nothing else: every ``/completion`` must continue a
    prefix of it (forced text the model would not have written fails the test at once), and answers as llama-server
    does — one token (≤ 3 characters, within an option) for a choice, up to the first stop word for a value, a
    whole JSON value under ``json_schema``."""

    def __init__(self, answer: str) -> None:
        self.answer, self.sent = answer, 0

    def __call__(self, method: str, path: str, body: dict | None) -> dict:
        body = body or {}
        if path == "/apply-template":
            return {"prompt": "<prompt>"}
        if path == "/tokenize":
            return {"tokens": list(range(len(body["content"]) // 3))}
        assert path == "/completion", path
        self.sent += 1
        prefix = body["prompt"][len("<prompt>"):]
        assert self.answer.startswith(prefix), f"forced text the model would not write:\n{prefix!r}"
        rest = self.answer[len(prefix):]
        if "json_schema" in body:
            _, end = json.JSONDecoder().raw_decode(rest)
            return self.answered(rest[:end], "", "eos")
        stops = body.get("stop")
        if not stops:  # a choice among literal options: one token
            options = [json.loads(o) for o in body["grammar"][len("root ::= "):].split(" | ")]
            size = max(n for n in range(4) if any(o.startswith(rest[:n]) for o in options))
            return self.answered(rest[:size], "", "limit")
        at, word = min((rest.find(w), w) for w in stops if rest.find(w) >= 0)
        return self.answered(rest[:at], word, "word")

    @staticmethod
    def answered(content: str, word: str, stop: str) -> dict:
        return {"content": content, "stopping_word": word, "stop_type": stop, "tokens_evaluated": 10,
                "tokens_predicted": max(1, len(content) // 3)}


def walked(schema: dict, answer: str) -> tuple[str, int]:
    from tiankong.structured.drivers import run_sync  # noqa: PLC0415
    from tiankong.structured.fastforward import fast_forward_flow  # noqa: PLC0415
    engine = OwnAnswer(answer)
    progress, reason = run_sync(fast_forward_flow([{"role": "user", "content": "x"}], planned(schema), budget=512,
                                                  seed=0), engine)
    assert not reason, reason
    return progress.text, engine.sent


ORDER = {"type": "object", "properties": {
    "name": {"type": "string"}, "age": {"type": "integer"}, "ok": {"type": "boolean"},
    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 5},
    "lines": {"type": "array", "items": {"type": "object", "properties": {
        "sku": {"type": "string"}, "qty": {"type": "integer"}}, "required": ["sku", "qty"]}, "maxItems": 4},
    "addr": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    "note": {"type": "string"}},
    "required": ["name", "age", "ok", "tags", "lines", "addr"]}
#: what Qwen2.5-Coder-0.5B wrote for this schema, under llama-server's json_schema and free alike (2026-12-05)
QWEN_ORDER = ('{\n  "name": "John Smith",\n  "age": 30,\n  "ok": true,\n  "tags": ["urgent", "gift"],\n  "lines": [\n'
              '    {\n      "sku": "SKU-1",\n      "qty": 2\n    },\n    {\n      "sku": "SKU-9",\n      "qty": 3\n'
              '    }\n  ],\n  "addr": {\n    "city": "Boston"\n  }\n}')
ENTITIES = {"type": "object", "properties": {
    key: {"type": "array", "items": {"type": "string"}, "maxItems": 12} for key in ("persons", "places", "orgs")},
    "required": ["persons", "places", "orgs"]}


@pytest.mark.parametrize("schema, answer", [
    (ORDER, QWEN_ORDER),  # indented, lists of strings on one line, lists of objects one a line
    (ORDER, QWEN_ORDER.replace("  ", "    ")),  # indented by 4
    (ORDER, json.dumps(json.loads(QWEN_ORDER), separators=(",", ":"))),  # compact, as SmolLM2 mostly writes
    (ENTITIES, '{\n  "persons": ["江泽民"],\n  "places": [],\n  "orgs": ["新华社", "国务院"]\n}'),
    (LOG_EVENT, '{\n  "level": "INFO",\n  "service": "",\n  "message": "done",\n  "duration_ms": 57\n}'),
], ids=["indent-2", "indent-4", "compact", "lists-end-early", "empty-string"])
def test_fast_forward_writes_the_models_own_layout_and_lets_it_end_lists(schema: dict, answer: str) -> None:
    """The forced keys and punctuation are laid out as the model writes JSON (read from its first tokens), and a
    list ends where the model ends it — not padded to maxItems: the walk's answer is the model's own, character
    for character. (Before: compact text was forced on an indented writer, and the values after it shifted.)"""
    text, _ = walked(schema, answer)
    assert text == answer
