"""``--task extract``: a cascade over JSON extraction, its confidence a validation score of the small side's answer.

Records are ``{"text", "expected": {…}}`` (the fields the answer should have). A side answers with ``extract``
against the schema; an answer is **right** when every leaf field of ``expected`` is in it at the same path with the
same value (strings compared case-folded with whitespace collapsed, numbers as numbers — the ``json_fields`` eval
scorer at 1.0). The **confidence** is the share of the answer's claims that the text supports: its non-empty string
and number leaf values found in the text (the same normalisation). Extract's constrained decoding makes every answer
valid against the schema, so validity alone says nothing; a value that is not in the text is the usual sign of a
made-up field. An answer claiming nothing (every field null or empty) has confidence 1: nothing in it is
unsupported. An answer that failed (no valid JSON after the retries) is wrong, with confidence 0.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..evals.scorers import leaves, same_value
from .answer import Answer

#: the label of a failed extraction (never equal to an expected object's)
FAILED = "null"


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def load_schema(schema: str | Path | dict[str, Any]) -> dict[str, Any]:
    """A JSON Schema object, or the path of a file holding one."""
    if isinstance(schema, dict):
        return schema
    try:
        found = json.loads(Path(schema).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read {schema}: {exc.strerror}", hint="give --schema a JSON Schema file") from None
    except ValueError as exc:
        raise ConfigError(f"{schema} is not JSON: {exc}", hint="--schema is a JSON Schema object") from None
    if not isinstance(found, dict):
        raise ConfigError(f"{schema} is not a JSON Schema object", hint='e.g. {"type": "object", "properties": …}')
    return found


def expected_of(data: dict[str, Any], where: str) -> str:
    """A record's ``expected`` object as the record's label (canonical JSON)."""
    expected = data.get("expected")
    if not isinstance(expected, dict) or not expected:
        raise ConfigError(f"{where} has no expected object", hint='--task extract records are {"text": …, '
                          '"expected": {…the fields…}}')
    return canonical(expected)


def _norm(value: Any) -> str:
    """For grounding: whitespace runs as one space, case folded (a value is found in the text as a substring)."""
    return re.sub(r"\s+", " ", str(value)).strip().casefold()


def fields_match(expected: str, answer: str) -> bool:
    """Every leaf of ``expected`` (canonical JSON) is in ``answer`` at the same path with the same value."""
    got = dict(leaves(json.loads(answer)))
    return all(path in got and same_value(value, got[path]) for path, value in leaves(json.loads(expected)))


def grounded(answer: Any, text: str) -> float:
    """The share of the answer's non-empty string and number leaves found in ``text`` (1.0: no claims)."""
    claims = [v for _, v in leaves(answer) if not isinstance(v, bool) and isinstance(v, (str, int, float))
              and _norm(v)]
    if not claims:
        return 1.0
    source = _norm(text)
    return sum(_norm(v) in source for v in claims) / len(claims)


def extract_answer(call: Callable[[], Any], text: str) -> Answer:
    """One side's extraction of ``text`` (``call`` returns its ``Structured``) as (canonical JSON, confidence)."""
    from ..errors import InputTooLong, OutputError

    try:
        data = call().data
    except (OutputError, InputTooLong):  # this record failed on this side (a cut answer too: it ended the run)
        return Answer(FAILED, 0.0)
    return Answer(canonical(data), grounded(data, text))
