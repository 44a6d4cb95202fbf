"""Prompt-injection heuristics (English and Chinese): exact phrasings that explain themselves.

They are ``guard``'s reasons and, as one feature column each, part of the shipped guard decider
(``tfidf-rules``), which learns how much each is worth next to the text's n-grams.

``READER_RULES`` are of another kind: an instruction *addressed to the model that reads a document* — a note to
"any AI processing this text", a bracketed ``[INSTRUCTION: …]`` or ``AI instructions:`` block, "your new task",
"ignore the above", "do not tell the user", a tool call to make "before you reply". A user's own ask never needs
them; an injection hidden in a document, page or tool result does (Greshake et al. 2023, "Not what you've signed
up for"). The guard's decider never sees such injections in training (they are its held-out family), so it cannot
learn them; these rules lift a text they match to at least ``flag`` (``tasks.guard``), with the span as the
reason. They are not decider columns, so artifacts tuned with ``tfidf-rules`` keep their feature count. Forms a
user writes in their own ask ("in your summary, include the dates", "when translating, keep the names") are
deliberately left out, and so are user requests a review found the first version matched ("without telling
anyone", "if you are an AI engineer", "ignore the above typo": tests/unit/test_guard_rules.py); matched on the
benign asks over the train and val documents, chit-chat and near-miss prompts of benchmarks/guard_data.py: 0 of
9,929 (docs/deciders.md).
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


_AI = (r"(?:ai|a\.i\.|language model|llm|chatbot|chat ?gpt|gpt|copilot|(?:ai |search )?summari[sz]er|ai assistant|"
       r"ai agent|ai model|ai system)s?")

#: (reason, pattern): instructions addressed to the model that reads a document
READER_RULES: list[tuple[str, re.Pattern[str]]] = [(reason, re.compile(p, re.I)) for reason, p in [
    # every repetition is bounded and no two adjacent pieces match the same characters (no ReDoS on megabytes)
    ("addresses the AI that reads the text",
     rf"\b(?:note|message|attention|reminder|directive)\b[^.\n]{{0,20}}\b(?:to|for)[ \t]{{1,3}}"
     rf"(?:(?:any|all|the|every|this)[ \t]{{1,3}})?(?:\w{{1,30}}[ \t]{{1,3}})?{_AI}(?:[ \t]{{1,3}}ai)?[ \t]{{0,3}}"
     rf"(?::|\]|,|\b(?:reading|processing|parsing|summari[sz]ing|that|which|who)\b)"
     rf"|\bif you are an? (?:ai|artificial intelligence|language model|llm|chatbot)(?: \w{{1,20}})? "
     rf"(?:reading|processing|summari[sz]ing|parsing|analy[sz]ing) (?:this|these)\b"
     rf"|\b(?:when|if) (?:an? |the |any )?{_AI} (?:reads?|processe?s|summari[sz]es|parses) (?:this|these)\b"
     rf"|\b{_AI} (?:reading|processing|summari[sz]ing|parsing) (?:this|these)\b"
     r"|\[[ \t]{0,3}(?:ai|assistant|system|llm)[ \t]{0,3}:"
     r"|\[[ \t]{0,3}(?:ai|assistant|system|agent|llm)[ \t]{1,3}(?:instructions?|note|override)\b"
     r"|\[[ \t]{0,3}instructions?[ \t]{0,3}:"
     r"|\b(?:ai|llm|hidden) instructions?\b[^:\n]{0,30}:"),
    ("gives the reader a new task",
     r"\byour (?:new|real|actual) (?:task|instructions?|objective) (?:is|are)\b"
     r"|\boverride (?:your|all) (?:previous |prior |original )?(?:instructions?|rules?|task|guidelines?|scoring|"
     r"rubric|summari[sz]ation|programming|directives?)\b"
     r"|\b(?:ignore|disregard|forget) (?:everything|all of the above|all the text) above\b"
     r"|\b(?:ignore|disregard|forget) (?:the )?above(?: instructions?| text| content)?[.,:;!]"
     r"|\b(?:ignore|disregard) the (?:summari[sz]ation|translation|original) (?:task|request)\b"),
    ("asks to keep it from the user",
     r"\b(?:do not|don't|never) (?:tell|inform|mention|reveal|disclose|alert|notify)\b[^.\n]{0,30}"
     r"\b(?:the user|the reader)\b"),
    ("a tool call hidden in the text",
     r"\b(?:call|invoke|execute)[ \t]{1,3}`?[a-z]{1,30}_[a-z_]{1,40}`?[^\n]{0,80}?\b(?:before|after) (?:you )?"
     r"(?:reply|replying|respond|responding|answer|answering)\b"),
    ("addresses the AI that reads the text (zh)",
     r"(?:致|给)(?:所有|任何)?(?:AI|ＡＩ|人工智能|语言模型|大模型)(?:助手|模型|系统)?[：:，,]"
     r"|(?:致|给)(?:所有|任何)?(?:正在)?(?:阅读|处理|总结|解析|翻译)(?:本文|此文|本邮件|此邮件|这段文字|这封邮件|本文件)?"
     r"的(?:AI|ＡＩ|人工智能|语言模型|大模型)(?:助手|模型|系统)?[：:，,]"
     r"|如果你是(?:一个)?(?:AI|ＡＩ|人工智能|语言模型|大模型)(?:助手|模型|系统)?(?:[，,：:]|在(?:阅读|处理|总结))"
     r"|[【\[][ \t]{0,3}(?:AI|ＡＩ|人工智能|系统|助手)[ \t]{0,3}(?:指令|指示)[ \t]{0,3}[：:]"
     r"|(?:阅读|处理|总结|解析|翻译)(?:此|这|本)(?:段|篇|份|封)?(?:文本|文字|内容|邮件|文档|页面|网页)的"
     r"(?:AI|ＡＩ|人工智能|语言模型|大模型)"),
    ("gives the reader a new task (zh)",
     r"你(?:的)?(?:新|真正的)(?:任务|指令)是"
     r"|(?:忽略|无视)(?:以上|上面|上述)(?:所有|全部)?(?:内容|指令|指示|要求|信息)"
     r"|无视(?:以上|上面|上述)的(?:所有|全部)?(?:内容|指令|指示|要求|信息)"
     r"|(?:^|[。！!；;，,\n]|请|立即|现在|直接)(?:忽略|无视)(?:用户|使用者)的(?:请求|要求|指令|问题)"),
    ("asks to keep it from the user (zh)", r"(?:不要|别|切勿)(?:告诉|透露|提及|通知)[^。\n]{0,6}(?:用户|读者)"),
]]


def reader_instructions(text: str) -> list[str]:
    """Every ``READER_RULES`` match as a reason naming the rule and quoting the span (empty: none found)."""
    return [f"rule: {reason}: {_quote(m.group(0))} at {m.start()}-{m.end()}"
            for reason, pattern in READER_RULES if (m := pattern.search(text))]


def heuristics(text: str) -> tuple[float, list[str]]:
    """The strongest matching rule's weight and every matching rule's reason, naming the rule and quoting the
    span it matched (``asks to ignore earlier instructions: "Ignore all previous instructions" at 0-32``)."""
    hits = [(weight, reason, found) for weight, reason, pattern in RULES if (found := pattern.search(text))]
    return max((w for w, _, _ in hits), default=0.0), [f"rule: {reason}: {_quote(m.group(0))} at {m.start()}-{m.end()}"
                                                        for _, reason, m in hits]


def _quote(span: str) -> str:
    span = " ".join(span.split())
    return '"' + (span if len(span) <= 80 else span[:77] + "...") + '"'
