"""Code is not a person: identifiers inside code are not redacted as names, places or organisations.

Users redact READMEs, tickets with stack traces and chat logs with snippets. spaCy's tagger and the model read
``TiankongError`` in ``except TiankongError as exc:`` as a PERSON (on 93 public package READMEs: ``client =
OpenAI(``, ``MarkdownIt``, ``Draft202012Validator``, ``MyClass`` …; ``benchmarks/redact_code.py``), and a
redacted snippet no longer runs while nothing is hidden. So a PERSON / ADDRESS / ORG span is not redacted when it
is one identifier that code shows as code:

* in a fenced block tagged with a programming language (```` ```python ````, ``js``, ``bash`` …: ``LANGUAGES``),
  outside its comments and strings: a dotted or ``::`` path, a call (``Name(``), an attribute (``typer.Typer``,
  ``Name.attr``), a name after ``import`` / ``except`` / ``class`` / ``raise`` / ``new`` / ``extends``, or a capital
  after a lower-case letter or digit inside the word (``TiankongError``, ``NaT``);
* in an inline span (`` `x` ``, ```` ``x`` ````): only a path, a call or an attribute — a bare capitalised word
  there may be a name (`` ask `McDonald` ``).

Fail safe, since a leaked name costs more than an over-redacted word: a fence without a tag, or tagged as text,
a log, a console session or a data format (YAML, JSON, INI, CSV: their bare values are data), is prose; so are
comments (``#``, ``//``, ``--``, ``/* … */``, ``<!-- … -->``, a line starting with ``*``, ``;`` or ``%``),
docstrings and quoted strings (``author = "Alice Chen"``); a handle (``jane_doe``, ``alice99``) is not taken for
code; a word followed by a sentence's full stop is not an attribute; and every rule type (an e-mail, a phone, an
ID in code) stays redacted. A read-only review found each of these cases letting a name through an earlier rule;
each is a test (``tests/unit/test_pii_code.py``).
"""

from __future__ import annotations

import bisect
import re

from .pii_rules import Entity

#: the types a code identifier is mistaken for (the rules' own types are never dropped)
NAME_TYPES = frozenset({"PERSON", "ADDRESS", "ORG"})
#: fence tags whose bare words are code (data formats and logs are not: their bare values are data)
LANGUAGES = frozenset({
    "python", "py", "python3", "pycon", "ipython", "js", "javascript", "jsx", "ts", "typescript", "tsx", "java",
    "kotlin", "kt", "scala", "go", "golang", "rust", "rs", "c", "h", "cpp", "c++", "cc", "hpp", "cs", "csharp",
    "swift", "objc", "ruby", "rb", "php", "perl", "lua", "r", "julia", "dart", "elixir", "haskell", "clojure",
    "sh", "bash", "shell", "zsh", "fish", "powershell", "ps1", "pwsh", "bat", "cmd", "sql", "graphql", "proto",
    "dockerfile", "makefile", "cmake", "nix", "hcl", "terraform", "groovy", "vb", "fortran", "matlab", "zig",
})
_FENCE = re.compile(r"^[ \t]*(?P<fence>`{3,}|~{3,})[ \t]*(?P<tag>[^\s`{]*)[^\n]*\n.*?^[ \t]*(?P=fence)[`~]*[ \t]*$",
                    re.M | re.S)
_INLINE = re.compile(r"(?<!`)(`{1,2})(?!`)([^`\n]+?)(?<!`)\1(?!`)")
_IDENTIFIER = re.compile(r"[A-Za-z_$][\w$]*(?:(?:\.|::|->)[A-Za-z_$][\w$]*)*(?:\(\))?")
_PATH_OR_CALL = re.compile(r"\.|::|->|\(")
_CODE_SHAPE = re.compile(r"[a-z0-9][A-Z]")
_KEYWORD_BEFORE = re.compile(r"\b(?:import|except|class|raise|new|extends|implements)\s+(?:[\w.]+\s*,\s*)*$")
_COMMENT = re.compile(r"#|//|/\*|<!--|(?:^|\s)--\s|^\s*[*;%]")
_TRIPLE = re.compile(r'"""|\'\'\'')
#: a region of code: (start, end, "program" | "prose" | "inline")
Region = tuple[int, int, str]


def code_regions(text: str) -> list[Region]:
    """Every fenced block (``program`` when tagged with one of ``LANGUAGES``, else ``prose``) and inline span."""
    regions = [(m.start(), m.end(), "program" if m["tag"].lower().lstrip(".") in LANGUAGES else "prose")
               for m in _FENCE.finditer(text)]
    starts = [r[0] for r in regions]
    for m in _INLINE.finditer(text):
        at = bisect.bisect_right(starts, m.start()) - 1
        if at < 0 or regions[at][1] <= m.start():  # not inside a fence (a fence's own backticks are its)
            regions.append((m.start(2), m.end(2), "inline"))
    return sorted(regions)


def code_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of every fenced code block and inline code span, in order, not overlapping."""
    return [(start, end) for start, end, _ in code_regions(text)]


def is_code_identifier(text: str, start: int, end: int, regions: list[Region]) -> bool:
    """``text[start:end]`` is one identifier that the code around it shows as code (see the module docstring)."""
    word = text[start:end]
    if not _IDENTIFIER.fullmatch(word):
        return False
    at = bisect.bisect_right(regions, (start, len(text) + 1, "")) - 1
    if at < 0 or not regions[at][0] <= start < end <= regions[at][1] or regions[at][2] == "prose":
        return False
    block_before = text[regions[at][0]:start]
    before = block_before[block_before.rfind("\n") + 1:]
    if len(_TRIPLE.findall(block_before)) % 2:  # inside a triple-quoted string: a docstring is prose
        return False
    if block_before.count("/*") > block_before.count("*/") or block_before.count("<!--") > block_before.count("-->"):
        return False  # inside a block comment
    line = _TRIPLE.sub("", before).replace("://", "")
    if any(line.count(q) % 2 for q in "\"'`") or _COMMENT.search(line):  # in a string, or a comment: prose
        return False
    attribute_of = re.match(r"\.[A-Za-z_]", text[end:end + 2]) is not None  # Name.attr (not a full stop)
    attribute = re.search(r"[\w)\]]\.$", text[max(start - 2, 0):start]) is not None  # obj.Name
    if _PATH_OR_CALL.search(word) or text[end:end + 1] == "(" or attribute_of or attribute:
        return True
    return regions[at][2] == "program" and bool(_CODE_SHAPE.search(word) or _KEYWORD_BEFORE.search(before))


def drop_code_identifiers(text: str, entities: list[Entity]) -> list[Entity]:
    """``entities`` without the names, places and organisations that are identifiers in the text's code."""
    if "`" not in text and "~~~" not in text:
        return entities
    regions = code_regions(text)
    return [e for e in entities if e.type not in NAME_TYPES or not is_code_identifier(text, e.start, e.end, regions)]
