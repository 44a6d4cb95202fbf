"""Features of a pair of texts for a dedupe decider (the ``probe-pair`` method): how alike the two halves are.

A dedupe decider is shown a pair as one text (``pair_text``: ``"A: <a>\\nB: <b>"``). A method that reads that text
as a whole (tf-idf, a probe on its vector) learns which *words* go with "same", not whether the halves agree, and
scores at chance on pairs whose halves recur across labels (docs/dedupe.md, "Tuning a decider"). ``probe-pair``
instead fits a logistic regression on a few comparisons of the two halves, all in [0, 1]:

* ``cosine`` — of the embedding part's sentence vectors of A and B (0 where the part cannot read them): the part
  that reads the tuning pairs (``pair_part``: MiniLM, or e5 on Chinese), recorded in the decider (``state["part"]``)
  and read again at use (a decider saved before the part was recorded read MiniLM, and still does);
* ``char`` — Jaccard of the character 3-grams of the normalised texts (``keys.py``);
* ``word`` — Jaccard of the words; ``contain`` — shared words over the shorter text's words;
* ``length`` — the shorter normalised length over the longer;
* ``numbers`` — 1 when both texts hold the same numbers (or none), else 0 ("floor 3" vs "floor 5");
* ``digits`` — the digits of the shared numbers over the digits of the side with fewer (1 when neither has a number,
  0 when only one has): the same phone or order number counts although one side adds others ("854 7th ave. between
  54th and 55th sts. 212/757-2245" vs "854 seventh ave. 212-757-2245": ``numbers`` 0, ``digits`` 1). Measured reason:
  on Restaurant's dev split the gold pairs ``numbers`` missed were mostly of that kind (docs/dedupe.md). Numbers
  are digit runs as written (one inner "," or "." kept): "212 757 2245" and "2127572245" share none.

A decider stores the columns it was fitted on (``state["columns"]``; one saved before ``digits`` existed has the first
six) and reads only those, so adding a column never changes an old decider's answers.
"""

from __future__ import annotations

import re
from typing import Any

from ..errors import ConfigError
from ..structured.flow import Flow
from .keys import KeyOptions

COLUMNS = ("cosine", "char", "word", "contain", "length", "numbers", "digits")
#: the columns of a probe-pair decider saved before ``state["columns"]`` was written
LEGACY_COLUMNS = COLUMNS[:6]
_NUMBER = re.compile(r"\d+(?:[.,]\d+)?")
_WORD = re.compile(r"\w+")


def split_pair(text: str) -> tuple[str, str]:
    """``(a, b)`` of a text written by ``pair_text``; a text that is not a pair is ``(text, "")``."""
    body = text[3:] if text.startswith("A: ") else text
    a, sep, b = body.partition("\nB: ")
    return (a, b) if sep else (text, "")


def _jaccard(x: set[Any], y: set[Any]) -> float:
    return len(x & y) / len(x | y) if x or y else 1.0


def lexical(a: str, b: str, keys: KeyOptions | None = None) -> list[float]:
    """Every column but ``cosine`` for one pair."""
    keys = keys or KeyOptions()
    na, nb = keys.normalise(a), keys.normalise(b)
    grams_a = {na[i:i + 3] for i in range(max(1, len(na) - 2))} if na else set()
    grams_b = {nb[i:i + 3] for i in range(max(1, len(nb) - 2))} if nb else set()
    words_a, words_b = set(_WORD.findall(na)), set(_WORD.findall(nb))
    shorter = min(len(words_a), len(words_b))
    contain = len(words_a & words_b) / shorter if shorter else 0.0
    length = min(len(na), len(nb)) / max(len(na), len(nb)) if na or nb else 1.0
    numbers_a, numbers_b = set(_NUMBER.findall(a)), set(_NUMBER.findall(b))
    numbers = 1.0 if numbers_a == numbers_b else 0.0
    return [_jaccard(grams_a, grams_b), _jaccard(words_a, words_b), contain, length, numbers,
            _digits(numbers_a, numbers_b)]


def _digits(a: set[str], b: set[str]) -> float:
    fewer = min(sum(len(n) for n in a), sum(len(n) for n in b))
    if not a or not b:
        return 1.0 if a == b else 0.0
    return min(1.0, sum(len(n) for n in a & b) / fewer)


def select(rows: Any, columns: list[str] | None) -> Any:
    """The ``columns`` (a decider's ``state["columns"]``; ``None``: :data:`LEGACY_COLUMNS`) of feature ``rows``
    computed with every one of :data:`COLUMNS`."""
    wanted = columns if columns is not None else list(LEGACY_COLUMNS)
    unknown = [c for c in wanted if c not in COLUMNS]
    if unknown:
        raise ConfigError(f"this pair decider reads the columns {unknown}, which this version does not compute",
                          hint="upgrade tiankong, or tune the decider again with this version (tiankong tune dedupe)")
    import numpy as np  # noqa: PLC0415 (the CLI's --help and the registry load this module's callers)

    return np.asarray(rows).reshape(-1, len(COLUMNS))[:, [COLUMNS.index(c) for c in wanted]]


def pair_part(texts: list[str]) -> str:
    """The embedding part whose cosine a decider tuned on these pair texts reads: the multilingual one when any half
    holds CJK text (it reads both; one decider has one cosine scale), else the English one (``parts.record_part``)."""
    from ..models.catalog import EMBEDDING_MODEL
    from .parts import record_part

    halves = (h for t in texts for h in split_pair(t) if h)
    return next((p for p in map(record_part, halves) if p != EMBEDDING_MODEL), EMBEDDING_MODEL)


def unread_pairs(texts: list[str], part: str) -> list[int]:
    """The pair texts ``part`` cannot read — CJK text for a part that does not read it (``parts.record_part``'s
    rule): their cosine is 0 for a decider that reads it."""
    from ..models.catalog import EMBEDDING_MODEL
    from .parts import reads_cjk, record_part

    if reads_cjk(part):
        return []
    return [i for i, t in enumerate(texts) if any(record_part(h) != EMBEDDING_MODEL for h in split_pair(t) if h)]


def pair_features_flow(texts: list[str], part: str | None = "") -> Flow[list[list[float]]]:
    """One row of :data:`COLUMNS` per pair text, the cosine by ``part`` ('': ``pair_part``; None: no cosine, 0 —
    a decider tuned without its part) — 0 too for a pair the part cannot read; the only calls are the part's."""
    from ..structured.part_flows import part_vectors

    pairs = [split_pair(t) for t in texts]
    name = pair_part(texts) if part == "" else part
    cosines = [0.0] * len(pairs)
    unread = set(unread_pairs(texts, name)) if name is not None else set(range(len(pairs)))
    read = [i for i in range(len(pairs)) if i not in unread]
    if read and name is not None:
        vectors, _ = yield from part_vectors([h or " " for i in read for h in pairs[i]], name)
        if vectors is not None:
            for j, i in enumerate(read):
                cosines[i] = max(0.0, _cosine(vectors[2 * j], vectors[2 * j + 1]))
    return [[round(c, 6), *(round(v, 6) for v in lexical(a, b))] for c, (a, b) in zip(cosines, pairs, strict=True)]


def _cosine(u: list[float], v: list[float]) -> float:
    dot = sum(x * y for x, y in zip(u, v, strict=True))
    norm = (sum(x * x for x in u) ** 0.5) * (sum(y * y for y in v) ** 0.5)
    return dot / norm if norm else 0.0
