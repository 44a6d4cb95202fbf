"""Structured output that never fails silently: JSON Schema, Pydantic, regex, GBNF, choices."""

from .constraints import (
    decode_delimited,
    delimited_constraint,
    grammar_constraint,
    is_pydantic_model,
    regex_constraint,
    schema_constraint,
)
from .drivers import run_async, run_sync
from .flow import Call, Constraint, Decision, Structured, choose_flow, constrained_flow, decide
from .prompts import extract_messages, language
from .schema import SchemaPlan, preflight

__all__ = [
    "Call", "Constraint", "Decision", "SchemaPlan", "Structured", "choose_flow", "constrained_flow", "decide",
    "decode_delimited", "delimited_constraint",
    "extract_messages", "grammar_constraint", "is_pydantic_model", "language", "preflight", "regex_constraint",
    "run_async", "run_sync", "schema_constraint",
]
