"""Schema preflight: resolve, check, bound. Pure (no I/O).

llama-server's JSON-Schema → grammar converter enforces ``type, properties, required,
additionalProperties, items, prefixItems, minItems, maxItems, enum, const, anyOf, oneOf, allOf,
minLength, maxLength, pattern`` (a regex subset), integer ``minimum/maximum``, some ``format``s and local
``$ref``. Everything else is silently ignored by it, and an unsupported ``pattern`` silently becomes "any
string". tiankong therefore:

* refuses what is not a JSON Schema (not JSON, invalid against its metaschema — which catches most invalid
  regexes) with ``InvalidSchema``, and what cannot be enforced at all (remote ``$ref``, unresolvable ``$ref``,
  ``$dynamicRef``, a regex Python cannot compile) with ``SchemaNotSupported`` naming every JSON pointer;
* lists every keyword the grammar will not enforce (``unenforced``) — those are enforced by validating
  the answer and retrying with the validator's message (or refused up front with ``strict=True``);
* sends the engine a *bounded* copy: unbounded strings get a ``maxLength``, unbounded arrays a
  ``maxItems``, objects with declared properties ``additionalProperties: false``, patterns rewritten into the
  converter's regex subset (``patterns``), combinators into shapes it reads correctly (``combinators``) —
  every answer valid under the bounded copy is valid under the original, and a small model cannot run away
  inside them; ``minimal_schema`` is a smaller copy still for a last try after truncation.
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from ..errors import InvalidSchema, SchemaNotSupported
from .budget import DEFAULT_MAX_ITEMS, DEFAULT_MAX_STRING, estimate_tokens
from .combinators import MISSING as _MISSING
from .combinators import drop_recursive_alternatives, flatten, name_root_refs
from .combinators import resolve_ref as _resolve
from .patterns import FORMAT_PATTERNS, REPEAT_BOUND, engine_pattern, fit_node_pattern
from .regex_safety import (
    AMBIGUOUS_FIX,
    UnsafePattern,
    ambiguous_nesting,
    bounded_validator_class,
    check_pattern,
)

ENFORCED = {
    "type", "properties", "required", "additionalProperties", "items", "prefixItems", "minItems", "maxItems",
    "enum", "const", "anyOf", "oneOf", "allOf", "minLength", "maxLength", "pattern", "format", "$ref",
    "$defs", "definitions",
}
ANNOTATIONS = {
    "$schema", "$id", "$comment", "$anchor", "$vocabulary", "title", "description", "default", "examples",
    "readOnly", "writeOnly", "deprecated", "contentMediaType", "contentEncoding", "discriminator", "nullable",
    "strict", "name",
}
FATAL = {"$dynamicRef", "$recursiveRef", "$dynamicAnchor", "$recursiveAnchor"}
GRAMMAR_FORMATS = {"date", "time", "date-time", "uuid"}
@cache
def checked_formats() -> set[str]:
    """The formats jsonschema can check here (with the format-nongpl extra installed); jsonschema is imported on
    first use: loading its format checkers takes seconds, which a command that checks no schema never pays."""
    import jsonschema

    return set(jsonschema.Draft202012Validator.FORMAT_CHECKER.checkers)
SUBSCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties", "dependentSchemas")
SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
SUBSCHEMA_ONE = ("items", "additionalProperties", "not", "if", "then", "else", "contains", "propertyNames",
                 "unevaluatedProperties", "unevaluatedItems", "additionalItems")

MAX_BUDGET_TOKENS = 1024


@dataclass
class SchemaPlan:
    """A checked schema: what to validate against, what to send the engine, and how many tokens to allow."""

    schema: dict[str, Any]
    engine_schema: dict[str, Any]
    validator: Any
    unenforced: list[str] = field(default_factory=list)
    budget_tokens: int = 256
    #: the smallest answers ``engine_schema`` allows (for a last try after truncation); None: nothing to drop
    minimal_schema: dict[str, Any] | None = None

    def errors(self, instance: Any) -> list[str]:
        """Validation messages with JSON pointers, best first (empty when valid)."""
        found = sorted(self.validator.iter_errors(instance), key=lambda e: (len(e.path), str(e.message)))
        return [f"{_pointer(list(e.absolute_path)) or '/'}: {e.message}" for e in found[:5]]


def _pointer(parts: list[Any]) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def load_schema(schema: Any) -> dict[str, Any]:
    """Accept a dict, a JSON string, or a bool schema; return a dict (``InvalidSchema`` otherwise)."""
    if isinstance(schema, (str, bytes)):
        try:
            schema = json.loads(schema)
        except ValueError as exc:
            raise InvalidSchema(f"the schema is not valid JSON: {exc}", hint="pass a JSON Schema object") from None
    if schema is True:
        schema = {}
    if not isinstance(schema, dict):
        raise InvalidSchema(f"a JSON Schema must be an object, not {type(schema).__name__}",
                            hint='for example {"type": "object", "properties": {...}}')
    import jsonschema
    from jsonschema.validators import validator_for

    cls = validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = _pointer(list(exc.absolute_path)) or "/"
        raise InvalidSchema(f"not a valid JSON Schema at {where}: {exc.message}",
                            hint="check it against the JSON Schema specification (draft 2020-12 by default)") from None
    return schema


def preflight(schema: Any, *, strict: bool = False, max_string: int = DEFAULT_MAX_STRING,
              max_items: int = DEFAULT_MAX_ITEMS) -> SchemaPlan:
    """Check and bound a schema. ``strict`` refuses keywords the grammar cannot enforce."""
    schema = load_schema(schema)
    fatal: list[str] = []
    unenforced: list[str] = []
    _walk(schema, "", schema, fatal, unenforced)
    if fatal:
        raise SchemaNotSupported("the schema cannot be enforced", fatal,
                                 hint="inline remote $refs, fix the references and regexes")
    if strict and unenforced:
        raise SchemaNotSupported("the grammar cannot enforce these keywords", unenforced,
                                 hint="drop strict to enforce them by validation and retry, or remove them")
    import jsonschema
    from jsonschema.validators import validator_for

    base = validator_for(schema, default=jsonschema.Draft202012Validator)
    validator = bounded_validator_class(base)(schema, format_checker=base.FORMAT_CHECKER)
    engine_schema = bound_schema(schema, max_string=max_string, max_items=max_items)
    budget = min(MAX_BUDGET_TOKENS, max(32, math.ceil(estimate_tokens(engine_schema, engine_schema) * 1.25) + 16))
    return SchemaPlan(schema, engine_schema, validator, unenforced, budget, minimal_schema(schema, engine_schema))


def _walk(node: Any, ptr: str, root: dict[str, Any], fatal: list[str], unenforced: list[str]) -> None:
    if not isinstance(node, dict):
        return
    for key, value in node.items():
        here = f"{ptr}/{key}"
        if key == "patternProperties" and isinstance(value, dict):
            fatal += [f"{here}/{name} (nested repetition with a lookaround or backreference)" for name in value
                      if isinstance(name, str) and not _safe(name)]
        if key in FATAL:
            fatal.append(f"{here} ({key})")
        elif key == "$ref":
            _check_ref(value, here, root, fatal)
        elif key == "pattern" and isinstance(value, str):
            _check_pattern(value, here, fatal, unenforced)
        elif key in ("minLength", "maxLength") and "pattern" in node:
            if engine_pattern(str(node["pattern"])) is not None and (key == "minLength" or not fit_node_pattern(node)):
                unenforced.append(f"{here} ({key} next to a pattern)")
        elif key == "format" and value not in GRAMMAR_FORMATS:
            if value in checked_formats() and (value not in FORMAT_PATTERNS or "pattern" in node):
                unenforced.append(f"{here} (format {value})")
            # a format with a pattern spelling is enforced by the grammar (see _bound); an unknown format is
            # an annotation (JSON Schema 2020-12): nothing checks it
        elif key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            if node.get("type") != "integer":
                unenforced.append(f"{here} ({key} on a non-integer)")
        elif key == "patternProperties" and narrowable_pattern_properties(node):
            continue  # enforced through additionalProperties in the engine's copy (see _bound)
        elif _unenforced_keyword(key):
            unenforced.append(f"{here} ({key})")
    for where, sub in _subschemas(node):
        _walk(sub, f"{ptr}/{where}", root, fatal, unenforced)


def _subschemas(node: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """(pointer below ``node``, value) of every place a subschema may stand; callers skip non-schemas."""
    for key in SUBSCHEMA_MAPS:
        yield from _entries(node, key)
    for key in (*SUBSCHEMA_LISTS, *SUBSCHEMA_ONE):
        value = node.get(key)
        if isinstance(value, list):  # including draft 4–7 tuple ``items``
            yield from ((f"{key}/{index}", sub) for index, sub in enumerate(value))
        elif key in SUBSCHEMA_ONE:
            yield key, value
    yield from _entries(node, "dependencies")  # draft 4–7: a schema or a list of names per property


def _entries(node: dict[str, Any], key: str) -> Iterator[tuple[str, Any]]:
    value = node.get(key)
    return ((f"{key}/{name}", sub) for name, sub in value.items()) if isinstance(value, dict) else iter(())


#: Validation keywords (JSON Schema drafts 4–2020-12) that the engine's grammar does not enforce.
UNENFORCED_KEYWORDS = {
    "not", "if", "then", "else", "patternProperties", "dependentRequired", "dependentSchemas", "dependencies",
    "uniqueItems", "multipleOf", "contains", "minContains", "maxContains", "minProperties", "maxProperties",
    "propertyNames", "unevaluatedProperties", "unevaluatedItems", "additionalItems",
}


def _unenforced_keyword(key: str) -> bool:
    """Unknown keywords are annotations for validators too; only real validation keywords count."""
    return key in UNENFORCED_KEYWORDS


def _check_ref(ref: Any, here: str, root: dict[str, Any], fatal: list[str]) -> None:
    if not isinstance(ref, str) or not ref.startswith("#"):
        fatal.append(f"{here} (remote $ref {ref})")
        return
    if _resolve(root, ref) is _MISSING:
        fatal.append(f"{here} (unresolvable $ref {ref})")


def _safe(pattern: str) -> bool:
    try:
        check_pattern(pattern)
    except (UnsafePattern, re.error):
        return False
    return True


def _check_pattern(pattern: str, here: str, fatal: list[str], unenforced: list[str]) -> None:
    try:
        re.compile(pattern)
    except re.error as exc:
        fatal.append(f"{here} (invalid regex: {exc})")
        return
    try:
        check_pattern(pattern)
    except UnsafePattern:
        fatal.append(f"{here} (nested repetition with a lookaround or backreference: cannot be checked in bounded "
                     "time)")
        return
    if ambiguous_nesting(pattern):  # the grammar cannot take it and no model satisfies it: regex_safety
        fatal.append(f"{here} (a repetition nested directly in another: {AMBIGUOUS_FIX})")
        return
    if engine_pattern(pattern) is None:
        unenforced.append(f"{here} (regex features the grammar does not support)")


def bound_schema(schema: dict[str, Any], *, max_string: int, max_items: int,
                 repeat: int = REPEAT_BOUND) -> dict[str, Any]:
    """A copy with every string and array bounded and declared objects closed."""
    bounded = copy.deepcopy(schema)
    name_root_refs(bounded)
    _bound(bounded, bounded, (max_string, max_items, repeat))
    return bounded


def _bound(node: Any, root: dict[str, Any], limits: tuple[int, int, int]) -> None:
    """``limits``: (string length, array items, regex repetitions)."""
    if isinstance(node, list):
        for item in node:
            _bound(item, root, limits)
        return
    if not isinstance(node, dict):
        return
    _prune_alternatives(node)
    flatten(node, root)
    max_string, max_items, repeat = limits
    types = node.get("type")
    types = set(types) if isinstance(types, list) else {types}
    free = not any(k in node for k in ("enum", "const", "$ref"))
    if node.get("format") in FORMAT_PATTERNS and "pattern" not in node:
        node["pattern"] = FORMAT_PATTERNS[node["format"]]  # the converter ignores these formats
    if isinstance(node.get("pattern"), str):
        rewritten = fit_node_pattern(node, repeat) or engine_pattern(node["pattern"], bound=repeat)
        if rewritten is None:
            del node["pattern"]  # left to validation; the string is bounded by length instead
        else:
            node["pattern"] = rewritten
    if "string" in types and free and "maxLength" not in node and "format" not in node:
        node["maxLength"] = max(max_string, int(node.get("minLength", 0)))
    if "array" in types and free and "maxItems" not in node:
        node["maxItems"] = max(max_items, int(node.get("minItems", 0)))
    _narrow_pattern_properties(node)
    forbidden = _drop_forbidden(node)
    if isinstance(node.get("properties"), dict) and (node["properties"] or forbidden) \
            and "additionalProperties" not in node and "patternProperties" not in node:
        node["additionalProperties"] = False
    for key, value in node.items():
        if key in SUBSCHEMA_MAPS and isinstance(value, dict):
            for sub in value.values():
                _bound(sub, root, limits)
        elif key in SUBSCHEMA_LISTS or key in SUBSCHEMA_ONE:
            _bound(value, root, limits)


def _prune_alternatives(node: dict[str, Any]) -> None:
    """Alternatives whose own keywords the grammar cannot enforce (``propertyNames``, ``not``, …) are left out
    of the copy when others remain: the model then writes one the grammar holds to (still never wider)."""
    for key in ("anyOf", "oneOf"):
        branches = node.get(key)
        if isinstance(branches, list) and len(branches) > 1:
            clean = [b for b in branches if not (isinstance(b, dict) and UNENFORCED_KEYWORDS & set(b))]
            if clean and len(clean) < len(branches):
                node[key] = clean


def narrowable_pattern_properties(node: dict[str, Any]) -> bool:
    """``patternProperties`` the copy can enforce: valid regexes, no declared property name matching one, and
    undeclared names not forbidden (the grammar cannot choose key names by pattern)."""
    patterns, props = node.get("patternProperties"), node.get("properties") or {}
    if not isinstance(patterns, dict) or not patterns or node.get("additionalProperties", True) is False \
            or not isinstance(props, dict):
        return False
    try:
        compiled = [re.compile(pattern) for pattern in patterns]
    except re.error:
        return False
    return not any(regex.search(name) for regex in compiled for name in props)


def _narrow_pattern_properties(node: dict[str, Any]) -> None:
    """The converter ignores ``patternProperties``; the copy asks every undeclared property to satisfy every
    pattern's schema (and ``additionalProperties``, when it is a schema). Never wider: a name that matches a
    pattern satisfies that pattern's schema, a name that matches none satisfies ``additionalProperties``."""
    if not narrowable_pattern_properties(node):
        return
    parts = [*node.pop("patternProperties").values(), node.get("additionalProperties", True)]
    parts = [part for part in parts if part is not True and part != {}]
    if any(part is False for part in parts):
        node["additionalProperties"] = False  # names matching that pattern are forbidden: write none
    else:
        node["additionalProperties"] = parts[0] if len(parts) == 1 else {"allOf": parts} if parts else True


def _drop_forbidden(node: dict[str, Any]) -> bool:
    """Optional properties whose schema nothing satisfies (``false``, ``{"not": {}}``) must be absent: the
    grammar would write them anyway (it ignores ``not``), so the copy leaves them out. True when any was."""
    props, required = node.get("properties"), node.get("required")
    if not isinstance(props, dict):
        return False
    needed = set(required) if isinstance(required, list) else set()
    forbidden = [name for name, sub in props.items() if name not in needed and _never_valid(sub)]
    for name in forbidden:
        del props[name]
    return bool(forbidden)


def _never_valid(sub: Any) -> bool:
    return sub is False or (isinstance(sub, dict) and sub.get("not") in ({}, True))


MINIMAL_STRING = 32
MINIMAL_REPEAT = 8


def minimal_schema(schema: dict[str, Any], engine_schema: dict[str, Any]) -> dict[str, Any] | None:
    """A bounded copy that allows only small answers: required properties, the fewest items (at least one),
    strings of at most ``MINIMAL_STRING`` characters, regex repetitions of at most ``MINIMAL_REPEAT``. Still
    never wider than the original. None when it is no smaller than ``engine_schema``."""
    small = bound_schema(schema, max_string=MINIMAL_STRING, max_items=1, repeat=MINIMAL_REPEAT)
    _shrink(small, small)
    return None if small == engine_schema else small


def _shrink(node: Any, root: dict[str, Any]) -> None:
    if isinstance(node, list):
        for item in node:
            _shrink(item, root)
        return
    if not isinstance(node, dict):
        return
    props, required = node.get("properties"), node.get("required")
    drop_recursive_alternatives(node, root)
    _close_open_map(node)
    if isinstance(props, dict) and node.get("additionalProperties") is False:
        keep = set(required) if isinstance(required, list) else set()
        node["properties"] = {name: sub for name, sub in props.items() if name in keep}
    if isinstance(node.get("maxItems"), int):
        node["maxItems"] = min(node["maxItems"], max(1, int(node.get("minItems", 0))))
    if isinstance(node.get("maxLength"), int) and "pattern" not in node:
        node["maxLength"] = min(node["maxLength"], max(MINIMAL_STRING, int(node.get("minLength", 0))))
    for key, value in node.items():
        if key in SUBSCHEMA_MAPS and isinstance(value, dict):
            for sub in value.values():
                _shrink(sub, root)
        elif key in SUBSCHEMA_LISTS or key in SUBSCHEMA_ONE:
            _shrink(value, root)


def _close_open_map(node: dict[str, Any]) -> None:
    """The minimal copy writes no undeclared properties (unless some are needed: minProperties, or a required
    name without a declared schema)."""
    extra, props = node.get("additionalProperties"), node.get("properties") or {}
    kind = node.get("type")
    types: list[Any] = kind if isinstance(kind, list) else [kind]
    if extra is False or "object" not in types or "minProperties" in node \
            or not isinstance(props, dict):
        return
    required = node.get("required")
    if all(name in props for name in (required if isinstance(required, list) else [])):
        node["additionalProperties"] = False
