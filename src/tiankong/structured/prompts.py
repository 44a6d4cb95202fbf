"""Prompts for constrained tasks, in Chinese or English chosen by the input's language."""

from __future__ import annotations

import json
import re
from typing import Any

_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


def language(text: str) -> str:
    """'zh' when CJK characters make up a fair share of the letters, else 'en'."""
    letters = [c for c in text if c.isalpha()]
    if not letters:
        return "en"
    cjk = sum(1 for c in letters if _CJK.match(c))
    return "zh" if cjk / len(letters) >= 0.2 else "en"


EXTRACT = {
    "en": ("Extract information from the user's text as JSON that matches this JSON Schema. "
           "Use only facts stated in the text. Output only the JSON.\nSchema: {schema}"),
    "zh": ("请从用户给出的文本中抽取信息，输出符合以下 JSON Schema 的 JSON。"
           "只使用文本中明确给出的事实，只输出 JSON。\nSchema：{schema}"),
}
GENERATE_JSON = {
    "en": "Answer with JSON that matches this JSON Schema. Output only the JSON.\nSchema: {schema}",
    "zh": "请用符合以下 JSON Schema 的 JSON 回答，只输出 JSON。\nSchema：{schema}",
}
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


def extract_messages(text: str, schema: dict[str, Any], instructions: str | None) -> list[dict[str, Any]]:
    lang = language(text)
    system = EXTRACT[lang].format(schema=compact(schema))
    if instructions:
        system += "\n" + instructions
    return [{"role": "system", "content": system}, {"role": "user", "content": text}]


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
