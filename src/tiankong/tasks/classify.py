"""classify: one or several labels, with the probability of every label.

Single-label scores come from ``choose`` (label-constrained decoding, exact token probabilities). Optional
few-shot examples become earlier conversation turns; optional contextual calibration divides the label
probabilities by those the model gives a content-free input ("N/A"), removing the model's prior bias towards
some labels (Zhao et al., 2021). Multi-label asks one yes/no question per label, the text first and read once (``ask``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..deciders.registry import Decider
from ..errors import ConfigError
from ..structured.combine import gather
from ..structured.flow import Flow, choose_flow
from ..structured.prompts import choose_indexed_messages, language
from .ask import Question, ask_flow
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
    #: the decider that answered (``name@version``) and its method; None: zero-/few-shot prompting
    decider: str | None = None
    method: str | None = None
    #: below the caller's threshold: no label is given (``labels`` is empty)
    abstained: bool = False
    #: set when the answer is likely unreliable (e.g. a skewed zero-shot prior) and what to do about it
    warning: str | None = None

    @property
    def confidence(self) -> float:
        return self.scores[self.label]

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"label": self.label, "labels": self.labels, "scores": self.scores,
                                "margin": self.margin, "confidence": self.confidence, "multi_label": self.multi_label,
                                "calibrated": self.calibrated}
        if self.prior:
            data["prior"] = self.prior
        for key in ("decider", "method", "warning"):
            if getattr(self, key) is not None:
                data[key] = getattr(self, key)
        if self.abstained:
            data["abstained"] = True
        return data


def require_text(text: Any, what: str = "text") -> str:
    """``text`` when it holds something; else a refusal naming the field (``what`` is the request field's name)."""
    if not isinstance(text, str):
        raise ConfigError(f"{what} must be a string, got {type(text).__name__}", hint=f"pass the {what} as a str",
                          param=what)
    if not text.strip():
        raise ConfigError(f"{what} is empty", hint=f"pass a non-empty {what}", param=what)
    return text


def check_labels(labels: Any) -> list[str]:
    names = [str(c) for c in labels] if isinstance(labels, (list, tuple)) else []
    stripped = [n.strip() for n in names]
    if len(names) >= 2 and all(stripped) and len(set(stripped)) == len(names):
        return names
    why = ""
    if len(set(names)) < len(names):  # a label repeated: named (it read as if fewer than two were given)
        twice = next(n for i, n in enumerate(names) if n in names[:i])
        why = f" ({twice!r} is given twice)"
    elif all(stripped) and len(set(stripped)) < len(names):  # only spaces told them apart
        why = " (labels equal once trimmed, as \"a\" and \" a \", are one label)"
    raise ConfigError("labels must be at least two distinct, non-empty strings" + why, hint='e.g. ["spam", "ham"]',
                      param="labels")


def decider_labels(own: list[str], given: list[str] | None, ref: str) -> list[str]:
    """A decider brings its labels; labels given as well must be the same set."""
    if given and sorted(map(str, given)) != sorted(own):
        raise ConfigError(f"decider {ref} decides between {own}, not {list(given)}",
                          hint="leave labels out when you pass a decider", param="labels")
    return own


def check_examples(examples: Any, labels: list[str]) -> list[tuple[str, str]]:
    pairs = []
    for i, ex in enumerate(examples or []):
        if not isinstance(ex, dict) or not isinstance(ex.get("text"), str) or "label" not in ex:
            raise ConfigError(f"examples[{i}] must be an object {{text, label}}", param="examples")
        if ex["label"] not in labels:
            raise ConfigError(f"examples[{i}] has unknown label {ex['label']!r}", hint=f"labels are {labels}",
                              param="examples")
        pairs.append((ex["text"], str(ex["label"])))
    return pairs


def check_descriptions(descriptions: Any, labels: list[str]) -> dict[str, str] | None:
    if not descriptions:
        return None
    if not isinstance(descriptions, dict):
        raise ConfigError("descriptions must map labels to descriptions", param="descriptions")
    unknown = [k for k in descriptions if k not in labels]
    if unknown:
        raise ConfigError(f"descriptions name unknown labels {unknown}", hint=f"labels are {labels}",
                          param="descriptions")
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
                  multi_label: bool = False, threshold: float = 0.5,
                  calibrate: bool | None = None) -> Flow[Classification]:
    """Zero-/few-shot label probabilities. ``calibrate=None`` calibrates when there are no examples."""
    text, names = require_text(text), check_labels(labels)
    if calibrate is None:
        calibrate = not examples and not multi_label
    desc, shots = check_descriptions(descriptions, names), check_examples(examples, names)
    if not 0.0 <= threshold <= 1.0:
        raise ConfigError("threshold must be between 0 and 1")
    lang = language(text)
    if multi_label:  # one yes/no question per label, the text read once (tasks/ask.py)
        questions = [Question(n, "yes_no", BELONGS[lang].format(label=n, desc=described(n, desc, lang)))
                     for n in names]
        asked = yield from ask_flow(text, questions, limit=len(questions))
        scores = {a.id: float(a.probability or 0.0) for a in asked.answers}
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
    return Classification(ranked[0][0], [ranked[0][0]], dict(ranked), margin, False, calibrate, prior,
                          warning=prior_warning(prior) if not shots else None)


#: total-variation distance of the content-free prior from uniform above which the warning names the skew
SKEW = 0.2


TUNE_HINT = ("label ~20 examples per label, run `tiankong tune classify --data FILE --name NAME` and classify "
             "with --decider NAME")


def prior_warning(prior: dict[str, float]) -> str:
    """Every zero-shot answer says it is unverified (a small model's zero-shot label measured near chance on real
    data, with or without calibration, also when its prior looked balanced); a skewed prior is named."""
    if not prior:
        return f"zero-shot label without calibration, unverified (small models are often near chance): {TUNE_HINT}"
    uniform = 1.0 / len(prior)
    skew = 0.5 * sum(abs(p - uniform) for p in prior.values())
    if skew > SKEW:
        top = max(prior, key=lambda k: prior[k])
        return (f"zero-shot label, unverified: the model leans towards {top!r} whatever the text (content-free "
                f"P={prior[top]:.2f}), so the label may be near chance even after calibration: {TUNE_HINT}")
    return f"zero-shot label, unverified (small models are often near chance here even when calibrated): {TUNE_HINT}"


def _calibrate(scores: dict[str, float], prior: dict[str, float]) -> dict[str, float]:
    weights = {label: p / max(prior.get(label, 1.0), 1e-6) for label, p in scores.items()}
    total = sum(weights.values())
    return {label: w / total for label, w in weights.items()}


def _multi(scores: dict[str, float], threshold: float) -> Classification:
    ranked = sorted(scores.items(), key=lambda kv: kv[1], reverse=True)
    chosen = [label for label, p in ranked if p >= threshold]
    margin = ranked[0][1] - ranked[1][1]
    # none passed the threshold: abstained, as a decider's answer says (``label`` stays the likeliest, with its
    # score; a pipeline reading ``label`` alone took it for a chosen one)
    return Classification(ranked[0][0], chosen, dict(ranked), margin, True, abstained=not chosen)


def decider_threshold(decider: Decider | None) -> float | None:
    """The escalation threshold in a decider's entry (``params.threshold``, written by ``tiankong cascade eval
    --write``), if it has one."""
    value = (decider.params if decider is not None else {}).get("threshold")
    if value is None or decider is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 1.0:
        raise ConfigError(f"decider {decider.ref} has an invalid threshold {value!r}",
                          hint="write it again with `tiankong cascade eval --decider NAME --write`")
    return float(value)


def decide_flow(decider: Decider, text: str, *, threshold: float | None = None) -> Flow[Classification]:
    """The decider's label for ``text`` with calibrated probabilities of every label; below ``threshold``
    (default: the decider's own, ``decider_threshold``; none: never) the answer abstains (``labels == []``,
    ``abstained=True``) — the cascade's sign to escalate."""
    require_text(text)
    if threshold is not None and not 0.0 <= threshold <= 1.0:
        raise ConfigError("threshold must be between 0 and 1")
    threshold = decider_threshold(decider) if threshold is None else threshold
    from ..deciders import methods  # numpy and scikit-learn: only when a decider answers
    from ..deciders.runtime import scores_flow

    rows = yield from scores_flow(decider, [text])
    scores = {label: round(float(p), 6) for label, p in zip(decider.labels, rows[0], strict=True)}
    ranked = sorted(scores.items(), key=lambda kv: kv[1], reverse=True)
    best, margin = ranked[0][0], ranked[0][1] - ranked[1][1]
    abstained = threshold is not None and ranked[0][1] < threshold
    unseen = methods.unseen_script(decider.state, text) if decider.method in ("tfidf", "tfidf-rules") else None
    warning = (f"decider {decider.ref} saw no {unseen} text among its examples: this answer is its prior alone; "
               f"tune it with {unseen} examples too" if unseen else None)
    return Classification(best, [] if abstained else [best], dict(ranked), margin, False, True,
                          decider=decider.ref, method=decider.method, abstained=abstained, warning=warning)
