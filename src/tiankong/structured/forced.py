"""Forced-segment planning: which characters of a JSON answer a schema fixes, and which the model must choose.

A schema becomes a small tree of nodes (pure; no engine). ``Obj`` keys and punctuation, ``Const`` values and the
common prefix of a ``Pick``'s options are *forced*: ``structured/fastforward.py`` appends them to the prompt,
where the engine reads them as one prefill batch instead of decoding them one step at a time. A ``Str`` or
``Num`` value, a ``Pick`` among options and ``Value`` (a sub-schema too rich for this planner, generated under the
engine's own grammar for that part alone) are *free*: each costs one engine call.

Why a schema walk and not ``llguidance`` (which computes forced tokens from a grammar): it needs the model's
tokenizer in this process (the GGUF vocabulary, rebuilt as a Hugging Face tokenizer) and is a second grammar
engine beside llama.cpp's; at the schema level the forced *text* is known directly and llama-server tokenizes it.

Whether fast-forward pays is decided per schema (:func:`plan_forced`): one engine call costs about as much as
decoding 1.5 tokens (its small prefill batch; measured on 2 CPU cores with Qwen2.5-0.5B: 4 prefilled tokens
≈ 45 ms, one decode step ≈ 30 ms), so a plan must force at least :data:`MIN_FORCED_PER_CALL` characters
(≈ 2 tokens) per free segment, or the whole-answer grammar runs instead.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, TypeAlias

from .budget import DEFAULT_MAX_ITEMS, DEFAULT_MAX_STRING
from .combinators import MISSING, resolve_ref

#: characters forced per free segment below which the whole-answer grammar is used (see the module docstring)
MIN_FORCED_PER_CALL = 6.0
#: array items assumed when estimating a plan's worth
ASSUMED_ITEMS = 2
MAX_DEPTH = 12
#: keywords this planner does not model: the node is generated under the engine's grammar (``Value``)
_RICH = ("anyOf", "oneOf", "allOf", "not", "if", "then", "else", "dependentSchemas", "dependentRequired",
         "dependencies", "minProperties", "maxProperties", "propertyNames", "patternProperties",
         "unevaluatedProperties", "prefixItems", "contains", "uniqueItems", "unevaluatedItems", "pattern",
         "format", "contentEncoding", "contentMediaType", "minimum", "maximum", "exclusiveMinimum",
         "exclusiveMaximum", "multipleOf", "$dynamicRef")


def literal(value: Any) -> str:
    """A value as the compact JSON text the answer carries."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


@dataclass(frozen=True)
class Const:
    """A value the schema fixes (``const``, a one-value ``enum``, ``null``)."""

    text: str


@dataclass(frozen=True)
class Pick:
    """One of several literal values (``enum``, boolean); no option is a prefix of another."""

    options: tuple[str, ...]


@dataclass(frozen=True)
class Str:
    min_length: int
    max_length: int


@dataclass(frozen=True)
class Num:
    integer: bool


@dataclass(frozen=True)
class Value:
    """A sub-schema generated under the engine's grammar for it alone (closed by its own last character)."""

    schema: dict[str, Any]


@dataclass(frozen=True)
class Obj:
    required: tuple[tuple[str, Node], ...]
    optional: tuple[tuple[str, Node], ...]


@dataclass(frozen=True)
class Arr:
    item: Node
    min_items: int
    max_items: int
    #: a list of strings or labels: generated under the engine's grammar (this ``Value``) when the model writes
    #: compact JSON, item by item when it lays JSON out (``fastforward.Layout``)
    fallback: Value | None = None


Node: TypeAlias = Const | Pick | Str | Num | Value | Obj | Arr


@dataclass(frozen=True)
class ForcedPlan:
    """A usable plan (``root``) or why the whole-answer grammar runs instead (``reason``)."""

    root: Obj | Arr | None
    reason: str = ""
    forced_chars: float = 0.0
    free_segments: float = 0.0


def plan_forced(engine_schema: dict[str, Any]) -> ForcedPlan:
    """Plan a (bounded) engine schema; ``root`` is None when fast-forward cannot help (``reason`` says why)."""
    try:
        root = _node(engine_schema, engine_schema, 0)
    except _Unplannable as exc:
        return ForcedPlan(None, str(exc))
    if not isinstance(root, (Obj, Arr)):
        return ForcedPlan(None, "the answer is a single value: nothing to fast-forward")
    forced, calls = estimate(root)
    if calls and forced / calls < MIN_FORCED_PER_CALL:
        return ForcedPlan(None, f"too little forced structure ({forced:.0f} characters for {calls:.0f} free "
                                "segments)", forced, calls)
    return ForcedPlan(root, "", forced, calls)


class _Unplannable(Exception):
    pass


def _node(schema: Any, root: dict[str, Any], depth: int) -> Node:
    if depth > MAX_DEPTH:
        raise _Unplannable("nested too deep to plan")
    if schema is True or schema == {}:
        return Value({})
    if not isinstance(schema, dict):
        raise _Unplannable("a sub-schema is not an object")
    if "$ref" in schema:
        target = resolve_ref(root, str(schema["$ref"]))
        if target is MISSING:
            raise _Unplannable(f"unresolvable $ref {schema['$ref']!r}")
        siblings = {k: v for k, v in schema.items() if k not in ("$ref", "description", "title", "$comment")}
        if siblings:
            return _value(schema, root)
        return _node(target, root, depth + 1)
    if "const" in schema:
        return Const(literal(schema["const"]))
    if "enum" in schema:
        return _enum(schema, root)
    kind = schema.get("type")
    if kind is None:
        kind = "object" if "properties" in schema else "array" if "items" in schema else None
    if not isinstance(kind, str) or any(key in schema for key in _RICH):
        return _value(schema, root)
    if kind == "string":
        return Str(int(schema.get("minLength", 0)), int(schema.get("maxLength", DEFAULT_MAX_STRING)))
    if kind in ("integer", "number"):
        return Num(kind == "integer")
    if kind == "boolean":
        return Pick(("true", "false"))
    if kind == "null":
        return Const("null")
    if kind == "object":
        return _object(schema, root, depth)
    if kind == "array":
        return _array(schema, root, depth)
    raise _Unplannable(f"unknown type {kind!r}")


def _value(schema: dict[str, Any], root: dict[str, Any]) -> Value:
    """The sub-schema as the engine receives it, with the root's definitions when it refers to them."""
    text = json.dumps(schema)
    if "$ref" not in text:
        return Value(schema)
    defs: dict[str, Any] = {key: root[key] for key in ("$defs", "definitions") if key in root}
    if '"#"' in text or "#/properties" in text or "#/items" in text:
        raise _Unplannable("a reference into the root schema")
    return Value({**schema, **defs})


def _enum(schema: dict[str, Any], root: dict[str, Any]) -> Node:
    values = schema["enum"]
    if not isinstance(values, list) or not values:
        raise _Unplannable("an empty enum")
    options = tuple(dict.fromkeys(literal(v) for v in values))
    if len(options) == 1:
        return Const(options[0])
    if any(a != b and b.startswith(a) for a in options for b in options):
        return _value(schema, root)  # 1 vs 10: the end of a value is the engine's end-of-sequence choice
    return Pick(options)


def _object(schema: dict[str, Any], root: dict[str, Any], depth: int) -> Node:
    properties = schema.get("properties") or {}
    required = schema.get("required") or []
    if not isinstance(properties, dict) or not isinstance(required, list):
        raise _Unplannable("malformed properties/required")
    if any(name not in properties for name in required):
        return _value(schema, root)  # a required key the schema does not describe
    if not properties:
        extra = schema.get("additionalProperties")
        return Const("{}") if extra is False else _value(schema, root)
    nodes = {name: _node(sub, root, depth + 1) for name, sub in properties.items()}
    ordered = list(properties)
    return Obj(tuple((n, nodes[n]) for n in ordered if n in required),
               tuple((n, nodes[n]) for n in ordered if n not in required))


def _array(schema: dict[str, Any], root: dict[str, Any], depth: int) -> Node:
    items = schema.get("items", {})
    low = int(schema.get("minItems", 0))
    high = int(schema.get("maxItems", DEFAULT_MAX_ITEMS))
    if high < low:
        raise _Unplannable("maxItems is below minItems")
    if high == 0:
        return Const("[]")
    item = _node(items, root, depth + 1)
    if not isinstance(item, (Obj, Str, Pick, Const)):
        return _value(schema, root)  # numbers and nested arrays end where the engine's grammar says
    if isinstance(item, (Str, Pick)):
        # a list of strings or labels: written compact and item by item, SmolLM2 closed such lists at once
        # (``[]``: compress's points), so a compact answer generates it under the engine's grammar (``fallback``);
        # an answer laid out as the model writes JSON (Qwen2.5: ``["a", "b"]``) goes item by item, each item's
        # call free to end the list (under the engine's grammar alone the list could not end with the token the
        # model prefers, ``"],``, and ran to maxItems repeating an item)
        if depth == 0:
            return _value(schema, root)
        return Arr(item, low, high, _value(schema, root))
    return Arr(item, low, high)


def starts(node: Node) -> list[str]:
    """The literal texts an array item can start with (an option of a ``Pick`` is the whole item)."""
    if isinstance(node, Obj):
        return ["{"]
    if isinstance(node, Str):
        return ['"']
    if isinstance(node, Pick):
        return list(node.options)
    if isinstance(node, Const):
        return [node.text]
    raise TypeError(f"no literal start for {node!r}")


def estimate(node: Node) -> tuple[float, float]:
    """(forced characters, free segments) of a typical answer."""
    if isinstance(node, Const):
        return float(len(node.text)), 0.0
    if isinstance(node, Pick):
        return sum(map(len, node.options)) / len(node.options) - 1.0, 1.0
    if isinstance(node, Str):
        return 2.0, 1.0
    if isinstance(node, (Num, Value)):
        return 0.0, 1.0
    if isinstance(node, Obj):
        forced, calls = 2.0, 0.0
        for name, sub in (*node.required, *node.optional):
            f, c = estimate(sub)
            forced, calls = forced + len(literal(name)) + 2 + f, calls + c
        return forced, calls + len(node.optional)
    if node.fallback is not None:
        return 0.0, 1.0  # priced as one value under the engine's grammar (the compact layout's way)
    n = max(node.min_items, min(ASSUMED_ITEMS, node.max_items))
    f, c = estimate(node.item)
    merged = isinstance(node.item, (Str, Pick))  # the item's own call also chooses between "," and "]"
    return 2.0 + n * (f + 1), n * c + (0.0 if merged else n)
