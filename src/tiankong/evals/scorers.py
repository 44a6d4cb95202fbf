"""Scorers: how close an output is to the item's reference, as a score in [0, 1].

* ``exact``       normalised text equality (case-folded, whitespace collapsed, punctuation at either end dropped).
* ``label``       the chosen label (classify, and every task whose default scorer is label) equals the
                  reference; for a free-text answer: the reference
                  occurs in it as a whole word and no other of the item's ``labels`` does.
* ``json_fields`` field-level match: the share of the reference's leaf fields (nested objects and lists
                  flattened to paths) whose value the output has at the same path (strings normalised,
                  numbers compared as numbers). An output that does not validate against the item's
                  schema scores 0.
* ``key_points``  the share of key points the output contains (normalised substring; a key point may be a
                  list of alternatives, any of which counts). Passing needs all of them by default.
* ``similarity``  token F1 between output and reference (SQuAD-style bag of words: case-folded, punctuation
                  removed; every CJK character is its own token). Passing needs 0.3 by default.

An item passes when its score reaches its threshold (``threshold``; defaults in ``format.DEFAULT_THRESHOLDS``).
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections import Counter
from typing import Any

import jsonschema

from ..tasks.specs import TASK_SPECS
from .format import EvalItem

_TOKEN = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]|[^\W_]+", re.UNICODE)
_TRAILING = ".。!！?？,，;；:：\"'`*"


def normalize(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = unicodedata.normalize("NFKC", text).casefold()
    return " ".join(text.split()).strip(_TRAILING + " ")


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(unicodedata.normalize("NFKC", text).casefold())


def token_f1(output: str, reference: str) -> float:
    out, ref = tokens(output), tokens(reference)
    if not out or not ref:
        return float(out == ref)
    common = sum((Counter(out) & Counter(ref)).values())
    if not common:
        return 0.0
    precision, recall = common / len(out), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def output_text(item: EvalItem, output: Any) -> str:
    """The text an output is judged (and its length measured) by."""
    if output is None:
        return ""
    if isinstance(output, str):
        return output
    spec = TASK_SPECS.get(item.task)
    if isinstance(output, dict) and spec is not None and spec.answer_text is not None:
        text = spec.answer_text(output)  # the task's answer in words: classify's label, a summary …
        if text is not None:
            return text
    return json.dumps(output, ensure_ascii=False, sort_keys=True)


def score(item: EvalItem, output: Any) -> float:
    """The item's score in [0, 1] (0 for a missing output)."""
    if output is None:
        return 0.0
    if item.scorer == "json_fields":
        return _json_fields(item, output)
    text = output_text(item, output)
    if item.scorer == "exact":
        return float(normalize(text) == normalize(item.reference))
    if item.scorer == "label":
        return _label(item, text)
    if item.scorer == "key_points":
        points = item.reference
        return sum(_contains(text, point) for point in points) / len(points)
    return token_f1(text, str(item.reference))


def _label(item: EvalItem, text: str) -> float:
    chosen = item.task != "chat" and item.spec.scorer == "label"  # the answer is one of the labels
    if chosen or normalize(text) == normalize(item.reference):
        return float(normalize(text) == normalize(item.reference))
    reference = str(item.reference)
    found = {label for label in {*(item.labels or []), reference} if _word_in(label, text)}
    return float(found == {reference})


def _word_in(word: str, text: str) -> bool:
    pattern = r"(?<![^\W_])" + re.escape(normalize(word)) + r"(?![^\W_])"
    return re.search(pattern, normalize(text)) is not None


def _contains(text: str, point: str | list[str]) -> bool:
    options = point if isinstance(point, list) else [point]
    haystack = normalize(text)
    return any(normalize(option) in haystack for option in options)


def _json_fields(item: EvalItem, output: Any) -> float:
    if isinstance(output, str):
        try:
            output = json.loads(output)
        except ValueError:
            return 0.0
    if item.output_schema is not None:
        try:
            jsonschema.validate(output, item.output_schema)
        except (jsonschema.ValidationError, jsonschema.SchemaError):
            return 0.0
    expected = dict(leaves(item.reference))
    got = dict(leaves(output))
    hits = sum(1 for path, value in expected.items() if path in got and same_value(value, got[path]))
    return hits / len(expected) if expected else 0.0


def leaves(value: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """Leaf values by JSON-pointer-like path (``/a/0/b``); an empty object or list is a leaf itself."""
    if isinstance(value, dict) and value:
        return [leaf for key, child in value.items() for leaf in leaves(child, f"{prefix}/{key}")]
    if isinstance(value, list) and value:
        return [leaf for index, child in enumerate(value) for leaf in leaves(child, f"{prefix}/{index}")]
    return [(prefix, value)]


def same_value(expected: Any, got: Any) -> bool:
    """One expected leaf value against the answer's: booleans by identity, numbers within rounding, strings
    after :func:`normalize`."""
    if isinstance(expected, bool) or isinstance(got, bool):
        return expected is got
    if isinstance(expected, (int, float)) and isinstance(got, (int, float)):
        return abs(expected - got) <= 1e-9 * max(1.0, abs(expected))
    if isinstance(expected, str) and isinstance(got, str):
        return normalize(expected) == normalize(got)
    return bool(expected == got)
