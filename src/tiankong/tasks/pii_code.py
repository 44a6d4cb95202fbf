"""Code is not a person: identifiers inside code spans are not redacted as names, places or organisations.

Users redact READMEs, tickets with stack traces and chat logs with snippets. spaCy's tagger and the model read
``TiankongError`` in ``except TiankongError as exc:`` as a PERSON, and ``tiankong.TiankongError`` in backticks as
an ADDRESS (found by the CLI sweep on the project's own README): the redacted text then breaks the code it quotes
and hides nothing. So a PERSON / ADDRESS / ORG span is dropped when it lies inside code — a fenced block (```` ```
```` or ``~~~``) or an inline `` `code` `` span — and is one identifier with a code's shape: a dotted path, an
underscore, a digit, a call's ``()``, a lower-case letter followed by a capital inside the word (``TiankongError``,
``getUser``), or all lower case. Fail safe: a quoted string inside code (``author = "Alice Chen"``) is data, not
code, and keeps its names; so does a span with a space, any span outside code, and every rule type (an e-mail, a
phone, an ID in code is still redacted).
"""

from __future__ import annotations

import bisect
import re

from .pii_rules import Entity

#: the types a code identifier is mistaken for (the rules' own types are never dropped)
NAME_TYPES = frozenset({"PERSON", "ADDRESS", "ORG"})
_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[^\n]*\n.*?^[ \t]*\1[ \t]*$", re.M | re.S)
_INLINE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
_IDENTIFIER = re.compile(r"[A-Za-z_$][\w$]*(?:(?:\.|::|->)[A-Za-z_$][\w$]*)*(?:\(\))?")
_CODE_SHAPE = re.compile(r"[_.\d($:]|->|[a-z][A-Z]")
_QUOTES = "\"'"


def code_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of every fenced code block and inline code span, in order, not overlapping."""
    spans = [(m.start(), m.end()) for m in _FENCE.finditer(text)]
    starts = [s for s, _ in spans]
    for m in _INLINE.finditer(text):
        at = bisect.bisect_right(starts, m.start()) - 1
        if at < 0 or spans[at][1] <= m.start():  # not inside a fence (a fence's own backticks are its)
            spans.append((m.start(1), m.end(1)))
    return sorted(spans)


def is_code_identifier(text: str, start: int, end: int, spans: list[tuple[int, int]]) -> bool:
    """``text[start:end]`` is one identifier with a code's shape inside a code span, not inside a quoted string."""
    word = text[start:end]
    if not _IDENTIFIER.fullmatch(word) or not (_CODE_SHAPE.search(word) or word.islower()):
        return False
    at = bisect.bisect_right(spans, (start, len(text) + 1)) - 1
    if at < 0 or not spans[at][0] <= start < end <= spans[at][1]:
        return False
    line_start = text.rfind("\n", spans[at][0], start) + 1 or spans[at][0]
    before = text[line_start:start]
    return not any(before.count(q) % 2 for q in _QUOTES)  # an odd count of a quote before it: inside a string


def drop_code_identifiers(text: str, entities: list[Entity]) -> list[Entity]:
    """``entities`` without the names, places and organisations that are identifiers in the text's code."""
    if "`" not in text and "~~~" not in text:
        return entities
    spans = code_spans(text)
    return [e for e in entities if e.type not in NAME_TYPES or not is_code_identifier(text, e.start, e.end, spans)]
