"""JSON from outside (request bodies, batch lines): standard JSON only, nested no deeper than ``MAX_DEPTH``.

Python's ``json`` accepts ``NaN``, ``Infinity`` and ``-Infinity``, which are not JSON and which llama-server
answers with a raw parse error; and it recurses once per nesting level, so 100,000 brackets raise
``RecursionError`` (and code that walks the value later would recurse as deep). Both are refused here with a
``ValueError`` that says what to change.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .errors import ConfigError

MAX_DEPTH = 128


class UnsafeJSON(ValueError):
    """Valid for Python's json module, refused for a request: a non-finite number, or nested too deep."""


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


def loads(text: str | bytes, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads`` without NaN/Infinity and without values nested deeper than ``max_depth``."""
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise UnsafeJSON(f"JSON nested deeper than {max_depth} levels") from None
    if depth(value, max_depth) > max_depth:
        raise UnsafeJSON(f"JSON nested deeper than {max_depth} levels")
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
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"the {what} {file} is not UTF-8 text", hint=f"is {file} really the {what}?") from None
