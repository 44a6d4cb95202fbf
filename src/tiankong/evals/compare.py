"""``tiankong.evals.compare_runs``: baseline vs. candidates on the same eval set.

Per item, candidate against baseline (first match wins):

* ``wrong``           the baseline passes, the candidate does not;
* ``improved``        the candidate passes, the baseline does not;
* ``length_anomaly``  the output length (characters) is under half or over twice the baseline's (only where
                      the baseline wrote at least 20 characters; a much shorter answer usually means the model
                      gave up);
* ``degraded``        both pass, but the candidate's score is lower by at least 0.1 (the wording drifted away
                      from the reference);
* ``equal``           everything else (including items both get wrong: counted as ``both_wrong`` too).

Accuracy difference (candidate − baseline, in points) with a 95 % paired bootstrap interval (resampling items,
2,000 resamples, fixed seed). Decision rule: the reference is the most accurate model (ties: the baseline);
choose the smallest model file whose accuracy is within ``tolerance`` points of the reference.
"""

from __future__ import annotations

import random
from typing import Any

from pydantic import BaseModel

from ..errors import ConfigError
from .results import EvalRun, ItemResult

CLASSES = ("wrong", "improved", "length_anomaly", "degraded", "equal")
SCORE_DROP = 0.1
LENGTH_LOW, LENGTH_HIGH, LENGTH_MIN_CHARS = 0.5, 2.0, 20
BOOTSTRAP_SAMPLES, BOOTSTRAP_SEED = 2000, 0
MB = 1_000_000


class ItemDiff(BaseModel):
    id: str
    tags: list[str]
    cls: str
    baseline_score: float
    candidate_score: float
    length_ratio: float | None
    baseline_text: str
    candidate_text: str


class ModelRow(BaseModel):
    """One model's side-by-side numbers."""

    name: str
    accuracy: float
    mean_score: float
    failed: int
    items_per_s: float
    tokens_per_s: float
    seconds_per_item: float
    peak_rss_bytes: int | None
    model_bytes: int
    per_tag: dict[str, float]


class CandidateDiff(BaseModel):
    name: str
    counts: dict[str, int]
    both_wrong: int
    diff_points: float
    ci_points: tuple[float, float]
    items: list[ItemDiff]


class Comparison(BaseModel):
    set_path: str
    items: int
    baseline: str
    tolerance_points: float
    rule: str
    models: list[ModelRow]
    candidates: list[CandidateDiff]
    choice: str
    decision: str

    def row(self, name: str) -> ModelRow:
        return next(m for m in self.models if m.name == name)


def compare_runs(runs: list[EvalRun], *, baseline: str | None = None, tolerance_points: float = 2.0) -> Comparison:
    """Compare runs of one eval set; ``baseline`` is a model name (default: the first run)."""
    if len(runs) < 2:
        raise ConfigError("compare needs at least two runs (a baseline and a candidate)",
                          hint="pass two run files, or a folder written by `tiankong eval run --model A --model B`")
    base = _pick_baseline(runs, baseline)
    _check_same_set(runs)
    candidates = [run for run in runs if run is not base]
    diffs = [_diff(base, cand) for cand in candidates]
    models = [_row(run) for run in [base, *candidates]]
    choice, decision = decide(models, base.model.name, tolerance_points)
    rule = (f"reference = the most accurate model (ties: the baseline); choose the smallest model file whose "
            f"accuracy is within {tolerance_points:g} points of the reference")
    return Comparison(set_path=base.set_path, items=len(base.items), baseline=base.model.name,
                      tolerance_points=tolerance_points, rule=rule, models=models, candidates=diffs, choice=choice,
                      decision=decision)


def _pick_baseline(runs: list[EvalRun], baseline: str | None) -> EvalRun:
    if baseline is None:
        return runs[0]
    exact = [run for run in runs if run.model.name == baseline]
    found = exact or [run for run in runs if run.model.name.split(":")[0] == baseline]
    if len(found) > 1:  # two quants of one model (the quant A/B): the first in file order was taken
        raise ConfigError(f"the baseline {baseline!r} names {len(found)} runs: "
                          f"{', '.join(run.model.name for run in found)}", hint="pass the full name of one")
    if found:
        return found[0]
    names = ", ".join(run.model.name for run in runs)
    raise ConfigError(f"the baseline {baseline!r} is not among the runs ({names})", hint="pass one of those names")


def _check_same_set(runs: list[EvalRun]) -> None:
    first = runs[0]
    names = [run.model.name for run in runs]
    if len(set(names)) != len(names):
        raise ConfigError(f"two runs of the same model: {', '.join(names)}", hint="give each model once")
    for run in runs[1:]:
        if [i.id for i in run.items] != [i.id for i in first.items]:
            raise ConfigError(f"the runs are of different eval sets ({first.set_path} vs {run.set_path})",
                              hint="run every model on the same set (one `tiankong eval run` with several --model)")
        if run.set_sha256 != first.set_sha256:  # the same ids, another version (a reference fixed since)
            raise ConfigError(f"the runs of {first.model.name} and {run.model.name} are of different versions of "
                              f"the eval set (sha256 {first.set_sha256[:12]}… vs {run.set_sha256[:12]}…)",
                              hint="run every model again on the current set (cached answers are re-scored, "
                                   "no engine work)")


def classify_item(base: ItemResult, cand: ItemResult) -> tuple[str, float | None]:
    """The class of one item (see the module docstring) and the length ratio (None where not meaningful)."""
    ratio = len(cand.text) / len(base.text) if len(base.text) >= LENGTH_MIN_CHARS else None
    if base.correct and not cand.correct:
        return "wrong", ratio
    if cand.correct and not base.correct:
        return "improved", ratio
    if ratio is not None and not LENGTH_LOW <= ratio <= LENGTH_HIGH:
        return "length_anomaly", ratio
    if base.correct and round(base.score - cand.score, 9) >= SCORE_DROP:  # 0.3 - 0.1 is 0.19999… in floats
        return "degraded", ratio
    return "equal", ratio


def _diff(base: EvalRun, cand: EvalRun) -> CandidateDiff:
    items, counts = [], dict.fromkeys(CLASSES, 0)
    for b, c in zip(base.items, cand.items, strict=True):
        cls, ratio = classify_item(b, c)
        counts[cls] += 1
        items.append(ItemDiff(id=b.id, tags=b.tags, cls=cls, baseline_score=b.score, candidate_score=c.score,
                              length_ratio=round(ratio, 3) if ratio is not None else None, baseline_text=b.text,
                              candidate_text=c.text))
    paired = [int(c.correct) - int(b.correct) for b, c in zip(base.items, cand.items, strict=True)]
    low, high = paired_bootstrap(paired)
    both_wrong = sum(not b.correct and not c.correct for b, c in zip(base.items, cand.items, strict=True))
    return CandidateDiff(name=cand.model.name, counts=counts, both_wrong=both_wrong,
                         diff_points=round(100 * sum(paired) / len(paired), 2),
                         ci_points=(round(100 * low, 2), round(100 * high, 2)), items=items)


def paired_bootstrap(diffs: list[int], *, samples: int = BOOTSTRAP_SAMPLES, seed: int = BOOTSTRAP_SEED,
                     confidence: float = 0.95) -> tuple[float, float]:
    """Percentile interval of the mean per-item difference, items resampled with replacement."""
    if not diffs:
        return 0.0, 0.0
    rng = random.Random(seed)
    n = len(diffs)
    means = sorted(sum(rng.choices(diffs, k=n)) / n for _ in range(samples))
    tail = (1 - confidence) / 2
    cut = int(tail * samples)  # as many dropped at each end (the upper bound was one sample further out)
    return means[cut], means[samples - 1 - cut]


def _row(run: EvalRun) -> ModelRow:
    return ModelRow(name=run.model.name, accuracy=round(run.accuracy, 4), mean_score=round(run.mean_score, 4),
                    failed=run.failed, items_per_s=round(run.speed.items_per_s, 4),
                    tokens_per_s=round(run.speed.tokens_per_s, 2),
                    seconds_per_item=round(run.speed.seconds_per_item, 3),
                    peak_rss_bytes=run.peak_rss_bytes, model_bytes=run.model.bytes,
                    per_tag={tag: round(s.accuracy, 4) for tag, s in run.per_tag().items()})


def check_tolerance(tolerance_points: float) -> None:
    if not 0 <= tolerance_points <= 100:  # nan too: a negative tolerance left no model to choose (min() of nothing)
        raise ConfigError(f"the tolerance must be from 0 to 100 accuracy points, got {tolerance_points}",
                          hint="e.g. --tolerance 2", param="tolerance")


def decide(models: list[ModelRow], baseline: str, tolerance_points: float) -> tuple[str, str]:
    """(chosen model, the decision as a sentence) by the rule in the module docstring."""
    check_tolerance(tolerance_points)
    best = max(models, key=lambda m: (m.accuracy, m.name == baseline))
    floor = best.accuracy - tolerance_points / 100 - 1e-9
    chosen = min((m for m in models if m.accuracy >= floor), key=lambda m: (m.model_bytes, m.name != baseline))
    base = next(m for m in models if m.name == baseline)
    points = 100 * (chosen.accuracy - best.accuracy)
    if chosen.name == best.name:
        why = f"the most accurate ({100 * chosen.accuracy:.1f} %)"
        others = [m for m in models if m is not chosen and m.model_bytes < chosen.model_bytes]
        if others:
            worst_gap = 100 * (chosen.accuracy - max(m.accuracy for m in others))
            why += (f", and every smaller model is more than {tolerance_points:g} points behind (the closest by "
                    f"{worst_gap:.1f})")
    else:
        why = (f"within {tolerance_points:g} points of {best.name} ({points:+.1f} points: "
               f"{100 * chosen.accuracy:.1f} % vs {100 * best.accuracy:.1f} %)")
    decision = f"choose {chosen.name}: {why}"
    if chosen.name != base.name:
        decision += _savings(chosen, base)
    return chosen.name, decision


def _savings(chosen: ModelRow, base: ModelRow) -> str:
    parts = []
    file_mb = (base.model_bytes - chosen.model_bytes) / MB
    parts.append(f"{'saves' if file_mb >= 0 else 'costs'} {abs(file_mb):.0f} MB of model file")
    if chosen.peak_rss_bytes and base.peak_rss_bytes:
        rss_mb = (base.peak_rss_bytes - chosen.peak_rss_bytes) / MB
        parts.append(f"{'saves' if rss_mb >= 0 else 'costs'} {abs(rss_mb):.0f} MB peak engine memory")
    if chosen.seconds_per_item and base.seconds_per_item:
        parts.append(f"{base.seconds_per_item / chosen.seconds_per_item:.2f}× the baseline's items per second")
    return f" — vs the baseline {base.name}: " + ", ".join(parts)


def summary_json(comparison: Comparison, *, with_items: bool = True) -> dict[str, Any]:
    data = comparison.model_dump(mode="json")
    if not with_items:
        for cand in data["candidates"]:
            cand.pop("items")
    return data


def compare_files(paths: list[str], *, baseline: str | None = None, tolerance_points: float = 2.0) -> Comparison:
    """``compare_runs`` over run files and folders of run files (``eval compare`` / ``eval report``)."""
    from .results import read_runs

    check_tolerance(tolerance_points)
    return compare_runs(read_runs(list(paths)), baseline=baseline, tolerance_points=tolerance_points)
