"""Prompts for constrained tasks, in Chinese or English chosen by the input's language."""

from __future__ import annotations

import json
import re
from typing import Any

_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
#: Chinese, Japanese kana and Korean hangul: text an English-only part cannot read (retrieval's tokens, dedupe's
#: part per record)
CJK_SCRIPT = re.compile(r"[\u3400-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af]")


def language(text: str) -> str:
    """'zh' when CJK characters make up a fair share of the letters, else 'en'."""
    letters = [c for c in text if c.isalpha()]
    if not letters:
        return "en"
    cjk = sum(1 for c in letters if _CJK.match(c))
    return "zh" if cjk / len(letters) >= 0.2 else "en"


_WORD = re.compile(r"[^\W\d_]+(?:['’-][^\W\d_]+)*")  # "e-mail", "don't": one word each
#: the commonest function words of English, and of the other Latin-script languages measured (German, French,
#: Spanish, Italian, Portuguese, Dutch, Indonesian, Turkish, Swedish), none in both lists (no "a", "in", "is", "was",
#: "die", "do"), none of one letter, none that is also a place-name word ("la", "los", "el", "de", "van"). Written
#: here rather than taken from a library: scikit-learn's English list costs 1.1 s of import, and a language detector
#: would be a dependency for one decision (benchmarks/results/retrieval/languages/detect-*.txt: what they separate).
_ENGLISH = frozenset((
    "the", "an", "and", "or", "but", "of", "to", "on", "at", "for", "with", "from", "by", "about", "are", "were",
    "be", "been", "being", "does", "did", "have", "has", "had", "you", "he", "she", "it", "we", "they", "him", "her",
    "us", "them", "my", "your", "his", "its", "our", "their", "this", "that", "these", "those", "what", "which",
    "who", "whom", "whose", "where", "when", "why", "how", "not", "can", "will", "would", "should", "could", "there",
    "here", "if", "than", "then", "too", "very", "all", "any", "some", "just",
))
_OTHER_LATIN = frozenset((
    "der", "das", "und", "ist", "nicht", "ich", "du", "ein", "eine", "einen", "zu", "mit", "sie", "es", "wie", "auf",
    "für", "den", "dem", "sind", "bist", "mein", "dein", "ja", "nein", "auch", "aber", "oder", "wir", "ihr", "sehr",
    "le", "les", "et", "est", "je", "tu", "vous", "pas", "une", "des", "du", "que", "qui", "pour", "dans", "ce",
    "il", "elle", "ne", "sont", "avec", "très", "oui", "non", "en", "un", "una", "por", "para", "con", "yo",
    "lo", "se", "al", "como", "muy", "sí", "pero", "eres", "estoy", "gli", "che", "sono", "sei", "io", "mi", "ti",
    "della", "ciao", "anche", "cosa", "os", "não", "um", "uma", "eu", "você", "em", "muito", "sim", "het", "een",
    "niet", "ik", "je", "jij", "dat", "wat", "zijn", "op", "voor", "te", "ben", "ook", "maar", "yang", "dan", "ini",
    "itu", "aku", "saya", "kamu", "tidak", "apa", "ada", "dengan", "untuk", "ke", "dari", "bisa", "bir", "ve", "bu",
    "sen", "değil", "için", "çok", "var", "och", "är", "jag", "det", "att", "ett", "inte", "som", "på", "med",
    "för", "har", "vad",
))


def english(text: str) -> bool:
    """Whether ``text`` is to be read as English — unless it shows it is not: two words and a tenth of its words
    foreign (letters outside ASCII, or a function word of another Latin-script language), and more foreign words
    than English function words (so "It was founded by José García in 1998." stays English). One-letter words and
    words that are also street and place names (la, los, el, de, van, …) are not counted, so records and keyword
    lists stay English. On the dev halves of chatterbot-corpus's lists (a query and its 40 candidates) this took
    every English list and no list of 21 other languages (Hinglish — Hindi in Latin letters — is read as English;
    detect-dev-2026-12-06.txt)."""
    words = _WORD.findall(text.casefold())
    if not words:
        return True
    foreign = sum(not w.isascii() or w in _OTHER_LATIN for w in words)
    return not (foreign >= max(2, 0.1 * len(words)) and foreign > sum(w in _ENGLISH for w in words))


EXTRACT = {
    "en": ("Extract information from the user's text as JSON that matches this JSON Schema. "
           "Use only facts stated in the text. Output only the JSON.\n{schema}"),
    "zh": ("请从用户给出的文本中抽取信息，输出符合以下 JSON Schema 的 JSON。"
           "只使用文本中明确给出的事实，只输出 JSON。\n{schema}"),
}
#: the extract instruction without the schema (sent when the schema does not fit the engine's context)
EXTRACT_LEAN = {
    "en": "Extract information from the user's text as JSON. Use only facts stated in the text. Output only the JSON.",
    "zh": "请从用户给出的文本中抽取信息，输出 JSON。只使用文本中明确给出的事实，只输出 JSON。",
}
GENERATE_JSON = {
    "en": "Answer with JSON that matches this JSON Schema. Output only the JSON.\n{schema}",
    "zh": "请用符合以下 JSON Schema 的 JSON 回答，只输出 JSON。\n{schema}",
}
#: a schema that says no more than "an object" (``response_format: json_object``): shown whole, small models copied
#: it as their answer (``{"type":"object"}``), so the line asks for an object and the caller's messages say which
GENERATE_JSON_OBJECT = {
    "en": "Answer with a JSON object. Output only the JSON.",
    "zh": "请用一个 JSON 对象回答，只输出 JSON。",
}
#: how the schema is shown in the prompt: whole, as a filled-in example of its shape, or its top-level keys
SCHEMA_LINE = {
    "schema": {"en": "Schema: {text}", "zh": "Schema：{text}"},
    "example": {"en": "Shape of the answer (example): {text}", "zh": "答案格式（示例）：{text}"},
    "keys": {"en": "Keys of the answer: {text}", "zh": "答案的键：{text}"},
}
#: most characters the schema takes in a prompt. The engine's grammar enforces the schema whatever the prompt
#: says, so a long schema is shown as an example or its keys rather than pushing the request past the context
#: (JSONSchemaBench's Kubernetes schemas run to 20 kB; a 2,048-token slot refused them with the schema inside)
SCHEMA_PROMPT_CHARS = 1200
REPAIR = {
    "en": "Your JSON does not match the schema: {errors}\nReply with corrected JSON only.",
    "zh": "你的 JSON 不符合 Schema：{errors}\n请只输出修正后的 JSON。",
}
CHOOSE = {
    "en": "Choose the one option that best fits the text. Options: {options}. Answer with the option only.",
    "zh": "请选择最符合文本的一个选项。选项：{options}。只回答选项本身。",
}
CHOOSE_INDEXED = {
    "en": "Choose the one option that best fits the text. Options:\n{options}\nAnswer with the option's number only.",
    "zh": "请选择最符合文本的一个选项。选项：\n{options}\n只回答选项的编号。",
}
DELIMITED = {
    "en": ("Answer with JSON matching this JSON Schema, between the lines <json> and </json>.\n"
           "Schema: {schema}\nExample of the shape:\n<json>\n{example}\n</json>"),
    "zh": ("请输出符合以下 JSON Schema 的 JSON，放在 <json> 与 </json> 之间。\nSchema：{schema}\n"
           "格式示例：\n<json>\n{example}\n</json>"),
}


def compact(schema: Any) -> str:
    return json.dumps(schema, ensure_ascii=False, separators=(",", ":"))


def schema_prompt(schema: Any, lang: str, budget: int = SCHEMA_PROMPT_CHARS) -> tuple[str, str]:
    """The schema's line in a prompt and its form ("schema", "example" or "keys"), within ``budget``
    characters."""
    whole = compact(schema)
    if len(whole) <= budget:
        return SCHEMA_LINE["schema"][lang].format(text=whole), "schema"
    example = compact(example_for(schema))
    if len(example) <= budget:
        return SCHEMA_LINE["example"][lang].format(text=example), "example"
    properties = schema.get("properties") if isinstance(schema, dict) else None
    keys = ", ".join(properties) if isinstance(properties, dict) else ""
    if len(keys) > budget:
        keys = keys[:budget].rsplit(", ", 1)[0] + ", …"
    return SCHEMA_LINE["keys"][lang].format(text=keys or "—"), "keys"


def extract_messages(text: str, schema: dict[str, Any], instructions: str | None) -> list[dict[str, Any]]:
    messages, _ = extract_prompt(text, schema, instructions)
    return messages


def extract_prompt(text: str, schema: dict[str, Any], instructions: str | None
                   ) -> tuple[list[dict[str, Any]], str]:
    """The extract messages and how the schema appears in them (see :func:`schema_prompt`)."""
    lang = language(text)
    line, form = schema_prompt(schema, lang)
    system = EXTRACT[lang].format(schema=line)
    if instructions:
        system += "\n" + instructions
    return [{"role": "system", "content": system}, {"role": "user", "content": text}], form


def repair_message(errors: list[str], sample: str) -> dict[str, str]:
    return {"role": "user", "content": REPAIR[language(sample)].format(errors="; ".join(errors))}


def choose_messages(text: str, choices: list[str], instructions: str | None,
                    descriptions: dict[str, str] | None = None) -> list[dict[str, Any]]:
    lang = language(text)
    if descriptions:
        options = "; ".join(f"{c} ({descriptions[c]})" if c in descriptions else c for c in choices)
    else:
        options = ", ".join(choices)
    system = CHOOSE[lang].format(options=options)
    if instructions:
        system = instructions + "\n" + system
    return [{"role": "system", "content": system}, {"role": "user", "content": text}]


def choose_indexed_messages(text: str, choices: list[str], instructions: str | None,
                            descriptions: dict[str, str] | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """Numbered options and their numbers as labels (for tokenizers that split labels into bytes)."""
    lang = language(text)
    numbers = [str(i) for i in range(1, len(choices) + 1)]
    described = [f"{c} ({descriptions[c]})" if descriptions and c in descriptions else c for c in choices]
    options = "\n".join(f"{n}. {c}" for n, c in zip(numbers, described, strict=True))
    system = CHOOSE_INDEXED[lang].format(options=options)
    if instructions:
        system = instructions + "\n" + system
    return [{"role": "system", "content": system}, {"role": "user", "content": text}], numbers


def delimited_instruction(schema: dict[str, Any], sample: str) -> str:
    example = json.dumps(example_for(schema), ensure_ascii=False)
    return DELIMITED[language(sample)].format(schema=compact(schema), example=example)


def example_for(schema: Any, depth: int = 0) -> Any:
    """A filled-in example of a schema's shape (for backends without grammar support)."""
    if not isinstance(schema, dict) or depth > 6:
        return None
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        if schema.get(key):
            return example_for(schema[key][0], depth + 1)
    kind = schema.get("type")
    kind = kind[0] if isinstance(kind, list) and kind else kind
    if kind == "object" or "properties" in schema:
        return {name: example_for(sub, depth + 1) for name, sub in (schema.get("properties") or {}).items()}
    if kind == "array":
        return [example_for(schema.get("items", {}), depth + 1)]
    return {"string": "…", "integer": 0, "number": 0.0, "boolean": False, "null": None}.get(str(kind), "…")
