"""Regexes rewritten into the subset the engine's grammar enforces. Pure (no I/O).

llama-server compiles a string ``pattern`` into grammar rules only for a subset of regex syntax: anchored
``^…$``, groups ``(…)``/``(?:…)``, classes whose escapes are ``\\t \\r \\n \\\\ \\" \\[ \\] \\- \\xHH \\uHHHH``,
``* + ? {m,n}``, ``|`` and a few escaped metacharacters. For anything else it logs a warning and accepts
*any string, of any length* — and it never bounds a pattern's repetitions, so ``.*`` lets a small model run
to ``max_tokens``. Its ``.`` and ``[^…]`` also admit ``"`` and ``\\``, which end or break the JSON string.

``engine_pattern`` rewrites a pattern into that subset *without widening it*: every string the result
accepts matches the original (as JSON Schema matches — a search). It

* spells ``\\d \\w \\s`` (and ``\\D \\W \\S`` outside classes) as classes, and escaped punctuation that the
  engine does not know (``\\/``, ``\\.`` inside a class, ``\\:`` …) as the plain character;
* anchors an unanchored pattern by matching it whole (a string that *is* a match also *contains* one);
* bounds ``*``, ``+`` and ``{m,}`` at ``REPEAT_BOUND`` repetitions, drops lazy markers (same language);
* keeps ``"``, ``\\`` and control characters out of ``.`` and negated classes (the answer stays JSON).

Top-level alternatives anchored on their own (``^a$|^b$``) become one anchored group. It returns ``None`` for
what has no such rewrite (lookarounds, backreferences, word boundaries, other anchors inside the pattern,
possessive quantifiers, class subtraction): the caller then leaves the pattern to validation and bounds the
string by length instead.
"""

from __future__ import annotations

import re
import warnings
from typing import Any

REPEAT_BOUND = 32
#: a character that can stand unescaped inside a JSON string (also excludes newlines, like ``.``)
JSON_DOT = '[^\\"\\\\\\x00-\\x1F]'
_JSON_UNSAFE = '\\"\\\\\\x00-\\x1F'
#: whitespace that may stand raw in a JSON string (tabs and newlines must be escaped there, which the grammar
#: cannot do: patterns that need them are left to validation)
_SPACES = " \\x85\\xA0\\u1680\\u2000-\\u200A\\u2028\\u2029\\u202F\\u205F\\u3000"
_CLASS = {"d": "0-9", "w": "a-zA-Z0-9_", "s": _SPACES}
#: ``\\D \\W \\S`` as classes no wider than Python's (Unicode) reading: printable ASCII and CJK for the first two
_NEGATED = {
    "D": "[ !#-/:-\\[\\]-~\\u4E00-\\u9FFF]",
    "W": "[ !#-/:-@\\[\\]^`{-~]",
    "S": "[^" + _SPACES + '\\"\\\\\\x00-\\x1F]',
}
_KEPT_IN_CLASS = set("\\]-[\"")
_METACHARS = set("^$.[]()|{}*+?")
_UNSUPPORTED_ESCAPES = set("bBAZzGkpPgNX0123456789trnfv")
_QUANTIFIER = re.compile(r"\{(\d*)(,?)(\d*)\}")


class _Unsupported(Exception):
    pass


def engine_pattern(pattern: str, *, bound: int = REPEAT_BOUND) -> str | None:
    """The pattern rewritten for the engine's grammar, or ``None`` when it cannot be without widening.

    ``bound`` caps ``*``, ``+`` and ``{m,}``. Ambiguous nesting (``((a|aa)*)*``) is never given to the grammar:
    llama.cpp's grammar sampler takes seconds per token on it (``regex_safety``)."""
    from .regex_safety import ambiguous_nesting

    if ambiguous_nesting(pattern):
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # "possible nested set": still a valid regex
            re.compile(pattern)
        try:
            return _rewrite(pattern, bound)
        except _Unsupported:
            return _rewrite_alternatives(pattern, bound)
    except (re.error, _Unsupported):
        return None


def _rewrite_alternatives(pattern: str, bound: int) -> str:
    """``^a$|^b$``: anchors inside, but only at the ends of top-level alternatives. Each alternative is matched
    whole (narrower than the original's search, as for a whole pattern) and the group is anchored once."""
    alternatives = _top_level_alternatives(pattern)
    if len(alternatives) < 2:
        raise _Unsupported("anchor inside the pattern")
    bodies = [_rewrite(alternative, bound)[1:-1] for alternative in alternatives]
    filled = [body for body in bodies if body]
    if not filled:
        raise _Unsupported("only empty alternatives")
    return "^(" + "|".join(filled) + ")" + ("?" if len(filled) < len(bodies) else "") + "$"


def _top_level_alternatives(pattern: str) -> list[str]:
    """``pattern`` split at every ``|`` outside groups and classes."""
    parts, start, depth, i, in_class = [], 0, 0, 0, False
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            i += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class, i = True, i + 1
            i += 1 if pattern.startswith("^", i) else 0
            i += 1 if pattern.startswith("]", i) else 0  # a leading "]" is a literal
            continue
        elif char in "()":
            depth += 1 if char == "(" else -1
        elif char == "|" and depth == 0:
            parts.append(pattern[start:i])
            start = i + 1
        i += 1
    return parts + [pattern[start:]]


def _rewrite(pattern: str, bound: int) -> str:
    body = pattern
    if body.startswith("^"):
        body = body[1:]
    if body.endswith("$") and not _escaped_at(body, len(body) - 1):
        body = body[:-1]
    out: list[str] = []
    i, depth, can_repeat = 0, 0, False
    while i < len(body):
        char = body[i]
        if char == "\\" or char == '"':
            text, i = _escape(body, i) if char == "\\" else ('"', i + 1)
            # the engine glues an escaped or quoted character to the literal before it, so a quantifier
            # after it would repeat the whole run: group it
            quantified = i < len(body) and (body[i] in "*+?" or (body[i] == "{" and _is_quantifier(body, i)))
            out.append(f"({text})" if quantified and not text.startswith("[") else text)
            can_repeat = True
        elif char == "[":
            text, i = _char_class(body, i)
            out.append(text)
            can_repeat = True
        elif char == "(":
            if body.startswith("(?", i) and not body.startswith("(?:", i):
                raise _Unsupported("lookaround, named group or inline flag")
            i += 3 if body.startswith("(?:", i) else 1
            out.append("(")
            depth, can_repeat = depth + 1, False
        elif char == ")":
            out.append(")")
            i, depth, can_repeat = i + 1, depth - 1, True
        elif char in "*+?" or (char == "{" and _is_quantifier(body, i)):
            text, i = _quantifier(body, i, can_repeat, bound)
            out.append(text)
            can_repeat = False
        elif char in "^$":
            raise _Unsupported("anchor inside the pattern")
        elif char == ".":
            out.append(JSON_DOT)
            i, can_repeat = i + 1, True
        elif char == "|":
            out.append("|")
            i, can_repeat = i + 1, False
        else:
            i, can_repeat = i + 1, True
            if char in "]{}":  # an escaped literal, glued like the ones above
                quantified = i < len(body) and (body[i] in "*+?" or (body[i] == "{" and _is_quantifier(body, i)))
                out.append("(\\" + char + ")" if quantified else "\\" + char)
            else:
                out.append(char)
    if depth != 0:
        raise _Unsupported("unbalanced parentheses")
    return "^" + "".join(out) + "$"


def _escaped_at(text: str, index: int) -> bool:
    backslashes = 0
    while index - backslashes - 1 >= 0 and text[index - backslashes - 1] == "\\":
        backslashes += 1
    return backslashes % 2 == 1


def _escape(body: str, i: int) -> tuple[str, int]:
    """One escape outside a class → engine syntax."""
    nxt = body[i + 1]
    if nxt in _CLASS:
        return "[" + _CLASS[nxt] + "]", i + 2
    if nxt in _NEGATED:
        return _NEGATED[nxt], i + 2
    if nxt in _UNSUPPORTED_ESCAPES:
        raise _Unsupported(f"\\{nxt}")
    if nxt in "xuU":
        return _hex_escape(body, i)
    if nxt in _METACHARS or nxt in "\\\"-":
        return body[i:i + 2], i + 2
    if nxt.isalnum():
        raise _Unsupported(f"\\{nxt}")
    return nxt, i + 2  # escaped punctuation the engine does not know: the character itself


def _hex_escape(body: str, i: int) -> tuple[str, int]:
    width = {"x": 2, "u": 4, "U": 8}[body[i + 1]]
    digits = body[i + 2:i + 2 + width]
    if len(digits) != width or not all(c in "0123456789abcdefABCDEF" for c in digits):
        raise _Unsupported("malformed hex escape")
    if int(digits, 16) < 0x20:
        raise _Unsupported("a control character cannot stand raw in a JSON string")
    return body[i:i + 2 + width], i + 2 + width


def _char_class(body: str, i: int) -> tuple[str, int]:
    """``[...]`` → engine syntax; negated classes also exclude what would break the JSON string."""
    i += 1
    negated = body.startswith("^", i)
    i += 1 if negated else 0
    parts: list[str] = []
    first, caret = True, False
    while i < len(body) and (body[i] != "]" or first):
        char = body[i]
        if char == "\\":
            nxt = body[i + 1]
            if nxt in _CLASS:
                if negated and nxt in "dw":
                    raise _Unsupported("[^\\d] and [^\\w]: Unicode digits and letters have no ASCII spelling")
                parts.append(_CLASS[nxt])
            elif nxt in "trnfv":
                pass  # cannot stand raw in a JSON string: left out (narrower; negated classes exclude it anyway)
            elif nxt in _NEGATED or nxt in _UNSUPPORTED_ESCAPES or (nxt.isalnum() and nxt not in "xuU"):
                raise _Unsupported(f"\\{nxt} in a class")
            elif nxt in "xuU":
                text, i = _hex_escape(body, i)
                parts.append(text)
                first = False
                continue
            elif nxt in _KEPT_IN_CLASS:
                parts.append(body[i:i + 2])
            elif nxt == "^" and not parts:
                caret = True  # moved to the end, where it is a plain character
            else:
                parts.append(nxt)
            i += 2
        elif char == "[":
            if body.startswith("[:", i) or body.startswith("[=", i) or body.startswith("[.", i):
                raise _Unsupported("POSIX class")
            parts.append("\\[")
            i += 1
        elif char == "]":
            parts.append("\\]")  # a ']' first in a class is a literal
            i += 1
        elif char == "&" and body.startswith("&&", i) or char == "-" and body.startswith("--", i):
            raise _Unsupported("class set operation")
        else:
            parts.append('\\"' if char == '"' else char)
            i += 1
        first = False
    if i >= len(body):
        raise _Unsupported("unterminated class")
    inner = "".join(parts) + ("^" if caret else "")
    if inner in ("^", "") and not (negated and inner == ""):
        raise _Unsupported("a class left empty")
    return ("[^" + inner + _JSON_UNSAFE + "]" if negated else "[" + inner + "]"), i + 1


def _is_quantifier(body: str, i: int) -> bool:
    match = _QUANTIFIER.match(body, i)
    return match is not None and bool(match.group(1) or match.group(2))


def _quantifier(body: str, i: int, can_repeat: bool, bound: int) -> tuple[str, int]:
    """``* + ? {m} {m,} {m,n}`` → bounded; a lazy marker after it is dropped, a possessive one refused."""
    if not can_repeat:
        raise _Unsupported("nothing to repeat")
    char = body[i]
    match = _QUANTIFIER.match(body, i) if char == "{" else None
    if match is not None:
        low, comma, high = int(match.group(1) or 0), match.group(2), match.group(3)
        top = int(high) if high else (max(low, bound) if comma else low)
        text, i = (f"{{{low}}}" if low == top else f"{{{low},{top}}}"), match.end()
    else:
        text, i = {"*": f"{{0,{bound}}}", "+": f"{{1,{bound}}}", "?": "?"}[char], i + 1
    if i < len(body) and body[i] == "?":
        i += 1  # lazy: the same language
    elif i < len(body) and body[i] == "+":
        raise _Unsupported("possessive quantifier")
    return text, i


_ATOM_THEN_REPEAT = re.compile(r"(\[(?:\\.|[^\]])*\]|\\.|\(|\)|.)(\{(\d+)(?:,(\d+))?\}|\?)?")


def pattern_chars(rewritten: str) -> int:
    """Rough upper bound of the characters a rewritten (bounded) pattern produces, for the token budget:
    each atom counts once, or its repetition bound; a repeated group counts its bound times 4."""
    total = 0
    for match in _ATOM_THEN_REPEAT.finditer(rewritten.strip("^$")):
        atom, _, low, high = match.groups()
        if atom in "()|" and len(atom) == 1:
            continue
        times = int(high or low) if low else 1
        total += times * (4 if atom == ")" else 1)
    return total


def pattern_max_chars(rewritten: str) -> int:
    """The most characters a string matching ``rewritten`` (``engine_pattern``'s output: every repetition
    bounded) can have."""
    body = rewritten[1:-1] if rewritten.startswith("^") and rewritten.endswith("$") else rewritten
    try:
        width, _ = _widest_alternative(body, 0)
    except IndexError:
        return len(body) * REPEAT_BOUND  # not a rewritten pattern: a generous guess
    return width


def _widest_alternative(body: str, i: int) -> tuple[int, int]:
    """The widest ``|``-separated sequence from ``i`` to the closing ``)`` (or the end), and where it ends."""
    widest, width = 0, 0
    while i < len(body) and body[i] != ")":
        if body[i] == "|":
            widest, width, i = max(widest, width), 0, i + 1
            continue
        if body[i] == "(":
            atom, i = _widest_alternative(body, i + 1)
            i += 1  # past ")"
        elif body[i] == "[":
            atom, i = 1, _class_end(body, i)
        else:
            atom, i = 1, i + ({"x": 4, "u": 6, "U": 10}.get(body[i + 1], 2) if body[i] == "\\" else 1)
        match = _QUANTIFIER.match(body, i) if body.startswith("{", i) else None
        if match is not None:
            atom, i = atom * int(match.group(3) or match.group(1)), match.end()
        elif body.startswith("?", i):
            i += 1
        width += atom
    return max(widest, width), i


def _class_end(body: str, i: int) -> int:
    i += 1
    while body[i] != "]":
        i += 2 if body[i] == "\\" else 1
    return i + 1


#: ``fit_pattern`` lowers a bound shared by at most this many repetitions of the longest match; more (a
#: repeated group of words, say) would cut each one short, and those patterns are left to validation
FIT_MAX_REPEATS = 4


def fit_pattern(pattern: str, *, bound: int, max_length: int, min_length: int = 0) -> str | None:
    """``engine_pattern`` with its repetition bound lowered until no match is longer than ``max_length`` —
    the converter ignores ``maxLength`` next to a pattern, and this enforces it in the grammar. Never wider
    than the pattern. None when no bound fits (fixed parts already too long), when the fitting one would
    leave no match of ``min_length``, or when it is shared by more than ``FIT_MAX_REPEATS`` repetitions."""
    previous: int | None = None  # the longest match one bound higher
    for repeat in range(bound, 0, -1):
        rewritten = engine_pattern(pattern, bound=repeat)
        if rewritten is None:
            return None
        longest = pattern_max_chars(rewritten)
        if longest <= max_length:
            shared = 0 if previous is None else previous - longest
            return rewritten if longest >= min_length and shared <= FIT_MAX_REPEATS else None
        previous = longest
    return None


def fit_node_pattern(node: dict[str, Any], repeat: int = REPEAT_BOUND) -> str | None:
    """A schema node's pattern with repetitions bounded so that it also enforces the node's ``maxLength``."""
    top, low = node.get("maxLength"), node.get("minLength", 0)
    if not isinstance(top, int) or not isinstance(low, int) or not isinstance(node.get("pattern"), str):
        return None
    return fit_pattern(node["pattern"], bound=repeat, max_length=top, min_length=low)

_LABEL = "[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?"
_HOST = f"({_LABEL}\\.){{0,3}}[a-z]([a-z0-9-]{{0,20}}[a-z0-9])?"
_OCTET = "(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
_URI = f"https?://{_HOST}(/[A-Za-z0-9._~-]{{1,24}}){{0,4}}"
#: ``format``s the converter ignores, as patterns whose every match passes jsonschema's format checker
#: (a narrow, realistic subset of each format); the engine's grammar then enforces them
FORMAT_PATTERNS = {
    "email": f"^[a-z0-9]([a-z0-9._-]{{0,22}}[a-z0-9])?@({_LABEL}\\.){{1,3}}[a-z]{{2,6}}$",
    "idn-email": f"^[a-z0-9]([a-z0-9._-]{{0,22}}[a-z0-9])?@({_LABEL}\\.){{1,3}}[a-z]{{2,6}}$",
    "hostname": f"^{_HOST}$",
    "idn-hostname": f"^{_HOST}$",
    "ipv4": f"^{_OCTET}(\\.{_OCTET}){{3}}$",
    "ipv6": "^([0-9a-f]{1,4}:){7}[0-9a-f]{1,4}$",
    "uri": f"^{_URI}$",
    "uri-reference": f"^{_URI}$",
    "iri": f"^{_URI}$",
    "iri-reference": f"^{_URI}$",
    "json-pointer": "^(/[A-Za-z0-9_-]{1,16}){0,4}$",
    "duration": "^(P[1-9][0-9]{0,2}[DWMY]|PT[1-9][0-9]{0,2}[HMS])$",
}
