"""The flow of ``extract``: text in, an object valid against a JSON Schema (or a Pydantic model) out.

Shared by ``Client.extract``/``AsyncClient.extract`` and the task registry's ``extract`` spec; it lives here, below
both, so the registry does not import the client (``api``) that imports the registry.
"""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError
from .constraints import delimited_constraint, schema_constraint
from .flow import Flow, Structured, constrained_flow
from .prompts import EXTRACT_LEAN, delimited_instruction, extract_messages, extract_prompt, language
from .slots import SlotLeases, SlotPin


def extract_flow(client_model: str | None, text: str, schema: Any, instructions: str | None, strict: bool,
                  max_tokens: int | None, max_attempts: int, grammar_support: bool = True,
                  fast_forward: bool = True, leases: SlotLeases | None = None) -> Flow[Structured[Any]]:
    if not isinstance(text, str):
        raise ConfigError(f"text must be a string, got {type(text).__name__}", hint="pass the text to extract from",
                          param="text")
    if not text.strip():
        raise ConfigError("text is empty", hint="pass the text to extract from")
    lean = None
    if grammar_support:
        constraint, plan = schema_constraint(schema, strict=strict)
        messages, form = extract_prompt(text, plan.schema, instructions)
        lean = [{"role": "system", "content": EXTRACT_LEAN[language(text)] + (f"\n{instructions}" if instructions
                                                                             else "")}, messages[-1]]
    else:  # the three-layer insurance for backends that ignore grammars: example, delimiters, validation
        constraint, plan = delimited_constraint(schema, strict=strict)
        messages, form = extract_messages(text, plan.schema, instructions), "schema"
        messages[0]["content"] += "\n" + delimited_instruction(plan.schema, text)
    return _noting(constrained_flow(messages, constraint, model=client_model, max_tokens=max_tokens,
                                    max_attempts=max_attempts, fast_forward=fast_forward,
                                    pin=SlotPin(leases) if leases is not None else None, lean=lean), form)


def _noting(flow: Flow[Structured[Any]], form: str) -> Flow[Structured[Any]]:
    """The flow's result, noting how the schema appeared in the prompt (``prompts.schema_prompt``)."""
    result = yield from flow
    result.schema_in_prompt = result.schema_in_prompt or form  # "none": the lean messages were sent
    return result
