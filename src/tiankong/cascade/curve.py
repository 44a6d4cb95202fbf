"""The pure part of a confidence cascade: a score table in, the accuracy-vs-escalation curve and a threshold out.

A score table has one row per labelled item: the small model's confidence in its answer (the top label's
probability), whether that answer was right, and whether the large model's answer was right. An item escalates
when the small model's confidence is *below* the threshold; its answer is then the large model's.

* The curve has one point per distinct confidence (items with the same confidence move together), from nothing
  escalated (threshold 0) to everything escalated. A point's threshold is the midpoint between the highest
  escalated confidence and the lowest kept one, so any confidence seen between them decides the same way.
* Random escalation of a fraction ``r`` of the items (uniformly, without looking at them) has the expected
  accuracy ``(1 - r) * acc_small + r * acc_large`` exactly: by linearity of expectation every item is escalated
  with probability ``r``. This is the baseline the curve is compared with, at the curve's own rates.
* The chosen threshold is the one escalating the fewest items whose accuracy reaches
  ``target * always_large_accuracy`` (always reachable for a target ≤ 1: escalating everything *is* always-large).

No I/O and no engine here: ``run.py`` fills the table, ``report.py`` draws it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError

#: accuracies within this of the target count as reaching it (sums of n fractions are not exact in floating point)
EPS = 1e-12


@dataclass(frozen=True)
class Score:
    """One labelled item: the small model's confidence and whether each model answered it right."""

    confidence: float
    small_correct: bool
    large_correct: bool


@dataclass(frozen=True)
class Point:
    """Escalate when confidence < ``threshold``: ``escalated`` is the fraction of items sent to the large model."""

    threshold: float
    escalated: float
    accuracy: float

    def to_json(self) -> dict[str, float]:
        return {"threshold": self.threshold, "escalated": self.escalated, "accuracy": self.accuracy}


@dataclass(frozen=True)
class Curve:
    """The curve, the three baselines and the chosen point for a target (a fraction of always-large accuracy)."""

    n: int
    points: list[Point]
    always_small: float
    always_large: float
    target: float
    chosen: Point

    @property
    def target_accuracy(self) -> float:
        return self.target * self.always_large

    @property
    def random(self) -> list[tuple[float, float]]:
        """(escalated, expected accuracy of random escalation at that rate) at every rate of the curve."""
        return [(p.escalated, random_accuracy(p.escalated, self.always_small, self.always_large))
                for p in self.points]

    @property
    def gains(self) -> list[float]:
        """Curve accuracy minus random's at every rate strictly between nothing and everything escalated."""
        return [p.accuracy - random_accuracy(p.escalated, self.always_small, self.always_large)
                for p in self.points if 0.0 < p.escalated < 1.0]

    @property
    def above_random(self) -> bool:
        """Strictly above random escalation at every intermediate rate (False when there is no such rate)."""
        gains = self.gains
        return bool(gains) and min(gains) > EPS

    def to_json(self) -> dict[str, Any]:
        gains = self.gains
        return {
            "curve": [p.to_json() for p in self.points],
            "always_small": {"accuracy": self.always_small},
            "always_large": {"accuracy": self.always_large},
            "random": [{"escalated": r, "accuracy": a} for r, a in self.random],
            "chosen": self.chosen.to_json(),
            "target": self.target,
            "target_accuracy": self.target_accuracy,
            "above_random": self.above_random,
            "gain_over_random": {"min": min(gains), "mean": sum(gains) / len(gains)} if gains else None,
        }


def random_accuracy(rate: float, always_small: float, always_large: float) -> float:
    """Expected accuracy when a uniformly random fraction ``rate`` of the items is escalated (exact)."""
    if not 0.0 <= rate <= 1.0:
        raise ConfigError(f"escalation rate {rate} is outside [0, 1]")
    return (1.0 - rate) * always_small + rate * always_large


def build_curve(scores: Sequence[Score], target: float = 0.95) -> Curve:
    """The accuracy-vs-escalation curve over the small model's confidence and the threshold for ``target``."""
    if not scores:
        raise ConfigError("no scored items: the cascade curve needs at least one labelled item",
                          hint="give --data a JSONL file of {\"text\", \"label\"} records")
    if not 0.0 < target <= 1.0 or math.isnan(target):
        raise ConfigError(f"target {target} must be in (0, 1]: a fraction of always-large accuracy",
                          hint="e.g. --target 0.95 for 95 % of the large model's accuracy")
    for score in scores:
        if not 0.0 <= score.confidence <= 1.0 or math.isnan(score.confidence):
            raise ConfigError(f"confidence {score.confidence} is outside [0, 1]",
                              hint="a confidence is the small model's top-label probability")
    n = len(scores)
    ranked = sorted(scores, key=lambda s: s.confidence)
    right = sum(s.small_correct for s in scores)  # correct answers with nothing escalated
    points = [Point(0.0, 0.0, right / n)]
    index = 0
    while index < n:
        level = ranked[index].confidence
        while index < n and ranked[index].confidence == level:  # ties escalate together
            right += int(ranked[index].large_correct) - int(ranked[index].small_correct)
            index += 1
        above = ranked[index].confidence if index < n else 1.0
        threshold = (level + above) / 2 if above > level else math.nextafter(level, math.inf)
        points.append(Point(threshold, index / n, right / n))
    always_small, always_large = points[0].accuracy, points[-1].accuracy
    return Curve(n, points, always_small, always_large, target, choose(points, target * always_large))


def choose(points: Sequence[Point], accuracy: float) -> Point:
    """The point escalating the fewest items whose accuracy reaches ``accuracy`` (ties: the lower threshold)."""
    reaching = [p for p in points if p.accuracy >= accuracy - EPS]
    if not reaching:
        best = max(p.accuracy for p in points) if points else 0.0
        raise ConfigError(f"no threshold reaches accuracy {accuracy:.4f} (best {best:.4f})",
                          hint="lower --target")
    return min(reaching, key=lambda p: (p.escalated, p.threshold))
