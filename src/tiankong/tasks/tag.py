"""tag: keywords and metadata for a document, to a default schema or the caller's own."""

from __future__ import annotations

from typing import Any

from ..structured.constraints import schema_constraint
from ..structured.flow import Flow, Structured, constrained_flow
from ..structured.prompts import compact, english, language
from .classify import require_text
from .compress import compress_flow
from .generate import ANTI_LOOP, string_list, unique
from .prompts import TAG

MAX_TAG_CHARS = 6000
#: the tokens ``MAX_TAG_CHARS`` of English make (about 4 characters a token); a Chinese character is up to 1.7
#: tokens (the test model's tokenizer): counted in characters, 4,320 Chinese characters (7,317 tokens) were sent
#: whole and overflowed a 4,096-token context
MAX_TAG_TOKENS = MAX_TAG_CHARS // 4


def estimated_tokens(text: str) -> float:
    """A generous token count without a tokenizer: 1.7 a CJK character, one per 4 other characters."""
    cjk = sum(1 for char in text if "\u3040" <= char <= "\u9fff" or "\uac00" <= char <= "\ud7af")
    return 1.7 * cjk + (len(text) - cjk) / 4


def default_tag_schema(max_keywords: int = 8, lang: str | None = None) -> dict[str, Any]:
    """The default schema; ``lang``: the text's language as tiankong reads it, written for the model (the 135M
    model wrote "zh" for a long English text)."""
    return {"type": "object", "properties": {
        "keywords": string_list(max_keywords, 40, 1),
        "topic": {"type": "string", "minLength": 1, "maxLength": 60},
        "language": {"const": lang} if lang else {"enum": ["zh", "en", "other"]},
    }, "required": ["keywords", "topic", "language"]}


def text_language(text: str) -> str | None:
    """zh, en or other, as the default schema's ``language`` says, where the letters settle it: Han without kana is
    zh (Japanese writes kanji too), Latin that ``english`` reads as English is en, kana, Hangul, Cyrillic or no
    letters at all are other; None (the model chooses) for Latin letters ``english`` does not read as English
    (French, or "The café in São Paulo")."""
    counts = {"han": 0, "kana": 0, "latin": 0, "other": 0}
    for char in text:
        if "\u4e00" <= char <= "\u9fff" or "\u3400" <= char <= "\u4dbf":
            counts["han"] += 1
        elif "\u3040" <= char <= "\u30ff":
            counts["kana"] += 1
        elif char.isalpha():
            counts["latin" if char.isascii() or "\u00c0" <= char <= "\u024f" else "other"] += 1
    if not any(counts.values()):
        return "other"
    if counts["han"] and not counts["kana"] and counts["han"] >= max(counts["latin"], counts["other"]):
        return "zh"
    if counts["latin"] > counts["han"] + counts["kana"] + counts["other"]:
        return "en" if english(text) else None  # Latin letters, not read as English: the model's choice
    return "other"


def tag_flow(text: str, *, schema: Any = None, max_keywords: int = 8,
             model: str | None = None) -> Flow[Structured[Any]]:
    require_text(text)
    constraint, plan = schema_constraint(schema if schema is not None else
                                         default_tag_schema(max_keywords, text_language(text)))
    lang = language(text)
    system = TAG[lang] + ("\nSchema: " if lang == "en" else "\nSchema：") + compact(plan.schema)
    source = text
    if estimated_tokens(text) > MAX_TAG_TOKENS:  # a long document is tagged from its key points, not its first pages
        compressed = yield from compress_flow(text, budget_tokens=1024, model=model)
        source = compressed.text
    messages = [{"role": "system", "content": system}, {"role": "user", "content": source}]
    result = yield from constrained_flow(messages, constraint, model=model, options=ANTI_LOOP)
    if schema is None and isinstance(result.data, dict) and isinstance(result.data.get("keywords"), list):
        # the small model repeated a keyword ("type", "type", …): each once, in order
        result.data["keywords"] = unique([str(k) for k in result.data["keywords"]])
    return result
