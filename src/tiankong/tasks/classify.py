"""classify: one or several labels, with the probability of every label.

Single-label scores come from ``choose`` (label-constrained decoding, exact token probabilities). Optional
few-shot examples become earlier conversation turns; optional contextual calibration divides the label
probabilities by those the model gives a content-free input ("N/A"), removing the model's prior bias towards
some labels (Zhao et al., 2021). Multi-label asks one yes/no question per label (in parallel slots).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError
from ..structured.combine import gather
from ..structured.flow import Flow, choose_flow
from ..structured.prompts import choose_indexed_messages, language
from .prompts import BELONGS, CLASSIFY, described

CONTENT_FREE = {"en": "N/A", "zh": "无"}


@dataclass
class Classification:
    """The chosen label(s) and the probability of every label (multi-label: each label's own yes-probability)."""

    label: str
    labels: list[str]
    scores: dict[str, float]
    margin: float
    multi_label: bool = False
    calibrated: bool = False
    prior: dict[str, float] = field(default_factory=dict)

    @property
    def confidence(self) -> float:
        return self.scores[self.label]

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "labels": self.labels, "scores": self.scores, "margin": self.margin,
                "confidence": self.confidence, "multi_label": self.multi_label, "calibrated": self.calibrated}


def require_text(text: Any, what: str = "text") -> str:
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"{what} is empty", hint=f"pass a non-empty {what}")
    return text


def check_labels(labels: Any) -> list[str]:
    names = [str(c) for c in labels] if isinstance(labels, (list, tuple)) else []
    if len(names) < 2 or len(set(names)) != len(names) or not all(n.strip() for n in names):
        raise ConfigError("labels must be at least two distinct, non-empty strings", hint='e.g. ["spam", "ham"]')
    return names


def check_examples(examples: Any, labels: list[str]) -> list[tuple[str, str]]:
    pairs = []
    for i, ex in enumerate(examples or []):
        if not isinstance(ex, dict) or not isinstance(ex.get("text"), str) or "label" not in ex:
            raise ConfigError(f"examples[{i}] must be an object {{text, label}}")
        if ex["label"] not in labels:
            raise ConfigError(f"examples[{i}] has unknown label {ex['label']!r}", hint=f"labels are {labels}")
        pairs.append((ex["text"], str(ex["label"])))
    return pairs


def check_descriptions(descriptions: Any, labels: list[str]) -> dict[str, str] | None:
    if not descriptions:
        return None
    if not isinstance(descriptions, dict):
        raise ConfigError("descriptions must map labels to descriptions")
    unknown = [k for k in descriptions if k not in labels]
    if unknown:
        raise ConfigError(f"descriptions name unknown labels {unknown}", hint=f"labels are {labels}")
    return {str(k): str(v) for k, v in descriptions.items()}


def label_messages(text: str, labels: list[str], descriptions: dict[str, str] | None,
                   examples: list[tuple[str, str]], instructions: str | None,
                   lang: str | None = None) -> list[dict[str, Any]]:
    lang = lang or language(text)
    options = ("; " if descriptions else ", ").join(label + described(label, descriptions, lang) for label in labels)
    system = CLASSIFY[lang].format(options=options)
    if instructions:
        system = instructions + "\n" + system
    turns: list[dict[str, Any]] = [{"role": "system", "content": system}]
    for shot_text, shot_label in examples:
        turns += [{"role": "user", "content": shot_text}, {"role": "assistant", "content": shot_label}]
    return [*turns, {"role": "user", "content": text}]


def _label_flow(text: str, labels: list[str], descriptions: dict[str, str] | None,
                examples: list[tuple[str, str]], instructions: str | None, lang: str) -> Flow[dict[str, float]]:
    messages = label_messages(text, labels, descriptions, examples, instructions, lang)
    indexed_messages, numbers = choose_indexed_messages(text, labels, instructions, descriptions)
    return choose_flow(messages, labels, (indexed_messages, numbers))


def yes_probability(messages: list[dict[str, Any]]) -> Flow[float]:
    """P(yes) of a yes/no question under yes/no-constrained decoding."""
    scores = yield from choose_flow(messages, ["yes", "no"])
    return scores["yes"]


def classify_flow(text: str, labels: list[str], *, descriptions: dict[str, str] | None = None,
                  examples: list[dict[str, Any]] | None = None, instructions: str | None = None,
                  multi_label: bool = False, threshold: float = 0.5, calibrate: bool = False) -> Flow[Classification]:
    text, names = require_text(text), check_labels(labels)
    desc, shots = check_descriptions(descriptions, names), check_examples(examples, names)
    if not 0.0 <= threshold <= 1.0:
        raise ConfigError("threshold must be between 0 and 1")
    lang = language(text)
    if multi_label:
        questions = [[{"role": "system", "content": BELONGS[lang].format(label=n, desc=described(n, desc, lang))},
                      {"role": "user", "content": text}] for n in names]
        yes = yield from gather([yes_probability(q) for q in questions])
        scores = dict(zip(names, yes, strict=True))
        return _multi(scores, threshold)
    flows = [_label_flow(text, names, desc, shots, instructions, lang)]
    if calibrate:
        flows.append(_label_flow(CONTENT_FREE[lang], names, desc, shots, instructions, lang))
    found = yield from gather(flows)
    scores, prior = found[0], (found[1] if calibrate else {})
    if calibrate:
        scores = _calibrate(scores, prior)
    ranked = sorted(scores.items(), key=lambda kv: kv[1], reverse=True)
    margin = ranked[0][1] - ranked[1][1]
    return Classification(ranked[0][0], [ranked[0][0]], dict(ranked), margin, False, calibrate, prior)


def _calibrate(scores: dict[str, float], prior: dict[str, float]) -> dict[str, float]:
    weights = {label: p / max(prior.get(label, 1.0), 1e-6) for label, p in scores.items()}
    total = sum(weights.values())
    return {label: w / total for label, w in weights.items()}


def _multi(scores: dict[str, float], threshold: float) -> Classification:
    ranked = sorted(scores.items(), key=lambda kv: kv[1], reverse=True)
    chosen = [label for label, p in ranked if p >= threshold]
    margin = ranked[0][1] - ranked[1][1]
    return Classification(ranked[0][0], chosen, dict(ranked), margin, True)
