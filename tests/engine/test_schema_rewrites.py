"""The engine's copy of a schema: regexes in the grammar's subset, combinators the grammar can read.

Pure checks use hypothesis to draw strings from the rewritten pattern and check them against the original
(never wider); engine checks run SmolLM2 on the rewritten copy and validate the answer against the original.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers.logs import LogWindow
from tiankong import Client
from tiankong.engine import EngineProcess
from tiankong.errors import TruncatedOutput
from tiankong.structured import preflight
from tiankong.structured.combinators import flatten
from tiankong.structured.patterns import FORMAT_PATTERNS, engine_pattern, pattern_max_chars

# patterns seen in JSONSchemaBench that llama-server would otherwise turn into "any string"
REWRITTEN = [
    r".*:.*",                                                          # unanchored
    r"^([a-z0-9-]+):([a-z0-9\.-]+):([a-z0-9-]+)?:([a-z0-9-]+)$",       # \. inside a class
    r"^https?:\/\/.+",                                                 # \/ and a missing $
    r"^[\w.-]+@[\w-]+\.\w+$",                                          # \w inside and outside classes
    r"^\S+$",                                                          # \S
    r"^[^\s]+$",                                                       # negated class
    r"^a\.{2}b$",                                                      # escape followed by a quantifier
    r"^v\d+(\.\d+){0,2}$",
    r"^[\^x]+$",
    r"^\d{4}-\d{2}-\d{2}$",
    r"[0-9]",
    r"^#[0-9a-fA-F]{6}$",
    r'^".*"$',
    r"^[a-z]+?\d*?$",
    r"^a}+b{x}$",
    r"^[\s\w]+$",
    r"^\D\W\S$",
    r"^[^\n]+$",
    r"^a$|^b$",                                                        # anchors at the ends of alternatives
    r"^[0-9a-f]{8}-([0-9a-f]{4}-){3}[0-9a-f]{12}$|^[0-9a-f]{16}$",
    r"^$|^x+$",
    r"^[]|]a$|^[^|]b$|(c|d)",
]
REFUSED = [r"^(?=a)b", r"\bword\b", r"^(a)\1$", r"^a*+b$", r"^a\nb$", r"^[^\d]+$", r"a^b", r"^a$|(^b)"]


@pytest.mark.parametrize("pattern", REWRITTEN)
def test_rewritten_patterns_never_widen(pattern: str) -> None:
    rewritten = engine_pattern(pattern)
    assert rewritten is not None and rewritten.startswith("^") and rewritten.endswith("$")
    assert "*" not in rewritten.replace("\\*", "") and "+" not in rewritten.replace("\\+", "")  # bounded

    @settings(max_examples=60, deadline=None, database=None)
    @given(st.from_regex(rewritten, fullmatch=True))
    def check(text: str) -> None:
        assert re.search(pattern, text), (pattern, rewritten, text)
        assert all(ord(c) >= 0x20 for c in text)  # stands raw in a JSON string
        assert '"' not in text or '"' in pattern  # '.' and [^…] never produce a quote
        assert "\\" not in text

    check()


@pytest.mark.parametrize("pattern", REFUSED)
def test_patterns_without_a_rewrite_are_left_to_validation(pattern: str) -> None:
    assert engine_pattern(pattern) is None
    plan = preflight({"type": "string", "pattern": pattern})
    assert plan.unenforced and "pattern" not in plan.engine_schema
    assert plan.engine_schema["maxLength"] > 0  # bounded by length instead of "any string"


def test_pattern_next_to_length_is_listed() -> None:
    plan = preflight({"type": "string", "pattern": "^[a-z]+$", "minLength": 2})
    assert any("minLength next to a pattern" in u for u in plan.unenforced)
    words = {"type": "string", "pattern": r"^(?:\S+\s+){0,29}\S+$", "maxLength": 300}  # a bound shared by 59
    assert any("maxLength next to a pattern" in u for u in preflight(words).unenforced)
    assert preflight(words).engine_schema["pattern"] == engine_pattern(words["pattern"])  # words not cut short
    fixed = {"type": "string", "pattern": "^[a-z]{10}$", "maxLength": 5}  # no bound fits
    assert any("maxLength next to a pattern" in u for u in preflight(fixed).unenforced)


def test_length_next_to_an_unsupported_pattern_is_enforced() -> None:
    plan = preflight({"type": "string", "pattern": r"^(?=a)\w+$", "minLength": 2, "maxLength": 5})
    assert plan.unenforced == ["/pattern (regex features the grammar does not support)"]
    assert (plan.engine_schema["minLength"], plan.engine_schema["maxLength"]) == (2, 5)


@pytest.mark.parametrize(("pattern", "max_length"), [
    (r"^(\d+\.\d+\.\d+.*)$", 32), (r"^[a-z]+$", 5), (r"^IGF[\w-]+$", 12), (r"^v\d+(\.\d+){0,2}$", 9),
    (r"^[a-z]*@[a-z]+\.com$", 20), (r"^(ab|c)+x?$", 10),
])
def test_max_length_next_to_a_pattern_is_fitted_into_the_grammar(pattern: str, max_length: int) -> None:
    plan = preflight({"type": "string", "pattern": pattern, "maxLength": max_length})
    assert not plan.unenforced
    fitted = plan.engine_schema["pattern"]
    assert fitted != engine_pattern(pattern) and pattern_max_chars(fitted) <= max_length

    @settings(max_examples=80, deadline=None, database=None)
    @given(st.from_regex(fitted, fullmatch=True))
    def check(text: str) -> None:
        assert re.search(pattern, text) and len(text) <= max_length, (fitted, text)  # never wider, never longer

    check()


@pytest.mark.parametrize("pattern", REWRITTEN)
def test_pattern_max_chars_is_an_upper_bound(pattern: str) -> None:
    rewritten = engine_pattern(pattern, bound=6)
    assert rewritten is not None

    @settings(max_examples=60, deadline=None, database=None)
    @given(st.from_regex(rewritten, fullmatch=True))
    def check(text: str) -> None:
        assert len(text) <= pattern_max_chars(rewritten), (rewritten, text)

    check()


def test_engine_enforces_max_length_next_to_a_pattern(client: Client) -> None:
    schema = {"type": "object", "properties": {"version": {"type": "string", "pattern": r"^(\d+\.\d+\.\d+.*)$",
                                                           "maxLength": 12}}, "required": ["version"]}
    result = client.generate("Give the release version, with a long build suffix.", schema=schema)
    assert result.attempts == 1 and len(result.data["version"]) <= 12  # the grammar held it: no retry


ONE_OF_REQUIRED = {
    "type": "object",
    "properties": {"alias": {"type": "string", "minLength": 1}, "team": {"type": "string", "minLength": 1},
                   "accession": {"type": "string", "minLength": 1},
                   "nature": {"enum": ["derived from", "child of", "same as"]}},
    "oneOf": [{"required": ["alias", "team", "nature"]}, {"required": ["accession", "nature"]}],
}


def test_one_of_siblings_are_distributed_with_exclusions() -> None:
    node = json.loads(json.dumps(ONE_OF_REQUIRED))
    flatten(node, node)
    assert set(node) == {"anyOf"}
    first, second = node["anyOf"]
    assert set(first["properties"]) == {"alias", "team", "nature"} and first["additionalProperties"] is False
    assert set(second["properties"]) == {"accession", "nature"} and second["required"] == ["accession", "nature"]


def test_all_of_parts_merge_into_one_object() -> None:
    node = {"allOf": [{"$ref": "#/$defs/base"}, {"properties": {"b": {"type": "integer"}}, "required": ["b"]}],
            "$defs": {"base": {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}}}
    flatten(node, node)
    assert node["required"] == ["a", "b"] and set(node["properties"]) == {"a", "b"} and "allOf" not in node


@pytest.mark.parametrize("schema", [
    {"allOf": [{"type": "string"}, {"type": "integer"}]},                                  # no common type
    {"allOf": [{"properties": {"a": {"type": "string"}}, "additionalProperties": False},  # closed object
               {"properties": {"b": {"type": "string"}}}]},
    {"properties": {"a": {"type": "string"}}, "anyOf": [{"properties": {"a": {"type": "integer"}}}]},
])
def test_conflicting_parts_are_left_alone(schema: dict) -> None:  # type: ignore[type-arg]
    node = json.loads(json.dumps(schema))
    flatten(node, node)
    assert node == schema


# --- against the engine ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def client(smol_engine: EngineProcess) -> Iterator[Client]:
    with Client(smol_engine.url) as c:
        yield c


@pytest.mark.parametrize("pattern", [r".*:.*", r"^([a-z0-9-]+):([a-z0-9\.-]+):([a-z0-9-]+)?:([a-z0-9-]+)$",
                                     r"^[\w.-]+@[\w-]+\.\w+$", r"^v\d+(\.\d+){0,2}$",
                                     r"^[0-9a-f]{8}-([0-9a-f]{4}-){3}[0-9a-f]{12}$|^[0-9a-f]{16}$"])
def test_engine_enforces_rewritten_patterns(client: Client, smol_log: LogWindow, pattern: str) -> None:
    schema = {"type": "object", "properties": {"id": {"type": "string", "pattern": pattern}}, "required": ["id"]}
    result = client.generate("Give an identifier.", schema=schema)
    assert re.search(pattern, result.data["id"])  # SmolLM2 alone does not write these
    assert "is not supported" not in smol_log.text()  # this request's lines only (not test_hardening's)


def test_engine_enforces_distributed_one_of(client: Client) -> None:
    schema = {"type": "object", "properties": {"items": {"type": "array", "minItems": 2, "maxItems": 3,
                                                         "items": ONE_OF_REQUIRED}}, "required": ["items"]}
    result = client.generate("List sample relationships.", schema=schema)
    assert result.attempts == 1
    for item in result.data["items"]:
        assert ("accession" in item) != ("alias" in item)


def test_minimal_schema_keeps_required_and_fewest_items() -> None:
    schema = {"type": "object", "required": ["name", "tags"], "properties": {
        "name": {"type": "string"}, "note": {"type": "string"},
        "tags": {"type": "array", "minItems": 2, "items": {"type": "object", "properties": {
            "k": {"type": "string"}, "v": {"type": "string"}}, "required": ["k"]}}}}
    plan = preflight(schema)
    small = plan.minimal_schema
    assert small is not None and set(small["properties"]) == {"name", "tags"}
    tags = small["properties"]["tags"]
    assert tags["maxItems"] == 2 and set(tags["items"]["properties"]) == {"k"}
    assert small["properties"]["name"]["maxLength"] == 32
    assert preflight({"type": "string", "maxLength": 10}).minimal_schema is None  # nothing to drop


LONG_RECORD = {"type": "object", "required": ["id", "field_0"], "properties": {
    "id": {"type": "integer", "minimum": 0, "maximum": 999},
    **{f"field_{i}": {"type": "string", "minLength": 20, "maxLength": 40} for i in range(40)}}}


def test_truncation_falls_back_to_the_smallest_answers(client: Client) -> None:
    # 40 optional long strings cannot fit 80 tokens; the required fields alone can
    result = client.generate("Fill in every field of the record.", schema=LONG_RECORD, max_tokens=80)
    assert result.minimal and result.attempts >= 2
    assert set(result.data) == {"id", "field_0"}


def test_a_callers_max_tokens_bounds_every_attempt(client: Client) -> None:
    """A truncated answer is retried with twice the budget only when the budget is tiankong's own estimate: a
    caller's max_tokens is never exceeded by an attempt, so a request cannot multiply what it asked for."""
    try:
        result = client.generate("Fill in every field of the record.", schema=LONG_RECORD, max_tokens=40)
        attempts, usage = result.attempts, result.usage
    except TruncatedOutput as exc:
        attempts, usage = exc.attempts, exc.usage
    assert usage is not None and attempts >= 2
    # + 1: a fast-forward try cut off at the budget is not counted as an attempt
    assert usage.completion_tokens <= (attempts + 1) * 40, (usage, attempts)


def test_all_of_bringing_alternatives_is_distributed_too() -> None:
    node = {"allOf": [{"properties": {"a": {"type": "string"}}, "required": ["a"]},
                      {"anyOf": [{"required": ["b"]}, {"required": ["c"]}]}],
            "properties": {"b": {"type": "integer"}, "c": {"type": "boolean"}}}
    flatten(node, node)
    assert set(node) == {"anyOf"}
    assert [sorted(branch["required"]) for branch in node["anyOf"]] == [["a", "b"], ["a", "c"]]


@settings(max_examples=400, deadline=None, database=None)
@given(st.text(alphabet="^$.*+?{}[]()|\\-,:0123456789adswDSWbntx\"' ", max_size=24))
def test_engine_pattern_never_crashes(pattern: str) -> None:
    rewritten = engine_pattern(pattern)
    if rewritten is not None:
        re.compile(rewritten)  # well-formed for Python too (and the original compiled)


def test_properties_nothing_satisfies_are_left_out() -> None:
    plan = preflight({"properties": {"base": {"not": {}}, "gone": False, "keep": {"type": "boolean"}}})
    assert set(plan.engine_schema["properties"]) == {"keep"}
    assert plan.engine_schema["additionalProperties"] is False
    assert plan.errors({"base": 1}) and not plan.errors({"keep": True})  # the original still decides


@pytest.mark.parametrize("fmt", sorted(FORMAT_PATTERNS))
def test_format_patterns_pass_the_format_checker(fmt: str) -> None:
    checker = jsonschema.Draft202012Validator.FORMAT_CHECKER
    assert fmt in checker.checkers  # the format-nongpl extra is installed: validation checks it too
    rewritten = engine_pattern(FORMAT_PATTERNS[fmt])
    assert rewritten is not None

    @settings(max_examples=80, deadline=None, database=None)
    @given(st.from_regex(rewritten, fullmatch=True))
    def check(text: str) -> None:
        assert checker.conforms(text, fmt), (fmt, text)

    check()
    plan = preflight({"type": "string", "format": fmt})
    assert plan.engine_schema["pattern"] == rewritten and not plan.unenforced  # the grammar enforces it


def test_unknown_formats_are_annotations() -> None:
    plan = preflight({"type": "integer", "format": "int32"})
    assert not plan.unenforced and not plan.errors(2**40)


def test_alternatives_the_grammar_cannot_hold_are_left_out() -> None:
    icon = {"oneOf": [{"type": "string"},
                      {"type": "object", "propertyNames": {"pattern": "^[1-9][0-9]*$"},
                       "additionalProperties": {"type": "string"}}]}
    plan = preflight({"type": "object", "properties": {"icon": icon}})
    assert [b["type"] for b in plan.engine_schema["properties"]["icon"]["oneOf"]] == ["string"]
    assert not plan.errors({"icon": {"16": "a.png"}})  # the original still accepts both
    only = preflight({"anyOf": [{"type": "array", "uniqueItems": True}, {"not": {"type": "null"}}]})
    assert len(only.engine_schema["anyOf"]) == 2  # nothing clean remains: kept, left to validation


MAP = {"type": "object", "properties": {"name": {"type": "string"}},
       "patternProperties": {"^[A-Z_]+$": {"type": "string", "maxLength": 12}}}


def test_pattern_properties_become_the_schema_of_every_undeclared_property() -> None:
    plan = preflight(MAP)
    assert plan.unenforced == [] and "patternProperties" not in plan.engine_schema
    assert plan.engine_schema["additionalProperties"]["type"] == "string"
    copy = jsonschema.Draft202012Validator(plan.engine_schema)
    for instance in ({"name": "a", "HOME": "/root"}, {"PATH": "x", "lower": "y"}, {"name": "only"}):
        assert copy.is_valid(instance) and not plan.errors(instance)  # what the copy allows, the original does
    assert not copy.is_valid({"lower": 3}) and not plan.errors({"lower": 3})  # narrower, never wider


@pytest.mark.parametrize("schema", [
    {"properties": {"HOME": {"type": "integer"}}, "patternProperties": {"^[A-Z]+$": {"type": "string"}}},
    {"patternProperties": {"^[A-Z]+$": {"type": "string"}}, "additionalProperties": False},
])
def test_pattern_properties_the_copy_cannot_hold_are_left_to_validation(schema: dict) -> None:  # type: ignore[type-arg]
    plan = preflight({"type": "object", **schema})
    assert plan.unenforced == ["/patternProperties (patternProperties)"]
    assert "patternProperties" in plan.engine_schema


def test_pattern_properties_with_a_schema_for_the_rest_need_both() -> None:
    plan = preflight({"type": "object", "patternProperties": {"^n_": {"type": "integer"}, "^s_": False},
                      "additionalProperties": {"type": "number"}})
    assert plan.engine_schema["additionalProperties"] is False  # names matching "^s_" are forbidden: none
    both = preflight({"type": "object", "patternProperties": {"^n_": {"type": "integer"}},
                      "additionalProperties": {"minimum": 0}}).engine_schema["additionalProperties"]
    assert both == {"type": "integer", "minimum": 0}  # allOf merged


def test_minimal_copy_writes_no_undeclared_properties() -> None:
    plan = preflight({"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"],
                      "additionalProperties": {"type": "string"}})
    assert plan.minimal_schema is not None and plan.minimal_schema["additionalProperties"] is False
    keep = preflight({"type": "object", "minProperties": 2, "additionalProperties": {"type": "string"}})
    assert keep.minimal_schema is None or keep.minimal_schema["additionalProperties"] != False  # noqa: E712


def test_engine_enforces_pattern_properties(client: Client) -> None:
    schema = {"type": "object", "properties": {"env": MAP}, "required": ["env"]}
    result = client.generate("Give the environment variables of a web server.", schema=schema)
    assert result.attempts == 1
    extra = {key: value for key, value in result.data["env"].items() if key != "name"}
    assert all(isinstance(value, str) and len(value) <= 12 for value in extra.values())


def test_minimal_copy_cannot_nest_without_end() -> None:
    tree = {"$ref": "#/$defs/item", "$defs": {
        "item": {"oneOf": [{"$ref": "#/$defs/leaf"}, {"$ref": "#/$defs/group"}]},
        "leaf": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
        "group": {"type": "object", "required": ["items"], "properties": {
            "items": {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/item"}}}}}}
    plan = preflight(tree)
    assert len(plan.engine_schema["$defs"]["item"]["oneOf"]) == 2  # the first tries may nest
    assert plan.minimal_schema is not None
    assert plan.minimal_schema["$defs"]["item"]["oneOf"] == [{"$ref": "#/$defs/leaf"}]  # the last try cannot
    assert not plan.errors({"name": "x"}) and not plan.errors({"items": [{"items": [{"name": "y"}]}]})


def test_references_to_the_root_get_a_name() -> None:
    tree = {"type": "object", "properties": {"name": {"type": "string"},
                                             "children": {"type": "array", "items": {"$ref": "#"}}},
            "required": ["name"], "definitions": {"x": {"type": "integer"}}}
    plan = preflight(tree)
    engine = plan.engine_schema
    assert engine["properties"]["children"]["items"] == {"$ref": "#/definitions/tiankong_root"}
    assert engine["definitions"]["tiankong_root"]["properties"]["children"]["items"]["$ref"] == \
        "#/definitions/tiankong_root"
    copy = jsonschema.Draft7Validator(engine)
    for instance in ({"name": "a", "children": [{"name": "b", "children": []}]}, {"name": "c"}, {"children": []}):
        assert copy.is_valid(instance) == (not plan.errors(instance))  # the same schema, named
