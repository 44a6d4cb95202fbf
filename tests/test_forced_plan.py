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
DEV = Path(__file__).parent / "data" / "jsonschemabench-dev" / "schemas.jsonl"  # copied from the dev sample


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
