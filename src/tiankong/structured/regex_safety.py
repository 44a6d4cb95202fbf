"""Schema patterns checked in bounded time: RE2 (linear time) where it can read the pattern, Python's ``re`` only
where no catastrophic backtracking is possible, and a refusal up front otherwise.

Python's ``re`` backtracks: ``^(?=a)(a+)+$`` against 29 ``a``s and a ``!`` takes 18 s, doubling with each ``a``,
and it holds the GIL, so on the gateway's event loop every client freezes (issue 21). RE2 (``google-re2``) runs
any pattern it accepts in time linear in the input, but it has no lookarounds or backreferences. So:

* a pattern RE2 compiles is checked by RE2 (ECMA-262's ``\\uXXXX`` written as RE2's ``\\x{XXXX}``);
* a pattern RE2 refuses (lookarounds, backreferences) is checked by ``re`` only when it repeats single
  characters or classes only (at worst polynomial in the bounded string length); one that repeats a group
  cannot be checked safely and is refused with ``schema_not_supported`` before anything runs.

Ambiguous nesting (a repetition whose body is itself a repetition of variable length: ``(a+)+``,
``((a|aa)*)*``) is refused up front too (``AmbiguousPattern``), although RE2 checks it safely. llama.cpp's grammar
sampler explodes on it (seconds per token), and kept out of the grammar it still cost an engine two whole
attempts that no model satisfies in practice: on ``benchmarks/gateway_abuse.py`` that one request was all the
abuser's engine work, and it doubled a well-behaved client's p99 on two cores. Every such pattern has a plain
spelling with the same language (``(a+)+`` is ``a+``, ``(x*)*`` is ``x*``), which the refusal names. None of the
320 JSONSchemaBench development schemas has one.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Iterator
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import re2

from ..errors import SchemaNotSupported

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError

_REPEATS = {"MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"}
_UNICODE_ESCAPE = re.compile(r"(?<!\\)((?:\\\\)*)\\u([0-9A-Fa-f]{4})")


def _parse(pattern: str) -> Any:
    import re._parser as sre_parse  # the standard library's own regex parser (Python ≥ 3.11)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return sre_parse.parse(pattern)


_ATOMS = {"LITERAL", "NOT_LITERAL", "IN", "ANY", "CATEGORY"}


def _repeats(items: Any) -> Iterator[tuple[Any, bool]]:
    """Every repetition in a parsed pattern: (its body, whether it repeats more than once)."""
    for op, arg in items:
        name = str(op)
        if name in _REPEATS:
            _, high, sub = arg
            yield sub, high is None or str(high) == "MAXREPEAT" or high > 1
            yield from _repeats(sub)
        elif name == "SUBPATTERN":
            yield from _repeats(arg[-1])
        elif name == "BRANCH":
            for branch in arg[1]:
                yield from _repeats(branch)
        elif name in ("ASSERT", "ASSERT_NOT"):
            yield from _repeats(arg[1])


def _unwrap(items: Any) -> Any:
    """A body reduced through single-item groups: ``((a+))`` → ``a+``."""
    while len(items) == 1 and str(items[0][0]) == "SUBPATTERN":
        items = items[0][1][-1]
    return items


def _bare_repeat(items: Any) -> bool:
    """A body that is just a repetition of variable length (``a+``, ``a{2,3}``; not ``a{3}``)."""
    items = _unwrap(items)
    if len(items) == 1 and str(items[0][0]) in _REPEATS:
        low, high, _ = items[0][1]
        unbounded = high is None or str(high) == "MAXREPEAT"
        return unbounded or (high > 1 and high != low)
    if len(items) == 1 and str(items[0][0]) == "BRANCH":
        return any(_bare_repeat(branch) for branch in items[0][1][1])
    return False


def _parsed(pattern: str) -> Any | None:
    try:
        return _parse(pattern)
    except (re.error, RecursionError, ValueError, OverflowError):
        return None


def complex_repetition(pattern: str) -> bool:
    """A repetition of anything but one character or class (``(ab)+``, ``(a|b)*``, ``(a+)+``): the shapes that
    can make a backtracking engine exponential. Repetitions of single atoms (``a*``, ``[a-z]{3,}``, ``.*``)
    are at worst polynomial."""
    parsed = _parsed(pattern)
    if parsed is None:
        return True
    return any(many and not (len(body) == 1 and str(body[0][0]) in _ATOMS) for body, many in _repeats(parsed))


def ambiguous_nesting(pattern: str) -> bool:
    """A repetition whose body is itself just a repetition of variable length (``(a+)+``, ``((a|aa)*)*``,
    ``(a*|b)*``, ``(a{2,3})*``): the same text splits into exponentially many iterations. ``([a-z]+\\.)*`` is
    not (the dot separates them), nor ``([0-9a-f]{3}){1,2}`` (each iteration has one length)."""
    parsed = _parsed(pattern)
    if parsed is None:
        return True
    return any(many and _bare_repeat(body) for body, many in _repeats(parsed))


def _re2_options() -> Any:
    options = re2.Options()
    options.log_errors = False
    return options


def to_re2(pattern: str) -> str:
    return _UNICODE_ESCAPE.sub(lambda m: f"{m.group(1)}\\x{{{m.group(2)}}}", pattern)


#: how to fix a pattern that ``ambiguous_nesting`` refuses (said by ``AmbiguousPattern`` and by ``preflight``)
AMBIGUOUS_FIX = "(a+)+ matches what a+ matches: repeat once"


class AmbiguousPattern(SchemaNotSupported):
    """A pattern with ambiguous nesting (``(a+)+``): refused before any engine sees it (see the module's text)."""

    def __init__(self, pattern: str) -> None:
        super().__init__("a pattern nests one repetition directly in another", [f"{pattern[:80]!r}"],
                         hint=AMBIGUOUS_FIX)


class UnsafePattern(SchemaNotSupported):
    """A pattern that cannot be checked in bounded time (nested repetition that RE2 cannot read)."""

    def __init__(self, pattern: str) -> None:
        super().__init__("a pattern cannot be checked safely", [f"{pattern[:80]!r} (a lookaround or "
                                                                 "backreference with a repeated group)"],
                         hint="drop the lookaround/backreference, or repeat single characters only (e.g. (a+)+ → a+)")


def _matcher(pattern: str, whole: bool) -> Callable[[str], bool]:
    """RE2 where it reads the pattern, else Python's ``re`` where it cannot backtrack catastrophically, else
    ``UnsafePattern``; ``whole``: a full match (``regex=``), else a search (JSON Schema's ``pattern``)."""
    try:
        compiled = re2.compile(to_re2(pattern), _re2_options())
        match = compiled.fullmatch if whole else compiled.search
        return lambda text: match(text) is not None
    except re2.error:
        pass
    if complex_repetition(pattern):
        raise UnsafePattern(pattern)
    fallback = re.compile(pattern)
    python_match = fallback.fullmatch if whole else fallback.search
    return lambda text: python_match(text) is not None


@lru_cache(maxsize=4096)
def searcher(pattern: str) -> Callable[[str], bool]:
    """``text → bool``: does ``pattern`` match somewhere in ``text`` (JSON Schema's ``pattern``), in bounded time."""
    return _matcher(pattern, whole=False)


def check_pattern(pattern: str) -> None:
    """Raise ``UnsafePattern`` now (not on the first answer) for a pattern that cannot be checked safely."""
    searcher(pattern)


def safe_search(pattern: str, text: str) -> bool:
    return searcher(pattern)(text)


@lru_cache(maxsize=1024)
def full_matcher(pattern: str) -> Callable[[str], bool]:
    """``text → bool``: does ``pattern`` match all of ``text`` (the ``regex=`` mode), in bounded time; raises
    ``UnsafePattern`` / ``AmbiguousPattern`` up front as ``searcher`` and ``preflight`` do."""
    if ambiguous_nesting(pattern):
        raise AmbiguousPattern(pattern)
    return _matcher(pattern, whole=True)


# --- jsonschema: the keywords that run patterns, on the searcher above -------------------------------------
# (jsonschema's own ``pattern``, ``patternProperties`` and ``additionalProperties`` call ``re.search``)

def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    from jsonschema.exceptions import ValidationError

    if validator.is_type(instance, "string") and not safe_search(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: dict[str, Any], instance: Any,
                        schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if safe_search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(validator: Any, additional: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    properties, patterns = schema.get("properties", {}), list(schema.get("patternProperties", {}))
    extras = [key for key in instance if key not in properties and not any(safe_search(p, key) for p in patterns)]
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        from jsonschema.exceptions import ValidationError

        names = ", ".join(repr(key) for key in sorted(extras))
        yield ValidationError(f"Additional properties are not allowed ({names} unexpected)")


@lru_cache(maxsize=16)
def bounded_validator_class(cls: Any) -> Any:
    """``cls`` (a jsonschema validator class) with every pattern checked by :func:`safe_search`."""
    from jsonschema import validators  # jsonschema loads its format checkers: only once a schema is checked

    return validators.extend(cls, {"pattern": _pattern, "patternProperties": _pattern_properties,  # type: ignore[no-untyped-call]
                                   "additionalProperties": _additional_properties})
