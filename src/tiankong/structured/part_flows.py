"""Flows that ask a retrieval part (an installed embedding model on its own engine, ``engine/parts.py``).

Shared by the tasks (rerank, compress) and by deciders (the ``probe-part`` method): texts cut to the part's
context by its own tokenizer, and sentence vectors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..engine.parts import PartMissing
from ..models.catalog import embedding_part, find_entry
from .flow import Call, Flow
from .prompts import english, language

#: a flow's ``part`` argument that means "the catalog's embedding part for the texts' language" (``part_for``)
AUTO_PART = "auto"

#: BERT-family models count their [CLS] and [SEP] among the context's positions
_SPECIAL_TOKENS = 2
#: texts sent in one embeddings request (llama-server embeds them in one batch)
EMBED_BATCH = 32


def fit_texts(texts: list[str], part: str) -> Flow[tuple[list[str] | None, str]]:
    """Texts cut to the part's context (by its own tokenizer); ``(None, reason)`` when the part is unavailable.
    The second value lists the indices of the texts that were cut, comma-separated. Only texts with more
    characters than the context has tokens are tokenized (every token covers at least one character)."""
    try:
        limit = yield from part_context(part)
    except PartMissing as exc:  # the reason names the fix (``tiankong models pull …``)
        return None, f"{part}: {exc.message}" + (f"; {exc.hint}" if exc.hint else "")
    except Exception as exc:  # noqa: BLE001 - the part's engine did not answer: the task goes on without it
        return None, f"{part}: {exc}"
    long = [i for i, t in enumerate(texts) if len(t) > limit]
    answers = yield [Call("POST", "/tokenize", {"content": texts[i], "add_special": False}, part=part) for i in long]
    failed = next((a for a in answers if isinstance(a, Exception)), None)
    if failed is not None:
        return None, f"{part}: {failed}"
    fitted, cut = list(texts), []
    for index, answer in zip(long, answers, strict=True):
        n = len(answer["tokens"])
        text = texts[index]
        while n > limit and text:
            text = text[: max(1, int(len(text) * limit / n * 0.97))]
            (again,) = yield [Call("POST", "/tokenize", {"content": text, "add_special": False}, part=part)]
            if isinstance(again, Exception):
                return None, f"{part}: {again}"
            n = len(again["tokens"])
        if text != texts[index]:
            fitted[index] = text
            cut.append(index)
    return fitted, ",".join(map(str, cut))


_CONTEXT: dict[str, int] = {}


def part_context(part: str) -> Flow[int]:
    """Tokens one text may have on the part (its per-slot context less the special tokens)."""
    if part not in _CONTEXT:
        props, special = yield [Call("GET", "/props", None, part=part),
                                Call("POST", "/tokenize", {"content": "", "add_special": True}, part=part)]
        for answer in (props, special):
            if isinstance(answer, Exception):
                raise answer
        n_ctx = int(props.get("default_generation_settings", {}).get("n_ctx") or 512)
        specials = len(special["tokens"]) if isinstance(special, dict) else _SPECIAL_TOKENS
        _CONTEXT[part] = n_ctx - max(specials, _SPECIAL_TOKENS)
    return _CONTEXT[part]


def sample_text(texts: Sequence[str]) -> str:
    """What a language is told from: the first 300 characters of 50 texts spread over all of them (the first 50
    alone read a list of short English lines and missed the Chinese passages after them)."""
    step = max(1, -(-len(texts) // 50))
    return " ".join(t[:300] for t in texts[::step][:50])


def texts_language(texts: Sequence[str]) -> str:
    """'zh', 'en' (``prompts.english``) or 'other'."""
    sample = sample_text(texts)
    return "zh" if language(sample) == "zh" else "en" if english(sample) else "other"


def part_for(texts: Sequence[str]) -> str:
    """The catalog's embedding part for the language of ``texts`` (``models.catalog.embedding_part``): English's
    for English, the multilingual one for Chinese and every other language."""
    return embedding_part(texts_language(texts))


def part_for_query(query: str, documents: Sequence[str]) -> str:
    """The part that compares ``query`` with ``documents``: the multilingual one when the query is not English
    (Chinese, Korean, Russian, Spanish, …), whatever the documents are (a Chinese question over English passages
    went to the English-only part: the answer fell out of the top 3), else ``part_for`` of them all. A short
    English or keyword query ("XJ-900 manual") reads as English."""
    asked = texts_language([query])
    return embedding_part(asked) if asked != "en" else part_for([query, *documents])


def prefixed(texts: Sequence[str], part: str, queries: int | None = None) -> list[str]:
    """``texts`` as the part was trained to read them: the first ``queries`` (all when ``None``: texts compared
    with each other) after its query prefix, the rest after its passage prefix (E5: "query: ", "passage: ");
    trailing whitespace stripped (llama.cpp's SentencePiece tokenizer drops it, the model's own kept a last '▁':
    the spike measured cosine 0.975–0.987 against the model's own vector with it, 0.9999 without)."""
    entry = find_entry(part)
    head = len(texts) if queries is None else queries
    q, p = (entry.query_prefix, entry.passage_prefix) if entry is not None else ("", "")
    return [(q if i < head else p) + (t.rstrip() or t) for i, t in enumerate(texts)]


def part_vectors(texts: list[str], part: str, *, queries: int | None = None
                 ) -> Flow[tuple[list[list[float]] | None, str]]:
    """Every text's sentence vector from the part (cut to its context, after the part's prefixes: ``prefixed``);
    ``(None, reason)`` without the part."""
    fitted, cut = yield from fit_texts(prefixed(texts, part, queries), part)
    if fitted is None:
        return None, cut
    batches = [fitted[i:i + EMBED_BATCH] for i in range(0, len(fitted), EMBED_BATCH)]
    answers: list[Any] = yield [Call("POST", "/v1/embeddings", {"input": b}, part=part) for b in batches]
    vectors: list[list[float]] = []
    for answer in answers:
        if isinstance(answer, Exception):
            return None, f"{part}: {answer}"
        vectors += [item["embedding"] for item in sorted(answer["data"], key=lambda d: d["index"])]
    return vectors, cut
