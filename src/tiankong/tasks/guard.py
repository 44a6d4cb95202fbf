"""guard: prompt-injection and policy screening — a trained decider, heuristics as its features and reasons.

The default decider is the shipped ``guard`` (``tiankong deciders show guard``): TF-IDF word and character
n-grams plus one column per heuristic rule, logistic regression, trained on openly licensed injection and
jailbreak prompts and benign requests over real documents (docs/deciders.md lists the sources). It needs no
engine call. Its P(injection) is the score — of the whole text and of every window of it (``windows``: a short
injection inside a long document is read on its own, not diluted by the document), the highest: ``block`` at
``block_at``, ``flag`` at ``flag_at`` (defaults from the decider, chosen on a validation split of benign requests
over real documents), else ``allow``. The reasons name what was found: each matching rule with the span it
matched, and the passage the decider scored highest. An instruction addressed to the model that reads a document
(``rules.READER_RULES``: the injection family the decider is never trained on) lifts the score to at least
``flag_at`` (``lifted``). ``use_model=True`` adds the chat model's own yes/no
judgement (noisy-OR); ``decider=None`` is the old heuristics + model score. Optional
policies (plain-language descriptions of what is not allowed) are each a yes/no question to the model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..deciders.registry import Decider
from ..deciders.rules import heuristics, reader_instructions
from ..errors import ConfigError
from ..structured.combine import gather, pure
from ..structured.flow import Flow
from ..structured.prompts import language
from .ask import Question, ask_flow
from .classify import require_text, yes_probability
from .prompts import INJECTION

MAX_POLICIES = 16
#: the decider reads texts longer than WINDOW characters also in windows of about WINDOW, half-overlapping
WINDOW = 600
#: half-overlapping windows cover texts up to about 1.2 MB (256 left 221-character gaps unread past ~154 KB, where
#: an injection across a seam was flagged, not blocked); 200 KB reads in about 2 s here
MAX_WINDOWS = 4096


def windows(text: str) -> list[tuple[int, int]]:
    """(start, end) of the windows the decider also reads: about ``WINDOW`` characters, half-overlapping, cut at
    whitespace; none for a text that fits one window; at most ``MAX_WINDOWS`` (wider steps for huge texts)."""
    if len(text) <= WINDOW:
        return []
    step = max(WINDOW // 2, -(-(len(text) - WINDOW) // (MAX_WINDOWS - 1)))
    spans = []
    for start in range(0, len(text) - WINDOW // 2, step):
        cut = text.rfind(" ", start, start + 40) if start else 0
        begin = cut + 1 if cut > 0 else start
        end = min(len(text), begin + WINDOW)
        spans.append((begin, end))
        if end == len(text):
            break
    return spans[:MAX_WINDOWS]


def decider_texts(text: str) -> list[str]:
    """What the decider scores for ``text``: the text itself, then each window."""
    return [text, *(text[a:b] for a, b in windows(text))]


@dataclass
class GuardVerdict:
    """``verdict`` (allow / flag / block), the score it came from, and why."""

    verdict: str
    score: float
    reasons: list[str] = field(default_factory=list)
    heuristic_score: float = 0.0
    decider: str | None = None
    decider_probability: float | None = None
    model_probability: float | None = None
    policies: dict[str, float] = field(default_factory=dict)

    @property
    def action(self) -> str:
        """Deprecated alias of ``verdict`` (kept for one release)."""
        return self.verdict

    def to_json(self) -> dict[str, Any]:
        # the probabilities whole, as the library holds them: rounded, a score just under a threshold read
        # above it when a caller compared it again (0.95775 → 0.9578 ≥ block_at 0.9578)
        data: dict[str, Any] = {"verdict": self.verdict, "score": self.score, "reasons": self.reasons,
                                "action": self.verdict, "heuristic_score": self.heuristic_score,
                                "policies": self.policies}
        if self.decider is not None:
            data["decider"] = self.decider
            data["decider_probability"] = float(self.decider_probability or 0.0)
        if self.model_probability is not None:
            data["model_probability"] = self.model_probability
        return data


def _thresholds(decider: Decider | None, flag_at: float | None, block_at: float | None) -> tuple[float, float]:
    params = decider.params if decider is not None else {}
    flag = float(params.get("flag_at", 0.5)) if flag_at is None else flag_at
    block = float(params.get("block_at", 0.85)) if block_at is None else block_at
    if not 0.0 < flag <= block <= 1.0:
        raise ConfigError("thresholds must satisfy 0 < flag_at <= block_at <= 1")
    return flag, block


def positive_label(decider: Decider) -> str:
    label = str(decider.params.get("positive", "injection"))
    if label not in decider.labels:
        raise ConfigError(f"decider {decider.ref} has no label {label!r} to screen with (labels: {decider.labels})",
                          hint="tune the guard decider on labels injection,benign")
    return label


def guard_flow(text: str, *, decider: Decider | None = None, flag_at: float | None = None,
               block_at: float | None = None, policies: list[str] | None = None,
               use_model: bool = False) -> Flow[GuardVerdict]:
    require_text(text)
    flag, block = _thresholds(decider, flag_at, block_at)
    checks = list(policies or [])
    if len(checks) > MAX_POLICIES:
        raise ConfigError(f"at most {MAX_POLICIES} policies per request (got {len(checks)})",
                          hint="split the policies over several requests")
    if any(not isinstance(p, str) or not p.strip() for p in checks):
        raise ConfigError("policies must be non-empty strings describing what is not allowed")
    lang = language(text)
    ask_model = use_model or decider is None
    questions = [[{"role": "system", "content": INJECTION[lang]}, {"role": "user", "content": text}]] \
        if ask_model else []
    # the policies: yes/no questions about the text, read once for all of them (tasks/ask.py)
    policy_questions = [Question(f"p{i}", "yes_no", _policy_question(p, lang)) for i, p in enumerate(checks)]
    flows: list[Flow[Any]] = [gather([yes_probability(q) for q in questions]),
                              ask_flow(text, policy_questions, limit=MAX_POLICIES) if checks else pure(None)]
    if decider is not None:
        from ..deciders.runtime import scores_flow  # numpy and scikit-learn: only when a decider answers

        flows.append(scores_flow(decider, decider_texts(text)))
    found = yield from gather(flows)
    model_p = found[0][0] if ask_model else None
    policy_p = {p: float(a.probability or 0.0) for p, a in zip(checks, found[1].answers, strict=True)} \
        if checks else {}
    rule_score, reasons = heuristics(text)
    decider_p = None
    if decider is not None:
        column = found[2][:, decider.labels.index(positive_label(decider))]
        strongest = int(column.argmax())
        decider_p = float(column[strongest])
        score = decider_p if model_p is None else 1.0 - (1.0 - decider_p) * (1.0 - model_p)
        if decider_p >= flag:
            span = windows(text)[strongest - 1] if strongest else (0, len(text))
            pieces = _pieces(text, span)
            if len(pieces) > 1:  # the piece of the strongest passage the decider scores highest is quoted
                from ..deciders.runtime import scores_flow

                found_pieces = yield from scores_flow(decider, [text[a:b] for a, b in pieces])
                span = pieces[int(found_pieces[:, decider.labels.index(positive_label(decider))].argmax())]
            reasons.append(f"decider {decider.ref} {_judgement(decider_p, flag, block)}" + _where(text, span))
    else:
        assert model_p is not None
        score = 1.0 - (1.0 - rule_score) * (1.0 - model_p)
    reader = reader_instructions(text)
    score = lifted(score, bool(reader), flag)
    reasons += reader
    if model_p is not None and model_p >= flag:
        reasons.append(f"model {_judgement(model_p, flag, block)}")
    reasons += [f"may violate policy: {p} (p={v:.2f})" for p, v in policy_p.items() if v >= flag]
    worst = max([score, *policy_p.values()])
    verdict = "block" if worst >= block else "flag" if worst >= flag else "allow"
    return GuardVerdict(verdict, score, reasons, rule_score, decider.ref if decider else None, decider_p, model_p,
                        policy_p)


def lifted(score: float, reader_instruction: bool, flag: float) -> float:
    """The guard's score once an instruction to the reader (``rules.reader_instructions``) was found: at least
    ``flag`` — flagged for review, blocked only when the score itself reaches ``block_at``."""
    return max(score, flag) if reader_instruction else score


def _judgement(p: float, flag: float, block: float) -> str:
    """Words that match the score: only a score past ``block_at`` is called an injection attempt. The score is
    shown to as many digits as the thresholds (p=0.9575 under 0.9578 must not read "p=0.96, blocked from 0.958")."""
    shown = f"{p:.4f}"
    if p >= block:
        return f"judges it an injection attempt (p={shown}, blocked from {block:.4g})"
    return f"finds it somewhat like an injection attempt (p={shown}: flagged for review from {flag:.4g}, " \
        f"blocked from {block:.4g})"


def _pieces(text: str, span: tuple[int, int]) -> list[tuple[int, int]]:
    """(start, end) of the lines and sentences inside ``span`` (at least 20 characters each)."""
    pieces, begin = [], span[0]
    for match in re.finditer(r"\n+|(?<=[.!?。！？])\s+", text[span[0]:span[1]]):
        end = span[0] + match.start()
        if end - begin >= 20:
            pieces.append((begin, end))
        begin = span[0] + match.end()
    if span[1] - begin >= 20:
        pieces.append((begin, span[1]))
    return pieces


def _where(text: str, span: tuple[int, int]) -> str:
    """The passage the decider found most like an injection, quoted with where it is."""
    begin, end = span
    quoted = " ".join(text[begin:end].split())
    quoted = quoted if len(quoted) <= 200 else quoted[:197] + "..."
    return f"; strongest in characters {begin}-{end}: \"{quoted}\""


def _policy_question(policy: str, lang: str) -> str:
    if lang == "zh":
        return f"这段文本是否违反这条规定：{policy}？"
    return f"Does the text violate this policy: {policy}?"
