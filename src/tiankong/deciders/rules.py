"""Prompt-injection heuristics (English and Chinese): exact phrasings that explain themselves.

They are ``guard``'s reasons and, as one feature column each, part of the shipped guard decider
(``tfidf-rules``), which learns how much each is worth next to the text's n-grams.
"""

from __future__ import annotations

import re

#: (weight, reason, pattern)
RULES: list[tuple[float, str, re.Pattern[str]]] = [(w, reason, re.compile(p, re.I)) for w, reason, p in [
    (0.9, "asks to ignore earlier instructions",
     r"\b(ignore|disregard|forget|override|bypass)\b.{0,40}\b(previous|prior|above|earlier|all|your|the)\b.{0,30}"
     r"\b(instructions?|prompts?|rules?|directions?|guidelines?|context)\b"),
    (0.9, "asks to ignore earlier instructions (zh)",
     r"(忽略|无视|忘记|忘掉|跳过|不要理会).{0,12}(之前|以上|上面|前面|先前|所有|全部|你的).{0,8}(指令|指示|规则|提示|要求|设定|命令)"),
    (0.8, "asks for the system prompt or hidden instructions",
     r"\b(reveal|show|print|repeat|output|tell me|leak)\b.{0,40}\b(system prompt|hidden (prompt|instructions)|"
     r"initial (prompt|instructions)|your (instructions|prompt|rules))"),
    (0.8, "asks for the system prompt (zh)",
     r"(输出|显示|告诉我|泄露|打印|重复).{0,12}(系统提示词|系统提示|系统指令|初始指令|隐藏指令)"),
    (0.7, "role-play to escape the rules",
     r"\b(you are now|from now on,? you are|pretend (to be|you are)|act as)\b.{0,60}\b(DAN|unrestricted|"
     r"jailbroken|no (rules|restrictions|limits)|without (any )?(rules|restrictions|filters))"),
    (0.7, "role-play to escape the rules (zh)",
     r"(你现在是|从现在起你是|假装你是|扮演).{0,30}(不受限制|没有限制|无限制|越狱|没有任何规则)"),
    (0.7, "developer/jailbreak mode", r"\b(developer mode|jailbreak|DAN mode|god mode)\b|开发者模式|越狱模式"),
    (0.6, "fake conversation or system markers",
     r"<\|im_start\|>|<\|system\|>|\[/?INST\]|^\s*#{2,}\s*(system|instruction)s?\s*:|^\s*system\s*:", ),
    (0.4, "long encoded payload", r"[A-Za-z0-9+/]{120,}={0,2}"),
]]


def heuristics(text: str) -> tuple[float, list[str]]:
    """The strongest matching rule's weight and every matching rule's reason, naming the rule and quoting the
    span it matched (``asks to ignore earlier instructions: "Ignore all previous instructions" at 0-32``)."""
    hits = [(weight, reason, found) for weight, reason, pattern in RULES if (found := pattern.search(text))]
    return max((w for w, _, _ in hits), default=0.0), [f"rule: {reason}: {_quote(m.group(0))} at {m.start()}-{m.end()}"
                                                        for _, reason, m in hits]


def _quote(span: str) -> str:
    span = " ".join(span.split())
    return '"' + (span if len(span) <= 80 else span[:77] + "...") + '"'
