"""Build a ``Constraint`` for each mode: JSON Schema, Pydantic model, regex, GBNF grammar."""

from __future__ import annotations

import json
import re
from typing import Any

from ..errors import InvalidSchema, SchemaNotSupported
from .budget import DEFAULT_MAX_STRING
from .flow import Constraint, json_decode
from .forced import plan_forced
from .patterns import engine_pattern
from .regex_safety import full_matcher
from .schema import SchemaPlan, preflight


def is_pydantic_model(schema: Any) -> bool:
    return isinstance(schema, type) and hasattr(schema, "model_json_schema") and hasattr(schema, "model_validate")


def schema_constraint(schema: Any, *, strict: bool = False, max_string: int | None = None,
                      max_items: int | None = None) -> tuple[Constraint, SchemaPlan]:
    """JSON Schema (dict or JSON text) or a Pydantic model class."""
    model = schema if is_pydantic_model(schema) else None
    raw = model.model_json_schema() if model is not None else schema
    kwargs = {k: v for k, v in (("max_string", max_string), ("max_items", max_items)) if v is not None}
    plan = preflight(raw, strict=strict, **kwargs)

    def check(data: Any) -> list[str]:
        errors = plan.errors(data)
        if errors or model is None:
            return errors
        try:
            model.model_validate(data)
        except ValueError as exc:  # pydantic.ValidationError is a ValueError
            return [" ".join(str(exc).split())[:300]]
        return []

    constraint = Constraint(
        engine_fields=_schema_fields(plan.engine_schema), decode=json_decode, check=check,
        budget_tokens=plan.budget_tokens, unenforced=plan.unenforced,
        minimal_fields=_schema_fields(plan.minimal_schema) if plan.minimal_schema is not None else None,
        forced=plan_forced(plan.engine_schema),
    )
    simpler = simplify_schema(plan.engine_schema)
    if simpler != plan.engine_schema:
        constraint.simplified_fields = _schema_fields(simpler)
    return constraint, plan


#: keywords left out of the engine's copy when llama.cpp's converter cannot compile a schema (``failed to parse
#: grammar``): string shapes and key patterns, the usual culprits; validation still checks them
SIMPLIFIED_AWAY = frozenset({"pattern", "format", "patternProperties", "propertyNames", "contentEncoding",
                             "contentMediaType"})
_NAME_MAPS = frozenset({"properties", "$defs", "definitions", "dependentSchemas"})


def simplify_schema(node: Any, names: bool = False) -> Any:
    """A copy of ``node`` without :data:`SIMPLIFIED_AWAY` (``names``: ``node`` maps names to sub-schemas)."""
    if isinstance(node, list):
        return [simplify_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    if names:
        return {key: simplify_schema(value) for key, value in node.items()}
    return {key: simplify_schema(value, key in _NAME_MAPS) for key, value in node.items()
            if key not in SIMPLIFIED_AWAY}


def _schema_fields(schema: dict[str, Any]) -> dict[str, Any]:
    return {"response_format": {"type": "json_schema", "json_schema": {"schema": schema}}}


def delimited_constraint(schema: Any, *, strict: bool = False) -> tuple[Constraint, SchemaPlan]:
    """For backends without grammar support: a filled-in example and <json>…</json> delimiters in the
    prompt (see ``prompts.delimited_instruction``), then parse + validate + retry like every other mode."""
    constraint, plan = schema_constraint(schema, strict=strict)
    constraint.engine_fields = {"stop": ["</json>"]}
    constraint.minimal_fields = None
    constraint.forced = None  # no grammar: nothing can be forced
    constraint.decode = decode_delimited
    constraint.budget_tokens = min(2048, constraint.budget_tokens * 2)
    return constraint, plan


def decode_delimited(text: str) -> Any:
    """The JSON between <json> and </json>; else the outermost {...} or [...] block; else the whole text."""
    match = re.search(r"<json>\s*(.*?)\s*(?:</json>|$)", text, re.S)
    if match:
        return json.loads(match.group(1))
    fenced = re.search(r"```(?:json)?\s*(.*?)```", text, re.S)
    if fenced:
        return json.loads(fenced.group(1))
    starts = [i for i in (text.find("{"), text.find("[")) if i >= 0]
    if starts:
        start = min(starts)
        end = max(text.rfind("}"), text.rfind("]"))
        if end > start:
            return json.loads(text[start:end + 1])
    return json.loads(text)


def regex_constraint(pattern: str, *, max_tokens: int = 256) -> Constraint:
    """Text that fully matches ``pattern``: generated as a JSON string with that pattern, then decoded."""
    try:
        re.compile(pattern)
    except re.error as exc:
        raise InvalidSchema(f"invalid regex {pattern!r}: {exc}", hint="fix the regular expression") from None
    matches = full_matcher(pattern)  # bounded time, or refused now (regex_safety)
    rewritten = engine_pattern(pattern, bound=max(64, max_tokens))  # None: features the grammar lacks
    schema: dict[str, Any] = {"type": "string", "pattern": rewritten} if rewritten is not None \
        else {"type": "string", "maxLength": max(DEFAULT_MAX_STRING, max_tokens)}

    def decode(text: str) -> Any:
        value = json.loads(text)
        if not isinstance(value, str):
            raise ValueError("expected a JSON string")
        return value

    def check(value: Any) -> list[str]:
        return [] if matches(value) else [f"{value!r} does not match {pattern!r}"]

    return Constraint({"response_format": {"type": "json_schema", "json_schema": {"schema": schema}}},
                      decode, check, max_tokens)


def grammar_constraint(grammar: str, *, max_tokens: int = 512) -> Constraint:
    """GBNF text, enforced by the engine; refused up front when obviously empty."""
    if not isinstance(grammar, str) or "::=" not in grammar or not re.search(r"^\s*root\s*::=\s*\S", grammar, re.M):
        raise SchemaNotSupported("the grammar has no non-empty 'root ::= …' rule",
                                 hint="write GBNF with a root rule, e.g. root ::= \"yes\" | \"no\"")
    return Constraint({"grammar": grammar}, lambda text: text, lambda _: [], max_tokens)
