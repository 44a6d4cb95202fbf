"""guard: prompt-injection and policy screening — heuristics plus the model's probability.

Heuristic rules (English and Chinese) catch the well-known phrasings exactly and explain themselves; the
model's P(injection) catches paraphrases. The combined score is a noisy-OR of the two, so either strong
signal is enough: ``block`` at ``block_at``, ``flag`` at ``flag_at``, else ``allow``. Optional policies
(plain-language descriptions of what is not allowed) are each a yes/no question.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError
from ..structured.combine import gather
from ..structured.flow import Flow
from ..structured.prompts import language
from .classify import require_text, yes_probability
from .prompts import INJECTION

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


@dataclass
class GuardVerdict:
    action: str
    score: float
    model_probability: float
    heuristic_score: float
    reasons: list[str] = field(default_factory=list)
    policies: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"action": self.action, "score": round(self.score, 4),
                "model_probability": round(self.model_probability, 4),
                "heuristic_score": self.heuristic_score, "reasons": self.reasons, "policies": self.policies}


def heuristics(text: str) -> tuple[float, list[str]]:
    """The strongest matching rule's weight and every matching rule's reason."""
    hits = [(weight, reason) for weight, reason, pattern in RULES if pattern.search(text)]
    return max((w for w, _ in hits), default=0.0), [reason for _, reason in hits]


def guard_flow(text: str, *, flag_at: float = 0.5, block_at: float = 0.85,
               policies: list[str] | None = None) -> Flow[GuardVerdict]:
    require_text(text)
    if not 0.0 < flag_at <= block_at <= 1.0:
        raise ConfigError("thresholds must satisfy 0 < flag_at <= block_at <= 1")
    checks = list(policies or [])
    if any(not isinstance(p, str) or not p.strip() for p in checks):
        raise ConfigError("policies must be non-empty strings describing what is not allowed")
    lang = language(text)
    questions = [[{"role": "system", "content": INJECTION[lang]}, {"role": "user", "content": text}]]
    questions += [[{"role": "system", "content": _policy_question(p, lang)}, {"role": "user", "content": text}]
                  for p in checks]
    probabilities = yield from gather([yes_probability(q) for q in questions])
    model_p, policy_p = probabilities[0], dict(zip(checks, probabilities[1:], strict=True))
    rule_score, reasons = heuristics(text)
    score = 1.0 - (1.0 - rule_score) * (1.0 - model_p)
    if model_p >= flag_at:
        reasons.append(f"model judges it an injection attempt (p={model_p:.2f})")
    reasons += [f"may violate policy: {p} (p={v:.2f})" for p, v in policy_p.items() if v >= flag_at]
    worst = max([score, *policy_p.values()])
    action = "block" if worst >= block_at else "flag" if worst >= flag_at else "allow"
    return GuardVerdict(action, score, model_p, rule_score, reasons, policy_p)


def _policy_question(policy: str, lang: str) -> str:
    if lang == "zh":
        return f"以下用户输入是否违反这条规定：{policy}？请回答 yes 或 no。"
    return f"Does the following user input violate this policy: {policy}? Answer yes or no."
