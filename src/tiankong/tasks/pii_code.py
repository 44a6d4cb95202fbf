"""Code is not a person: identifiers inside code are not redacted as names, places or organisations.

Users redact READMEs, tickets with stack traces and chat logs with snippets. spaCy's tagger and the model read
``TiankongError`` in ``except TiankongError as exc:`` as a PERSON (on 93 public package READMEs: ``client =
OpenAI(``, ``MarkdownIt``, ``Draft202012Validator``, ``MyClass`` …; ``benchmarks/redact_code.py``), and a
redacted snippet no longer runs while nothing is hidden. So a PERSON / ADDRESS / ORG span inside code — a fenced
block (```` ``` ```` or ``~~~``, closed by a fence at least as long) or an inline span (`` `x` `` or
```` ``x`` ````) — is not redacted when it is one identifier that code shows as code: a capital after a lower-case
letter or a digit inside the word (``TiankongError``, ``NaT``, ``Draft202012Validator``), a dotted or ``::`` path,
a call (``Name(``), an attribute (``typer.Typer``), or a name after ``import``, ``except``, ``class``, ``raise``,
``new``, ``extends``. Fail safe, since a leaked name costs more than an over-redacted word: text in a comment
(after ``#``, ``//`` or ``--``) and in a string (quoted on its line, or inside a triple-quoted block) is prose and
keeps its names; a handle-like word (``jane_doe``, ``alice99``) is not taken for code; a span with a space, any
span outside code and every rule type (an e-mail, a phone, an ID in code) stay redacted.
"""

from __future__ import annotations

import bisect
import re

from .pii_rules import Entity

#: the types a code identifier is mistaken for (the rules' own types are never dropped)
NAME_TYPES = frozenset({"PERSON", "ADDRESS", "ORG"})
_FENCE = re.compile(r"^[ \t]*(?P<fence>`{3,}|~{3,})[^\n]*\n.*?^[ \t]*(?P=fence)[`~]*[ \t]*$", re.M | re.S)
_INLINE = re.compile(r"(?<!`)(`{1,2})(?!`)([^`\n]+?)(?<!`)\1(?!`)")
_IDENTIFIER = re.compile(r"[A-Za-z_$][\w$]*(?:(?:\.|::|->)[A-Za-z_$][\w$]*)*(?:\(\))?")
_CODE_SHAPE = re.compile(r"[a-z0-9][A-Z]|\.|::|->|\(")
_KEYWORD_BEFORE = re.compile(r"\b(?:import|except|class|raise|new|extends|implements)\s+(?:[\w.]+\s*,\s*)*$")
_COMMENT = re.compile(r"#|//|(?:^|\s)--\s")
_TRIPLE = re.compile(r'"""|\'\'\'')


def code_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of every fenced code block and inline code span, in order, not overlapping."""
    spans = [(m.start(), m.end()) for m in _FENCE.finditer(text)]
    starts = [s for s, _ in spans]
    for m in _INLINE.finditer(text):
        at = bisect.bisect_right(starts, m.start()) - 1
        if at < 0 or spans[at][1] <= m.start():  # not inside a fence (a fence's own backticks are its)
            spans.append((m.start(2), m.end(2)))
    return sorted(spans)


def is_code_identifier(text: str, start: int, end: int, spans: list[tuple[int, int]]) -> bool:
    """``text[start:end]`` is one identifier that the code around it shows as code (see the module docstring)."""
    word = text[start:end]
    if not _IDENTIFIER.fullmatch(word):
        return False
    at = bisect.bisect_right(spans, (start, len(text) + 1)) - 1
    if at < 0 or not spans[at][0] <= start < end <= spans[at][1]:
        return False
    block_before = text[spans[at][0]:start]
    before = block_before[block_before.rfind("\n") + 1:]
    if len(_TRIPLE.findall(block_before)) % 2:  # inside a triple-quoted string: a docstring is prose
        return False
    line = _TRIPLE.sub("", before).replace("://", "")
    if any(line.count(q) % 2 for q in "\"'`") or _COMMENT.search(line):  # in a string, or a comment: prose
        return False
    previous, following = text[start - 1:start] if start else "", text[end:end + 1]
    return bool(_CODE_SHAPE.search(word) or previous == "." or following in ("(", ".")
                or _KEYWORD_BEFORE.search(before))


def drop_code_identifiers(text: str, entities: list[Entity]) -> list[Entity]:
    """``entities`` without the names, places and organisations that are identifiers in the text's code."""
    if "`" not in text and "~~~" not in text:
        return entities
    spans = code_spans(text)
    return [e for e in entities if e.type not in NAME_TYPES or not is_code_identifier(text, e.start, e.end, spans)]
