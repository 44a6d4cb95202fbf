"""redact: PII detection and redaction in Chinese and English.

Deterministic detectors with validators (``pii_rules``) find what has an exact form — ID cards with their
checksum, phones, bank cards with Luhn, e-mail, IPs, URLs, secrets, passports. The model finds what has not —
person names, addresses, organisations: it lists them (schema-constrained JSON) and only strings that occur
verbatim in the text are kept, so the model cannot invent spans. Long texts go to the model in chunks, in
parallel. Rule entities win overlaps.

A small model misses names and addresses it should list (issue 21 row 10), so ``pii_names`` adds rules for what
has a form — Chinese administrative levels and road numbers, US street addresses, organisation words, a name next
to a cue (联系人, 先生, Mr.) — and proposes common Chinese surnames with a given name, and runs of capitalised
English words, as candidates: each one no other entity covers is asked as a yes/no question about its chunk
(``ask``: the chunk read once for all its questions) and redacted at P(yes) >= ``CONFIRM_AT`` — a low bar, since
redaction fails safe. Measured per type and language in ``benchmarks/redact_recall.py``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError
from ..paths import data_dir, installation_secret
from ..structured.combine import gather
from ..structured.flow import Flow
from .ask import Question, ask_flow
from .classify import require_text
from .generate import json_task, string_list
from .pii_code import drop_code_identifiers
from .pii_gazetteer import chinese_place, not_a_name
from .pii_listing import ENUMERATION, listed_name, never_name
from .pii_names import CONFIRM_AT, SINGLE_SURNAMES, name_candidates, name_entities, next_to_cue
from .pii_rules import TYPES, Entity, detect_rules
from .pii_tagger import TAGGER_SCORE
from .pii_tagger import read as read_names
from .prompts import NAMED, task_messages
from .redaction import redact_text

STYLES = ("mask", "placeholder", "hash")
MODEL_TYPES = {"people": "PERSON", "addresses": "ADDRESS", "organizations": "ORG"}
MODEL_CHUNK_CHARS = 1200
MAX_CONFIRM = 24  # candidate questions per text; candidates past it are redacted unasked
CONFIRM_QUESTION = "「{name}」在文中是一个人的姓名吗？"
CONFIRM_QUESTION_EN = 'Is "{name}" the name of a person in the text?'
KNOWN_TYPES = (*TYPES, *MODEL_TYPES.values())
#: the sources of a person the model listed or confirmed (the rules' cue names, 张先生 or Mr. Smith, are not asked)
MODEL_PATH = ("model", "rule+model")
#: a confirmation at or over this P(yes) is not vetoed by the taggers; an unasked candidate (scored 0.5) neither. On
#: the MSRA development sentences every vetoed confirmation sat at P(yes) 0.354-0.370
VETO_BELOW = 0.5
#: the score of a candidate kept unasked (past MAX_CONFIRM, or across two chunks): never vetoed (fail safe)
UNASKED = 0.5
_SPLIT = re.compile(r"(?<=[。！？!?\n])|(?<=\.)\s")


@dataclass
class Redaction:
    text: str
    entities: list[Entity]
    mapping: dict[str, str] = field(default_factory=dict)
    style: str = "placeholder"

    def to_json(self) -> dict[str, Any]:
        return {"text": self.text, "style": self.style, "mapping": self.mapping,
                "entities": [{"start": e.start, "end": e.end, "type": e.type, "text": e.text, "source": e.source,
                              "score": e.score, "validated": e.validated} for e in self.entities]}


def redact_flow(text: str, *, style: str = "placeholder", use_model: bool = True, types: list[str] | None = None,
                salt: str = "", model: str | None = None, name_rules: bool = True) -> Flow[Redaction]:
    """``name_rules=False`` leaves out the PERSON/ADDRESS/ORG rules and the surname questions (for measuring
    what they add: ``benchmarks/redact_recall.py``)."""
    entities = _check(text, style, types)
    if use_model:
        found = yield from gather([_named_flow(chunk, model) for chunk in _chunks(text)])
        listed = [item for items in found for item in items]
        probabilities: dict[tuple[int, int], float | None] = {}
        if name_rules:
            sure, doubtful = split_listing(listed)
            asked = merge(entities, [*locate(text, sure), *name_entities(text)])
            probabilities = yield from ask_candidates(text, asked, model, locate(text, doubtful))
        entities = assemble_names(text, entities, listed, probabilities, name_rules=name_rules)
    elif name_rules:
        entities = merge(entities, name_entities(text))
    return _finish(text, entities, style, types, salt)


def assemble_names(text: str, rules: list[Entity], listed: list[tuple[str, str]],
                   probabilities: dict[tuple[int, int], float | None], *, name_rules: bool = True,
                   tagger: bool = True) -> list[Entity]:
    """The entities of a text from its parts: the validated rules' entities, the model's listing (kind, string),
    the name rules, and each name candidate's P(yes) (None: not asked, kept — fail safe). Rule entities win
    overlaps; candidates are kept at P(yes) >= CONFIRM_AT. With ``name_rules``, only the listed people with a
    name's form (``pii_names.sure_name``) are taken as listed; the others are candidates, asked like the rules'.
    Last, with ``tagger``, the taggers of the ``[ner]`` extra (``pii_tagger``) read the text: a person the
    model listed or confirmed that LAC reads as something else (a common noun, a time, a piece of a word) is dropped
    — or, where LAC reads an organisation in it, redacted as that organisation — and the names they find are added
    where nothing else was found, or widen the persons found that they overlap (:func:`widen`)."""
    if not name_rules:
        return merge(rules, locate(text, listed))
    entities = merge(rules, [*locate(text, split_listing(listed)[0]), *name_entities(text)])
    kept = [Entity(start, end, "PERSON", text[start:end], "rule+model", UNASKED if p is None else round(p, 4))
            for (start, end), p in probabilities.items() if p is None or p >= CONFIRM_AT]
    entities = merge(entities, kept)
    if not tagger:
        return entities
    reading = read_names(text)
    read_right: list[Entity] = []
    organisations: list[Entity] = []
    persons = [(n.start, n.end) for n in reading.names]
    for e in entities:
        if vetoable(text, e) and reading.contradicts(e.start, e.end):
            organisations += [Entity(a, b, "ORG", text[a:b], "tagger", TAGGER_SCORE)
                              for a, b in reading.organisations(e.start, e.end)]
        elif reading.lac and vetoable(text, e) and chinese_place(e.text, SINGLE_SURNAMES) and not any(
                a < e.end and e.start < b for a, b in persons):
            continue  # 香港, 墨西哥人民: a place the model took for a person, and LAC read the text and no person in it
        elif not (vetoable(text, e, latin=True) and not_a_name(text, e.start, e.end, persons)):
            read_right.append(e)
    return merge(widen(text, read_right, reading.names), [*organisations, *reading.names])


def vetoable(text: str, e: Entity, *, latin: bool = False) -> bool:
    """A person the taggers' reading may veto: one the model listed, or a candidate it confirmed under
    ``VETO_BELOW`` — not one it could not be asked about (fail safe), nor one next to a name's cue (联系人：海燕,
    国庆先生: a given name that is also a word). ``latin``: the English veto (``pii_gazetteer``) of a span in Latin
    letters, at any P(yes) — the English confirmation does not separate names (``pii_gazetteer``'s docstring)."""
    if e.type != "PERSON" or e.source not in MODEL_PATH or next_to_cue(text, e.start, e.end):
        return False
    if latin:
        return e.text.isascii() and (e.source == "model" or e.score != UNASKED)
    return e.source == "model" or e.score < VETO_BELOW


def widen(text: str, entities: list[Entity], names: list[Entity]) -> list[Entity]:
    """A tagger's name that overlaps only persons found already takes them in: one person spanning them all
    (source "tagger"). A partial span blocked the fuller name before — 罗庚 (a cue rule: 罗庚先生) kept 华罗庚
    from being redacted whole, 任任 (a confirmed surname pair in 主任任建新) kept 任建新 (issue 40, test3)."""
    out = list(entities)
    for name in names:
        hit = [e for e in out if e.start < name.end and name.start < e.end]
        if not hit or any(e.type != "PERSON" for e in hit):
            continue  # nothing to widen, or it meets another kind of entity: merge() decides as before
        start, end = min(name.start, *(e.start for e in hit)), max(name.end, *(e.end for e in hit))
        if (start, end) not in {(e.start, e.end) for e in hit}:  # else one found person holds the name already
            out = [e for e in out if e not in hit]
            out.append(Entity(start, end, "PERSON", text[start:end], "tagger", TAGGER_SCORE))
    return sorted(out, key=lambda e: e.start)


def redact_rules(text: str, *, style: str = "placeholder", types: list[str] | None = None,
                 salt: str = "") -> Redaction:
    """Rules only: no engine needed. Person names, addresses and organisations only where they have a form the
    rules know (``pii_names``: a cue next to a name, administrative levels and road numbers, organisation words);
    a surname with no cue needs the model to confirm it."""
    return _finish(text, merge(_check(text, style, types), name_entities(text)), style, types, salt)


def confirm_question(name: str) -> str:
    return (CONFIRM_QUESTION_EN if name.isascii() else CONFIRM_QUESTION).format(name=name)


def confirm_candidates(text: str, entities: list[Entity], model: str | None) -> Flow[list[Entity]]:
    """The name candidates kept: P(yes) >= CONFIRM_AT, or not asked (see :func:`ask_candidates`)."""
    probabilities = yield from ask_candidates(text, entities, model)
    return [Entity(start, end, "PERSON", text[start:end], "rule+model", UNASKED if p is None else round(p, 4))
            for (start, end), p in probabilities.items() if p is None or p >= CONFIRM_AT]


def split_listing(listed: list[tuple[str, str]]) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """The model's listing as (taken, doubtful). A listed person is taken when it has a name's form, its title
    taken off (``pii_listing.listed_name``: 克林顿总统 -> 克林顿); dropped when it cannot be a name
    (``pii_listing.never_name``: "second-seeded", a clause); else doubtful — a 0.5B model lists phrases,
    nouns and places among the people (issue 40: 137 such spans on 240 held-back sentences)."""
    taken: list[tuple[str, str]] = []
    doubtful: list[tuple[str, str]] = []
    # several names in one listed string (宋健、陈俊生、胡启立) are several names
    pieces = [(kind, piece) for kind, value in listed
              for piece in (ENUMERATION.split(value) if kind == "PERSON" else [value]) if piece.strip()]
    for kind, value in pieces:
        name = listed_name(value) if kind == "PERSON" else value
        if name is None and never_name(value):
            continue
        if name is None:
            doubtful.append((kind, value))
        else:
            taken.append((kind, name))
    return taken, doubtful


def candidate_spans(text: str, entities: list[Entity], doubtful: list[Entity] | None = None) -> list[Entity]:
    """What is asked about, in order: the doubtful listed people, then the rules' name candidates — each once,
    and only where no entity already found covers it."""
    covered = [(e.start, e.end) for e in entities]
    seen: set[tuple[int, int]] = set()
    candidates = []
    for c in [*(doubtful or []), *name_candidates(text)]:
        if (c.start, c.end) not in seen and all(c.end <= s or c.start >= e for s, e in covered):
            seen.add((c.start, c.end))
            candidates.append(c)
    return candidates


def ask_candidates(text: str, entities: list[Entity], model: str | None, doubtful: list[Entity] | None = None
                   ) -> Flow[dict[tuple[int, int], float | None]]:
    """Each candidate (:func:`candidate_spans`) asked as a yes/no question about its chunk (the chunk read once
    for all its questions): span -> P(yes). Past MAX_CONFIRM questions, or across two chunks (no chunk holds them
    whole), not asked: None (kept, fail safe)."""
    candidates = candidate_spans(text, entities, doubtful)
    asked, unasked = candidates[:MAX_CONFIRM], candidates[MAX_CONFIRM:]
    groups: list[tuple[str, list[Entity]]] = []
    cursor, placed = 0, set[int]()
    for chunk in _chunks(text):
        start = text.find(chunk, cursor)
        start = cursor if start < 0 else start
        cursor = start + len(chunk)
        inside = [c for c in asked if start <= c.start and c.end <= cursor]
        placed.update(id(c) for c in inside)
        if inside:
            groups.append((chunk, inside))
    # a candidate across two chunks ("John A.| Smith") has no chunk to be asked about
    unasked += [c for c in asked if id(c) not in placed]
    flows = [ask_flow(chunk, [Question(str(i), "yes_no", confirm_question(c.text)) for i, c in enumerate(inside)],
                      model=model) for chunk, inside in groups]
    answers = yield from gather(flows)
    probabilities: dict[tuple[int, int], float | None] = {(c.start, c.end): None for c in unasked}
    for (_, inside), found in zip(groups, answers, strict=True):
        for candidate, answer in zip(inside, found.answers, strict=True):
            probabilities[(candidate.start, candidate.end)] = answer.probability or 0.0
    return probabilities


def check_types(types: list[str] | None) -> None:
    """Every requested entity type is one tiankong detects: an unknown one would silently redact nothing."""
    unknown = [t for t in types or [] if not isinstance(t, str) or t.upper() not in KNOWN_TYPES]
    if unknown:
        raise ConfigError(f"unknown entity type(s) {', '.join(map(repr, unknown))}",
                          hint=f"use {', '.join(KNOWN_TYPES)}")


def _check(text: str, style: str, types: list[str] | None) -> list[Entity]:
    require_text(text)
    if style not in STYLES:
        raise ConfigError(f"unknown redaction style {style!r}", hint=f"use one of {', '.join(STYLES)}")
    check_types(types)
    return detect_rules(text)


#: words an English person span may begin with that address or name the person and are not part of the name:
#: the model listed "Call Alice" as a person, and the verb went into [PERSON_1]
#: (not words that are also names: Ping, To Lam, Ring Lardner kept whole)
LEAD_WORDS = frozenset(("call", "contact", "email", "e-mail", "ask", "tell", "phone", "cc", "attn", "dear", "hi",
                        "hello", "hey", "thanks", "thank", "please", "meet"))
_LEAD = re.compile(r"([A-Za-z-]+)(?:[,:]?\s+|[,:]?$)")


def without_lead_words(text: str, entities: list[Entity]) -> list[Entity]:
    """A person span in ASCII letters loses the addressing words it starts with ("Call Alice" → "Alice"); one that
    is nothing else is kept whole (fail safe: a word redacted too many, never a name left)."""
    out = []
    for e in entities:
        start = e.start
        while e.type == "PERSON" and e.text.isascii() and (lead := _LEAD.match(text, start, e.end)) \
                and lead.group(1).casefold() in LEAD_WORDS:
            start = lead.end()
        rest = text[start:e.end]
        out.append(dataclasses.replace(e, start=start, text=rest) if start != e.start and rest.strip() else e)
    return out


def _finish(text: str, entities: list[Entity], style: str, types: list[str] | None, salt: str) -> Redaction:
    entities = drop_code_identifiers(text, entities)  # every path: the name rules, the model's, the taggers'
    entities = without_lead_words(text, entities)
    if types:
        wanted = {t.upper() for t in types}
        entities = [e for e in entities if e.type in wanted]
    key: str | bytes = salt or (_installation_key() if style == "hash" else "")
    redacted, mapping = redact_text(text, entities, style, salt=key)
    return Redaction(redacted, entities, mapping, style)


def installation_key_id() -> str:
    """A one-way fingerprint of ``_installation_key`` (16 hex digits; the key cannot be had from it): a batch
    records it, so a resumed run that would tag with another key says so."""
    return hashlib.sha256(b"tiankong redact-key id\0" + _installation_key()).hexdigest()[:16]


def _installation_key() -> bytes:
    """The hash style's key when the caller gives no salt: this installation's secret (``redact-key``)."""
    path = data_dir() / "redact-key"
    try:
        return installation_secret(path)
    except OSError as exc:  # a read-only or foreign data dir
        raise ConfigError(f"cannot keep the hash style's key in {path}: {exc.strerror}",
                          hint="give --salt (salt=…), or a data dir this user can write (TIANKONG_DATA_DIR)") from None


def _chunks(text: str) -> list[str]:
    chunks, current = [], ""
    for piece in _SPLIT.split(text):
        if current and len(current) + len(piece) > MODEL_CHUNK_CHARS:
            chunks.append(current)
            current = ""
        current += piece
    return [c for c in [*chunks, current] if c.strip()]


def _named_flow(chunk: str, model: str | None) -> Flow[list[tuple[str, str]]]:
    schema = {"type": "object", "properties": {key: string_list(6, 60) for key in MODEL_TYPES},
              "required": list(MODEL_TYPES)}
    result = yield from json_task(task_messages(NAMED, chunk), schema, model)
    return [(MODEL_TYPES[key], value.strip()) for key in MODEL_TYPES for value in result.data.get(key, [])]


def locate(text: str, items: list[tuple[str, str]]) -> list[Entity]:
    """Every verbatim occurrence of each model-listed string (too-short or absent strings are dropped)."""
    spans: list[Entity] = []
    for kind, value in items:
        if len(value) < 2 or not any(ch.isalpha() for ch in value):
            continue
        for match in re.finditer(re.escape(value), text):
            spans.append(Entity(match.start(), match.end(), kind, value, source="model", score=0.8))
    return spans


def merge(rules: list[Entity], model: list[Entity]) -> list[Entity]:
    """Rule entities first; a model entity overlapping a kept entity is dropped (longer model spans win ties)."""
    kept = list(rules)
    for entity in sorted(model, key=lambda e: (-(e.end - e.start), e.start)):
        if all(entity.end <= k.start or entity.start >= k.end for k in kept):
            kept.append(entity)
    return sorted(kept, key=lambda e: e.start)
