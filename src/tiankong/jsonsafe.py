"""JSON from outside (request bodies, batch lines): standard JSON only, nested no deeper than ``MAX_DEPTH``.

Python's ``json`` accepts ``NaN``, ``Infinity`` and ``-Infinity``, which are not JSON and which llama-server
answers with a raw parse error; it recurses once per nesting level, so 100,000 brackets raise ``RecursionError``
(and code that walks the value later would recurse as deep); and it turns an escaped lone UTF-16 surrogate
(``"\\ud83d"`` without its pair) into a string that is not Unicode text, which fails later — far from the request
— wherever the string is encoded (sent to the engine, written to a file or a reply). All three are refused here
with a ``ValueError`` that says what to change.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from .errors import ConfigError

MAX_DEPTH = 128


class UnsafeJSON(ValueError):
    """Valid for Python's json module, refused for a request: a non-finite number, nested too deep, a lone surrogate."""


def _refuse_constant(name: str) -> Any:
    raise UnsafeJSON(f"{name} is not a JSON number: send a finite number (or null)")


def depth(value: Any, limit: int = MAX_DEPTH) -> int:
    """Nesting depth of ``value`` (a scalar is 0), counted iteratively; stops as soon as it passes ``limit``."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, level = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        if children is None:
            continue
        deepest = max(deepest, level)
        if deepest > limit:
            return deepest
        stack.extend((child, level + 1) for child in children if isinstance(child, dict | list))
    return deepest


_SURROGATE = re.compile("[\ud800-\udfff]")
MAX_PATH_CHARS = 120


def lone_surrogate(value: Any) -> str | None:
    """Where a string (or key) of ``value`` holds a lone surrogate — ``"records[3].text"`` — or ``None``.

    Breadth first, iterative; each node keeps its parent's index and its own key, so the path is built only for
    the string found (building every child's path would copy long keys once per list item: gigabytes from a small
    body)."""
    nodes: list[tuple[Any, int, str | int]] = [(value, -1, "")]
    index = 0
    while index < len(nodes):
        node = nodes[index][0]
        if isinstance(node, str):
            if _SURROGATE.search(node):
                return _path(nodes, index)
        elif isinstance(node, dict):
            for key, child in node.items():
                if isinstance(key, str) and _SURROGATE.search(key):
                    return f"a key of {_path(nodes, index)}"
                if isinstance(child, str | dict | list):
                    nodes.append((child, index, key))
        elif isinstance(node, list):
            nodes.extend((child, index, i) for i, child in enumerate(node) if isinstance(child, str | dict | list))
        index += 1
    return None


def _path(nodes: list[tuple[Any, int, str | int]], index: int) -> str:
    parts: list[str] = []
    while index > 0:
        _, parent, key = nodes[index]
        parts.append(f"[{key}]" if isinstance(key, int) else f".{key}")
        index = parent
    path = "".join(reversed(parts)).lstrip(".") or "the body"
    return path if len(path) <= MAX_PATH_CHARS else path[:MAX_PATH_CHARS] + "…"


def _lone_surrogate_inside(text: str | bytes, value: Any) -> bool:
    """Only an escape (``\\ud83d``) in the text can give a parsed string a surrogate; an emoji's escaped pair gives
    one character, so the check is that the value encodes as UTF-8 — done by the json module's C encoder (a 5 MB
    body of 10,000 records with emoji: ≈ 40 ms, like parsing it; the path is looked for only on a hit)."""
    escaped = ("\\ud" in text or "\\uD" in text) if isinstance(text, str) else (b"\\ud" in text or b"\\uD" in text)
    if not escaped:
        return False
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def loads(text: str | bytes, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads`` without NaN/Infinity, without values nested deeper than ``max_depth`` and without lone
    surrogates."""
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise UnsafeJSON(f"JSON nested deeper than {max_depth} levels") from None
    if depth(value, max_depth) > max_depth:
        raise UnsafeJSON(f"JSON nested deeper than {max_depth} levels")
    if _lone_surrogate_inside(text, value):
        where = lone_surrogate(value) or "a string"
        if where is not None:
            raise UnsafeJSON(f"{where} holds a lone UTF-16 surrogate (a \\ud800-\\udfff escape without its pair), "
                             "which is not Unicode text: send the whole pair or drop it")
    return value


#: config, schema and job files: far above any real one, far below what a mistaken path (/dev/zero) would read
MAX_FILE_BYTES = 8 * 1024 * 1024


def read_limited(path: str | Path, what: str, limit: int = MAX_FILE_BYTES) -> str:
    """The UTF-8 text of a config/schema/job file, read no further than ``limit`` bytes.

    ``ConfigError`` (one line naming the file) when it cannot be read, is larger, or is not UTF-8."""
    file = Path(path)
    try:
        with file.open("rb") as handle:
            data = handle.read(limit + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read the {what} {file}: {exc.strerror or exc}", hint="check the path") from None
    if len(data) > limit:
        raise ConfigError(f"the {what} {file} is larger than {limit // (1024 * 1024)} MiB",
                          hint=f"is {file} really the {what}?")
    try:
        return data.decode("utf-8-sig")  # a byte-order mark (Windows editors write one) is not the file's text
    except UnicodeDecodeError:
        raise ConfigError(f"the {what} {file} is not UTF-8 text", hint=f"is {file} really the {what}?") from None
