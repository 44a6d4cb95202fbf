"""Sans-I/O flows for constrained generation, shared by ``Client`` and ``AsyncClient``.

A flow is a generator that yields a batch of HTTP calls and receives their JSON answers (or the
``TransportError`` each raised); its return value is the result. The sync client runs a batch one call
after another, the async client concurrently — the logic (retries, validation, scoring) is written once.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ..client._shared import ChatResult, Usage, chat_body, generation_options, parse_chat, token_budget_problem
from ..errors import (
    ConfigError,
    InputTooLong,
    RetriesExhausted,
    SchemaNotSupported,
    ServerError,
    TransportError,
    TruncatedOutput,
)
from .calls import Call as Call  # re-exported: every flow module names them from here
from .calls import Flow as Flow
from .prompts import repair_message

if TYPE_CHECKING:
    from .slots import SlotPin

T = TypeVar("T")
MAX_TOKENS_CAP = 2048


class UnscorableLabels(ConfigError):
    """The labels tokenize into byte pieces whose probabilities the engine does not report (an input problem:
    other labels work)."""


@dataclass
class Structured(Generic[T]):
    """A validated answer with its evidence."""

    data: T
    raw: str
    attempts: int
    usage: Usage
    unenforced: list[str] = field(default_factory=list)
    finish_reason: str | None = None
    #: the answer came from the last try after truncation, which allowed only required properties
    minimal: bool = False
    #: "fast_forward" (forced text prefilled, free values decoded) or "grammar" (the whole answer decoded)
    path: str = "grammar"
    #: tokens the engine decoded, and forced tokens it read as prompt instead (fast-forward)
    decoded_tokens: int = 0
    forced_tokens: int = 0
    #: why fast-forward did not give the answer ("" when it did, or when it was not tried)
    fallback_reason: str = ""
    #: how the schema appeared in the prompt: "schema", "example" (too long: its shape), "keys"; "": not shown
    schema_in_prompt: str = ""
    #: the engine could not compile the schema: a simplified copy constrained the answer, validation the rest
    simplified: bool = False

    def evidence(self) -> dict[str, Any]:
        """The path taken, for the ``tiankong`` extension of an answer."""
        found: dict[str, Any] = {"path": self.path, "decoded_tokens": self.decoded_tokens,
                                 "fast_forwarded_tokens": self.forced_tokens}
        if self.fallback_reason:
            found["fallback_reason"] = self.fallback_reason
        if self.schema_in_prompt:
            found["schema_in_prompt"] = self.schema_in_prompt
        if self.simplified:
            found["simplified"] = True
        return found


@dataclass
class Constraint:
    """How to constrain, decode and check one answer."""

    engine_fields: dict[str, Any]
    decode: Callable[[str], Any]
    check: Callable[[Any], list[str]]
    budget_tokens: int
    unenforced: list[str] = field(default_factory=list)
    #: engine fields for a last try after a truncation (smaller answers only); None: no such try
    minimal_fields: dict[str, Any] | None = None
    #: the schema's forced-segment plan (``forced.ForcedPlan``); None: not a JSON Schema constraint
    forced: Any = None
    #: engine fields of a simplified copy, tried when the engine cannot compile ``engine_fields``; None: none
    simplified_fields: dict[str, Any] | None = None


def _compile_failure(error: Exception) -> SchemaNotSupported | None:
    if isinstance(error, ServerError) and error.status == 400:
        text = str(error).lower()
        if any(word in text for word in ("grammar", "schema", "parser", "pattern", "$ref")):
            return SchemaNotSupported(f"the engine could not compile the constraint: {error.message}",
                                      hint="simplify the schema/grammar; nothing unconstrained was returned")
    return None


def check_attempts(max_tokens: int | None, max_attempts: int) -> None:
    """A structured call's budget and attempts: ``max_tokens=0`` was taken as "the default" and ``max_attempts=0``
    as one attempt; both are the caller's mistake, said before anything runs."""
    if problem := token_budget_problem({"max_tokens": max_tokens}):  # the rule the gateway and the client apply
        raise ConfigError(problem[1], param=problem[0])
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
        raise ConfigError(f"max_attempts must be 1 or more, got {max_attempts!r}", param="max_attempts")


def constrained_flow(
    messages: list[dict[str, Any]], constraint: Constraint, *, model: str | None, max_tokens: int | None = None,
    max_attempts: int = 2, options: dict[str, Any] | None = None, fast_forward: bool = True,
    pin: SlotPin | None = None, lean: list[dict[str, Any]] | None = None, grow: bool | None = None,
) -> Flow[Structured[Any]]:
    """Fast-forward when the schema's plan pays (``fastforward.py``); else, or when that answer is not valid:
    generate → decode → validate; retry once with the validator's message; retry a truncation once with a
    larger budget (unless the caller set ``max_tokens``, which then bounds every attempt; ``grow`` overrides),
    then once more with the schema's smallest answers (required properties, fewest items).
    ``lean``: the messages without what tiankong added (the schema line), sent when the engine says the prompt
    does not fit its context — the grammar enforces the schema all the same."""
    check_attempts(max_tokens, max_attempts)
    budget = max_tokens or constraint.budget_tokens
    usage, attempts, reason = Usage(), 0, ""
    if fast_forward and constraint.forced is not None:
        quick = yield from _fast_forward(messages, constraint, budget, options or {}, pin)
        if isinstance(quick, Structured):
            return quick
        usage, attempts, reason = quick
    result = yield from _grammar_flow(messages, constraint, model, budget, max_attempts, options, attempts, usage,
                                      lean, grow=max_tokens is None if grow is None else grow)
    result.fallback_reason = reason
    return result


def _fast_forward(messages: list[dict[str, Any]], constraint: Constraint, budget: int, options: dict[str, Any],
                  pin: SlotPin | None) -> Flow[Structured[Any] | tuple[Usage, int, str]]:
    """The fast-forwarded answer, or (its cost, attempts, why not) for the grammar path to go on from."""
    from .fastforward import fast_forward_flow  # noqa: PLC0415 (imported on first use: it loads the plan code)

    plan = constraint.forced
    if plan.root is None:
        return Usage(), 0, str(plan.reason)
    if float(options.get("temperature") or 0.0) > 0.0:
        return Usage(), 0, "sampling (temperature > 0) decodes the whole answer"
    progress, reason = yield from fast_forward_flow(messages, plan.root, budget=budget, seed=options.get("seed"),
                                                    pin=pin)
    usage = Usage(progress.prompt_tokens, progress.decoded + progress.forced)
    if not reason:
        try:
            data = constraint.decode(progress.text)
        except ValueError as exc:
            reason = f"not valid JSON: {exc}"
        else:
            errors = constraint.check(data)
            if not errors:
                return Structured(data, progress.text, 1, usage, constraint.unenforced, "stop", path="fast_forward",
                                  decoded_tokens=progress.decoded, forced_tokens=progress.forced)
            reason = "not valid: " + "; ".join(errors)[:300]
        return usage, 1, reason  # a whole answer that did not validate counts as an attempt
    return usage, 0, reason


def _grammar_flow(messages: list[dict[str, Any]], constraint: Constraint, model: str | None, budget: int,
                  max_attempts: int, options: dict[str, Any] | None, tried: int, usage: Usage,
                  lean: list[dict[str, Any]] | None = None, *, grow: bool = True) -> Flow[Structured[Any]]:
    """``grow``: a truncated answer may be retried with twice the budget — only tiankong's own estimate; a caller's
    ``max_tokens`` bounds every attempt (a request cannot make the engine decode more per attempt than it asked)."""
    attempts, grown, minimal, simplified, leaned = 0, False, False, False, False
    decoded = 0
    engine_fields = constraint.engine_fields
    convo = list(messages)
    last_raw, errors = "", []
    while True:
        attempts += 1
        fields = generation_options(max_tokens=budget, **(options or {}))
        body = chat_body(convo, model, False, {**fields, **engine_fields})
        (answer,) = yield [Call("POST", "/v1/chat/completions", body)]
        if isinstance(answer, InputTooLong) and lean is not None and not leaned:
            leaned, messages, convo, attempts = True, lean, list(lean), attempts - 1
            continue
        if isinstance(answer, Exception):
            failure = _compile_failure(answer)
            if failure is not None and not simplified and constraint.simplified_fields is not None:
                simplified, engine_fields = True, constraint.simplified_fields  # validation checks the rest
                attempts -= 1
                continue
            raise failure or answer
        result: ChatResult = parse_chat(answer)
        usage = usage + result.usage
        decoded += result.usage.completion_tokens
        last_raw = result.text
        if result.truncated:
            if grow and not grown and budget < MAX_TOKENS_CAP:
                grown, budget = True, min(budget * 2, MAX_TOKENS_CAP)
                continue
            if not minimal and constraint.minimal_fields is not None:
                minimal, engine_fields = True, constraint.minimal_fields
                continue
            raise TruncatedOutput(f"the answer was cut off at {budget} tokens after {tried + attempts} attempts",
                                  attempts=tried + attempts, last_raw=last_raw, usage=usage)
        try:
            data = constraint.decode(result.text)
        except ValueError as exc:
            errors = [f"not valid JSON: {exc}"]
        else:
            errors = constraint.check(data)
            if not errors:
                return Structured(data, result.text, tried + attempts, usage, constraint.unenforced,
                                  result.finish_reason, minimal, decoded_tokens=decoded, simplified=simplified,
                                  schema_in_prompt="none" if leaned else "")
        if attempts >= max_attempts + grown + minimal:
            raise RetriesExhausted(f"no valid answer after {tried + attempts} attempts: {'; '.join(errors)[:300]}",
                                   attempts=tried + attempts, last_raw=last_raw, errors=errors, usage=usage)
        sample = next((m.get("content", "") for m in messages if m.get("role") == "user"), "")
        convo = [*messages, {"role": "assistant", "content": result.text}, repair_message(errors, str(sample))]


# --- choices ----------------------------------------------------------------------------------------------


@dataclass
class Decision:
    """The chosen label, the probability of every label, and the margin between the top two."""

    label: str
    scores: dict[str, float]
    margin: float
    labels: list[str] = field(default_factory=list)

    @property
    def confidence(self) -> float:
        return self.scores[self.label]


FLOOR_PROB = 1e-12
LOGIT_BIAS = 100.0


def choose_flow(messages: list[dict[str, Any]], choices: list[str],
                indexed: tuple[list[dict[str, Any]], list[str]] | None = None, *,
                pin: SlotPin | None = None, known: dict[Any, Any] | None = None) -> Flow[dict[str, float]]:
    """Probability of each label under label-constrained decoding, from token probabilities.

    Each label is tokenized; the labels form a trie over tokens. At every branching node one
    ``/completion`` call (prompt = chat template + prefix tokens, one token) reads the next-token
    distribution restricted to the allowed continuations: every allowed token gets the same large logit
    bias (which keeps their ratios exact) and the post-sampling probabilities are read at temperature 1
    with top-k/top-p/min-p off. A label that ends where another continues competes through the model's
    end-of-turn token. A label's probability is the product along its path — exactly the distribution a
    decoder constrained to the labels samples from; the answer taken is its argmax (deterministic).

    ``known``: a dict kept across calls on one engine (``ask``), holding its end-of-turn token and tokenized
    labels so that later questions skip those requests.
    """
    known = {} if known is None else known
    if "eos" not in known:
        (props,) = yield [Call("GET", "/props")]
        known["eos"] = str(props.get("eos_token") or "") if isinstance(props, dict) else ""
    eos_text = str(known["eos"])
    labels = choices
    if tuple(labels) not in known:
        known[tuple(labels)] = yield from _tokenize_labels(labels, eos_text)
    sequences, eos = known[tuple(labels)]
    if sequences is None and indexed is not None:
        # the tokenizer splits a label's characters into byte pieces, whose probabilities llama-server does
        # not report: score the options by their number instead (the prompt lists them numbered)
        messages, labels = indexed
        sequences, eos = yield from _tokenize_labels(labels, eos_text)
    if sequences is None:
        raise UnscorableLabels(f"the labels {choices!r} split into partial UTF-8 tokens, whose probabilities the "
                               "engine does not report", hint="use labels made of whole words (e.g. plain ASCII "
                               "or common characters), or describe rare symbols in words")
    (template,) = yield [Call("POST", "/apply-template", {"messages": messages})]
    _raise(template)
    prompt = str(template["prompt"])
    logp = dict.fromkeys(range(len(choices)), 0.0)
    frontier: list[tuple[int, ...]] = [()]
    while frontier:
        branching = [p for p in frontier if len(_continuations(p, sequences)) > 1]
        bodies = [_next_token_body(prompt, p, _continuations(p, sequences), eos) for p in branching]
        answers = yield [Call("POST", "/completion", pin.pin(b) if pin else b) for b in bodies]
        for prefix, answer in zip(branching, answers, strict=True):
            _raise(answer)
            if pin is not None:
                pin.saw(answer)
            _score_branch(prefix, answer, sequences, logp, eos)
        frontier = [prefix + (token,) for prefix in frontier for token in _continuations(prefix, sequences)
                    if token is not None]
    return _normalise({choices[i]: lp for i, lp in logp.items()})


def _tokenize_labels(labels: list[str], eos_text: str) -> Generator[list[Call], list[Any],
                                                                    tuple[list[tuple[int, ...]] | None, int | None]]:
    """Token sequences of the labels (None when a piece is a partial UTF-8 byte) and the end-of-turn id."""
    bodies = [{"content": c, "add_special": False, "with_pieces": True} for c in [*labels, eos_text]]
    answers = yield [Call("POST", "/tokenize", body) for body in bodies]
    sequences = []
    for answer in answers[:-1]:
        _raise(answer)
        pieces = answer["tokens"]
        if any(not isinstance(p, dict) or not isinstance(p.get("piece"), str) for p in pieces):
            return None, None
        sequences.append(tuple(int(p["id"]) for p in pieces))
    eos_tokens = answers[-1].get("tokens") if isinstance(answers[-1], dict) else None
    eos = int(eos_tokens[0]["id"]) if eos_text and eos_tokens and len(eos_tokens) == 1 else None
    return sequences, eos


def _raise(answer: Any) -> None:
    if isinstance(answer, Exception):
        raise answer
    if not isinstance(answer, dict):
        raise TransportError(f"unexpected answer from the engine: {str(answer)[:200]}")


def _continuations(prefix: tuple[int, ...], sequences: list[tuple[int, ...]]) -> set[int | None]:
    """Next tokens after ``prefix`` among the labels that start with it (None = a label ends here)."""
    n = len(prefix)
    return {seq[n] if len(seq) > n else None for seq in sequences if seq[:n] == prefix}


def _next_token_body(prompt: str, prefix: tuple[int, ...], allowed: set[int | None], eos: int | None) -> dict[str, Any]:
    tokens = sorted(t for t in {eos if t is None else t for t in allowed} if t is not None)
    return {"prompt": [prompt, *prefix], "n_predict": 1, "n_probs": len(tokens) + 2, "temperature": 1.0,
            "top_k": 0, "top_p": 1.0, "min_p": 0.0, "post_sampling_probs": True, "cache_prompt": True, "seed": 42,
            "logit_bias": [[t, LOGIT_BIAS] for t in tokens]}


def _score_branch(prefix: tuple[int, ...], answer: dict[str, Any], sequences: list[tuple[int, ...]],
                  logp: dict[int, float], eos: int | None) -> None:
    probs = answer.get("completion_probabilities") or [{}]
    top = {int(t["id"]): float(t["prob"]) for t in probs[0].get("top_probs", [])}
    options = _continuations(prefix, sequences)
    raw: dict[int | None, float] = {}
    for token in options:
        key = eos if token is None else token
        raw[token] = max(top.get(key, 0.0) if key is not None else 0.0, FLOOR_PROB)
    total = sum(raw.values())
    n = len(prefix)
    for index, seq in enumerate(sequences):
        if seq[:n] == prefix:
            logp[index] += math.log(raw[seq[n] if len(seq) > n else None] / total)


def _normalise(logps: dict[str, float]) -> dict[str, float]:
    peak = max(logps.values())
    weights = {label: math.exp(lp - peak) for label, lp in logps.items()}
    total = sum(weights.values())
    return {label: weight / total for label, weight in weights.items()}


def decide(scores: dict[str, float], threshold: float | None = None) -> Decision:
    ranked = sorted(scores.items(), key=lambda item: item[1], reverse=True)
    margin = ranked[0][1] - (ranked[1][1] if len(ranked) > 1 else 0.0)
    labels = [label for label, p in ranked if threshold is not None and p >= threshold]
    return Decision(ranked[0][0], dict(ranked), margin, labels or [ranked[0][0]])


def json_decode(text: str) -> Any:
    return json.loads(text)
