"""``tiankong.Client`` and ``tiankong.AsyncClient``: transport + structured output, same method names.

Both are thin: they prepare a flow with the shared helpers below and run it with their driver.
"""

from __future__ import annotations

from typing import Any, TypeVar, overload

from .client import AsyncBaseClient, BaseClient
from .client._shared import DEFAULT_SEED, as_messages
from .client.cleaning import AsyncCleaningMethods, CleaningMethods
from .errors import ConfigError
from .structured import (
    Constraint,
    Decision,
    Structured,
    choose_flow,
    constrained_flow,
    decide,
    grammar_constraint,
    is_pydantic_model,
    regex_constraint,
    run_async,
    run_sync,
    schema_constraint,
)
from .structured.extract_flow import _noting
from .structured.extract_flow import extract_flow as _extract_flow
from .structured.flow import Flow
from .structured.prompts import (
    GENERATE_JSON,
    GENERATE_JSON_OBJECT,
    choose_indexed_messages,
    choose_messages,
    language,
    schema_prompt,
)
from .structured.slots import SlotLeases, SlotPin
from .tasks.classify import require_text
from .tasks.methods import AsyncTaskMethods, TaskMethods

M = TypeVar("M")


def _finish_extract(result: Structured[Any], schema: Any) -> Any:
    return schema.model_validate(result.data) if is_pydantic_model(schema) else result.data


def _generate_flow(client_model: str | None, prompt: str | list[dict[str, Any]], schema: Any, grammar: str | None,
                   regex: str | None, system: str | None, max_tokens: int | None, max_attempts: int,
                   strict: bool, sampling: dict[str, Any] | None = None,
                   fast_forward: bool = True, leases: SlotLeases | None = None) -> Flow[Structured[Any]]:
    modes = [name for name, value in (("schema", schema), ("grammar", grammar), ("regex", regex)) if value is not None]
    if len(modes) != 1:
        raise ConfigError("generate needs exactly one of schema=, grammar=, regex=",
                          hint="use chat() for unconstrained text")
    messages = as_messages(prompt, system)
    constraint: Constraint
    if schema is not None:
        constraint, plan = schema_constraint(schema, strict=strict)
        lang = language(str(messages[-1].get("content", "")))
        line, form = schema_prompt(plan.schema, lang)
        lean = list(messages)  # the caller's own messages: what tiankong adds is the system line
        if plan.schema == {"type": "object"}:  # json_object: nothing to show but "an object" (the model copied it)
            instruction, form = GENERATE_JSON_OBJECT[lang], "object"
        else:
            instruction = GENERATE_JSON[lang].format(schema=line)
        messages = [{"role": "system", "content": instruction}, *messages]
        return _noting(constrained_flow(messages, constraint, model=client_model, max_tokens=max_tokens,
                                        max_attempts=max_attempts, options=sampling, fast_forward=fast_forward,
                                        pin=SlotPin(leases) if leases is not None else None, lean=lean), form)
    constraint = grammar_constraint(grammar) if grammar is not None else regex_constraint(str(regex))
    return constrained_flow(messages, constraint, model=client_model, max_tokens=max_tokens,
                            max_attempts=max_attempts, options=sampling, fast_forward=fast_forward)


def _choose_flow(text: str, choices: list[str], instructions: str | None,
                 descriptions: dict[str, str] | None, threshold: float | None = None) -> Flow[dict[str, float]]:
    require_text(text)
    if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, (int, float))
                                  or not 0.0 <= threshold <= 1.0):
        raise ConfigError(f"threshold must be a probability from 0 to 1, not {threshold!r}",
                          hint="labels scoring at least it are listed in Decision.labels; leave it out for the top one")
    labels = [str(c) for c in choices] if isinstance(choices, (list, tuple)) else []
    if len(labels) < 2 or len({x.strip() for x in labels}) != len(labels) or not all(x.strip() for x in labels):
        raise ConfigError("choices must be at least two distinct, non-empty labels", hint='e.g. ["spam", "ham"]')
    indexed = choose_indexed_messages(text, labels, instructions, descriptions)
    return choose_flow(choose_messages(text, labels, instructions, descriptions), labels, indexed)


class _SlotLeasing:
    @property
    def slot_leases(self) -> SlotLeases:
        """The engine slots this client's fast-forwarded answers hold, one each (``slots.SlotLeases``)."""
        leases = self.__dict__.get("_slot_leases")
        if leases is None:
            leases = self.__dict__["_slot_leases"] = SlotLeases()
        return leases


class Client(_SlotLeasing, CleaningMethods, TaskMethods, BaseClient):
    """Synchronous client: chat/stream/complete/embed/tokenize, extract/generate/choose, and the tasks
    (classify, route, rewrite, rerank, redact, guard, compress, summarize, tag).

    Set ``grammar_support = False`` for an OpenAI-compatible upstream that ignores grammars (a cloud model):
    ``extract`` then puts a filled-in example and ``<json>`` delimiters in the prompt and still validates.
    ``fast_forward = False`` decodes every answer whole (for a server without llama.cpp's ``/completion``).
    """

    grammar_support: bool = True
    #: fast-forward the text a JSON Schema forces (``structured/fastforward.py``); False: decode whole answers
    fast_forward: bool = True

    @overload
    def extract(self, text: str, schema: type[M], *, instructions: str | None = ..., strict: bool = ...,
                max_tokens: int | None = ..., max_attempts: int = ...) -> M: ...
    @overload
    def extract(self, text: str, schema: dict[str, Any] | str, *, instructions: str | None = ...,
                strict: bool = ..., max_tokens: int | None = ..., max_attempts: int = ...) -> Any: ...

    def extract(self, text: str, schema: Any, *, instructions: str | None = None, strict: bool = False,
                max_tokens: int | None = None, max_attempts: int = 2) -> Any:
        """Fields from ``text`` as a validated dict (JSON Schema) or model instance (Pydantic)."""
        return _finish_extract(self.extract_result(text, schema, instructions=instructions, strict=strict,
                                                   max_tokens=max_tokens, max_attempts=max_attempts), schema)

    def extract_result(self, text: str, schema: Any, *, instructions: str | None = None, strict: bool = False,
                       max_tokens: int | None = None, max_attempts: int = 2) -> Structured[Any]:
        """Like ``extract`` with the evidence: raw text, attempts, usage, keywords enforced by validation."""
        remote = self._gateway_extract(text, schema, instructions, strict=strict, max_tokens=max_tokens,
                                       max_attempts=max_attempts)  # a tiankong gateway: one /v1/tasks/extract call
        if remote is not None:
            return remote
        flow = _extract_flow(self.model, text, schema, instructions, strict, max_tokens, max_attempts,
                             self.grammar_support, self.fast_forward, self.slot_leases)
        return run_sync(flow, self._request)

    def generate(self, prompt: str | list[dict[str, Any]], *, schema: Any = None, grammar: str | None = None,
                 regex: str | None = None, system: str | None = None, max_tokens: int | None = None,
                 max_attempts: int = 2, strict: bool = False, temperature: float = 0.0,
                 seed: int | None = DEFAULT_SEED) -> Structured[Any]:
        """Constrained generation by JSON Schema/Pydantic, GBNF grammar or regex; validated."""
        flow = _generate_flow(self.model, prompt, schema, grammar, regex, system, max_tokens, max_attempts, strict,
                              {"temperature": temperature, "seed": seed}, self.fast_forward, self.slot_leases)
        return run_sync(flow, self._request)

    def choose(self, text: str, choices: list[str], *, instructions: str | None = None,
               descriptions: dict[str, str] | None = None, threshold: float | None = None) -> Decision:
        """One label, with the probability of every label (token log-probabilities) and the margin."""
        scores = run_sync(_choose_flow(text, choices, instructions, descriptions, threshold), self._request)
        return decide(scores, threshold)


class AsyncClient(_SlotLeasing, AsyncCleaningMethods, AsyncTaskMethods, AsyncBaseClient):
    """Asynchronous twin of ``Client`` (same method names and parameters)."""

    grammar_support: bool = True
    #: fast-forward the text a JSON Schema forces (``structured/fastforward.py``); False: decode whole answers
    fast_forward: bool = True

    async def extract(self, text: str, schema: Any, *, instructions: str | None = None, strict: bool = False,
                      max_tokens: int | None = None, max_attempts: int = 2) -> Any:
        return _finish_extract(await self.extract_result(text, schema, instructions=instructions, strict=strict,
                                                         max_tokens=max_tokens, max_attempts=max_attempts), schema)

    async def extract_result(self, text: str, schema: Any, *, instructions: str | None = None, strict: bool = False,
                             max_tokens: int | None = None, max_attempts: int = 2) -> Structured[Any]:
        remote = await self._gateway_extract(text, schema, instructions, strict=strict, max_tokens=max_tokens,
                                             max_attempts=max_attempts)
        if remote is not None:
            return remote
        flow = _extract_flow(self.model, text, schema, instructions, strict, max_tokens, max_attempts,
                             self.grammar_support, self.fast_forward, self.slot_leases)
        return await run_async(flow, self._request)

    async def generate(self, prompt: str | list[dict[str, Any]], *, schema: Any = None, grammar: str | None = None,
                       regex: str | None = None, system: str | None = None, max_tokens: int | None = None,
                       max_attempts: int = 2, strict: bool = False, temperature: float = 0.0,
                       seed: int | None = DEFAULT_SEED) -> Structured[Any]:
        flow = _generate_flow(self.model, prompt, schema, grammar, regex, system, max_tokens, max_attempts, strict,
                              {"temperature": temperature, "seed": seed}, self.fast_forward, self.slot_leases)
        return await run_async(flow, self._request)

    async def choose(self, text: str, choices: list[str], *, instructions: str | None = None,
                     descriptions: dict[str, str] | None = None, threshold: float | None = None) -> Decision:
        scores = await run_async(_choose_flow(text, choices, instructions, descriptions, threshold), self._request)
        return decide(scores, threshold)
