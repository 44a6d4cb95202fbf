"""What ``tune`` reports and how it picks: scores per method, the CV report, and the one-standard-error rule.

Selection rule (stated in every report; ``choose``): the best CV accuracy's standard error is the binomial one
over the n held-out answers, Agresti–Coull adjusted (``p = (acc n + 2) / (n + 4)``, ``sqrt(p (1 - p) / (n + 4))``: the
plain ``sqrt(acc (1 - acc) / n)`` is 0 at an accuracy of 1, so one answer of 24 chose); every method within one
standard error of the best is as
good as the data can tell, and among those the one that fits the fewest parameters to the examples wins
(``SIMPLICITY``), then the lower CV log-loss, then fewer engine passes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sklearn.metrics import accuracy_score, f1_score

from ..deciders.registry import Decider

#: how many parameters a method fits to the examples, as a level (fewest first): the one-SE rule's "simplest"
SIMPLICITY = {"zeroshot": 0, "fewshot": 1, "probe-mean": 2, "probe-last": 2, "probe-part": 2, "tfidf": 3,
              "tfidf-rules": 3,
              "stack": 4, "setfit": 5, "lora": 5}
PASSES = {"tfidf": 0, "tfidf-rules": 0, "probe-mean": 1, "probe-last": 1, "stack": 1, "zeroshot": 1, "fewshot": 1,
          "lora": 1, "probe-part": 0, "probe-pair": 0, "setfit": 0}  # the part methods: the part's own engine reads

@dataclass
class MethodScore:
    method: str
    size: int
    accuracy: float
    macro_f1: float
    ece: float
    ms_per_item: float
    engine_passes: int
    log_loss: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"method": self.method, "size": self.size, "accuracy": round(self.accuracy, 4),
                "macro_f1": round(self.macro_f1, 4), "ece": round(self.ece, 4), "log_loss": round(self.log_loss, 4),
                "ms_per_item": round(self.ms_per_item, 2), "engine_passes": self.engine_passes}


@dataclass
class TuneReport:
    name: str
    labels: list[str]
    counts: dict[str, int]
    folds: int
    rows: list[MethodScore]
    chosen: str
    rule: str
    base_model: dict[str, str] | None = None
    decider: Decider | None = None
    skipped: dict[str, str] = field(default_factory=dict)
    repeats: int = 1
    #: tuned from labelled pairs (``tune dedupe``: no --no-engine or --describe to suggest)
    pairs: bool = False

    @property
    def warning(self) -> str | None:
        """Set when the chosen method is hardly better than guessing (``near_chance``), with what to do."""
        row = next((r for r in self.best_rows() if r.method == self.chosen), None)
        if row is None or not near_chance(row.accuracy, self.counts):
            return None
        engine_free = all(r.engine_passes == 0 for r in self.rows)
        head = (f"the chosen {self.chosen} scores CV accuracy {row.accuracy:.3f}, near chance "
                f"({chance_accuracy(self.counts):.3f} for {len(self.counts)} labels): its answers will often be "
                "wrong; ")
        if self.pairs:
            return head + "label more pairs (30 or more per label)" + (
                ", or let an engine read them (--model NAME)" if engine_free else "")
        where = "; let an engine read the texts (--model NAME instead of --no-engine)" if engine_free else ""
        return head + f"add labelled examples (30 or more per label){where}, or describe the labels (--describe)"

    def best_rows(self) -> list[MethodScore]:
        full = max(r.size for r in self.rows)
        return [r for r in self.rows if r.size == full]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "labels": self.labels, "counts": self.counts, "folds": self.folds,
                "repeats": self.repeats, "chosen": self.chosen, "rule": self.rule,
                "base_model": self.base_model,
                "version": self.decider.version if self.decider else None,
                "results": [r.to_json() for r in self.rows], "skipped": self.skipped,
                **({"warning": self.warning} if self.warning else {})}

    def table(self) -> str:
        again = f" (repeated {self.repeats}× for the fast methods)" if self.repeats > 1 else ""
        lines = [f"{self.folds}-fold CV{again}, {sum(self.counts.values())} examples "
                 f"({', '.join(f'{k}: {v}' for k, v in self.counts.items())})",
                 f"{'method':<11} {'size':>5} {'accuracy':>8} {'macro-F1':>8} {'ECE':>6} {'logloss':>7} "
                 f"{'ms/item':>8} passes"]
        for r in sorted(self.rows, key=lambda r: (r.method, r.size)):
            mark = " *" if r.method == self.chosen and r.size == max(x.size for x in self.rows) else ""
            lines.append(f"{r.method:<11} {r.size:>5} {r.accuracy:>8.3f} {r.macro_f1:>8.3f} {r.ece:>6.3f} "
                         f"{r.log_loss:>7.3f} {r.ms_per_item:>8.1f} {r.engine_passes:>6}{mark}")
        lines += [f"skipped {m}: {why}" for m, why in self.skipped.items()]
        lines.append(f"chosen: {self.chosen} ({self.rule})")
        return "\n".join(lines)


def chance_accuracy(counts: dict[str, int]) -> float:
    """What guessing scores: the larger of a uniform guess and always answering the commonest label."""
    total = sum(counts.values())
    return max(1.0 / len(counts), max(counts.values()) / total) if total else 1.0


def near_chance(accuracy: float, counts: dict[str, int]) -> bool:
    """Accuracy that closes less than a third of the gap from guessing to perfect."""
    chance = chance_accuracy(counts)
    return accuracy < chance + (1.0 - chance) / 3


def expected_calibration_error(probabilities: np.ndarray, y: np.ndarray, bins: int = 10) -> float:
    confidence, predicted = probabilities.max(axis=1), probabilities.argmax(axis=1)
    edges = np.linspace(0.0, 1.0, bins + 1)
    total = 0.0
    for low, high in zip(edges[:-1], edges[1:], strict=True):
        inside = (confidence > low) & (confidence <= high)
        if inside.any():
            total += inside.mean() * abs((predicted[inside] == y[inside]).mean() - confidence[inside].mean())
    return float(total)


def _score(method: str, size: int, probabilities: np.ndarray, y: np.ndarray, ms: float) -> MethodScore:
    predicted = probabilities.argmax(axis=1)
    picked = np.clip(probabilities[np.arange(len(y)), y], 1e-6, 1.0)
    return MethodScore(method, size, float(accuracy_score(y, predicted)),
                       float(f1_score(y, predicted, average="macro")),
                       expected_calibration_error(probabilities, y), ms, PASSES[method], float(-np.log(picked).mean()))


def standard_error(accuracy: float, n: int) -> float:
    """The binomial standard error of an accuracy measured on ``n`` held-out answers (Agresti–Coull: two
    successes and two failures added, so a perfect or a zero score has an error too)."""
    p = (accuracy * n + 2.0) / (n + 4.0)
    return float(np.sqrt(p * (1.0 - p) / (n + 4.0)))


def choose(rows: Sequence[MethodScore], n: int) -> tuple[str, str]:
    """The one-standard-error rule over full-size CV rows: ``(method, the rule in words with its numbers)``."""
    best = max(rows, key=lambda r: r.accuracy)
    se = standard_error(best.accuracy, n)
    close = [r for r in rows if r.accuracy >= best.accuracy - se - 1e-12]
    pick = min(close, key=lambda r: (SIMPLICITY.get(r.method, len(SIMPLICITY)), round(r.log_loss, 4),
                                     r.engine_passes, r.ms_per_item))
    rule = (f"one-standard-error rule: the best CV accuracy {best.accuracy:.3f} ({best.method}) ± {se:.3f} on {n} "
            f"examples; of the methods within it, the one fitting the fewest parameters, then the lowest CV log-loss")
    return pick.method, rule
