"""The uncertain band of a dedupe run decided by a pair decider: a pair whose score falls between a stage's band floor
and its merge threshold is shown to the decider as one text (``pair_text``) and merged when its label meaning "same"
gets P ≥ 0.5, or left apart and counted. A band pair whose two records are one cluster already (joined through other
pairs: a-b and b-c merged, a-c in the band; or by an earlier pair of the band) is counted ``already_joined`` and not
shown to the decider, so ``pairs`` = ``decided_same`` + ``decided_different`` + ``left`` + ``already_joined``. The
decider is loaded before the stages run (``pair_decider``), so a wrong name fails whatever the data."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..structured.flow import Flow

if TYPE_CHECKING:
    from ..deciders.registry import Decider

#: labels of a decider that mean "the two texts are the same item"
SAME_LABELS = ("same", "duplicate", "yes", "true", "1")


def pair_decider(name: str | None) -> Decider | None:
    """The decider named, loaded and checked to have a label meaning "same" (``None`` without a name)."""
    if name is None:
        return None
    from ..deciders.registry import load_decider

    decider = load_decider(name)
    if not any(label.lower() in SAME_LABELS for label in decider.labels):
        raise ConfigError(f"decider {decider.ref} has labels {decider.labels}, none meaning 'same'",
                          hint=f"tune one on pairs labelled with one of {', '.join(SAME_LABELS)}")
    return decider


def decide_band(uncertain: Sequence[tuple[int, int, str, float, str | None]], texts: Sequence[str],
                decider: Decider | None, link: Any, together: Callable[[int, int], bool],
                report: dict[str, Any]) -> Flow[dict[str, Any]]:
    """The uncertain pairs merged when the decider says "same" (p ≥ 0.5), or left apart and counted; a pair whose
    records ``together`` says are one cluster already is counted ``already_joined`` (and not decided)."""
    summary: dict[str, Any] = {"pairs": len(uncertain), "decided_same": 0, "decided_different": 0, "left": 0,
                               "already_joined": 0}
    open_pairs = [pair for pair in uncertain if not together(pair[0], pair[1])]
    summary["already_joined"] = len(uncertain) - len(open_pairs)
    if not open_pairs or decider is None:
        for a, b, stage, score, part in open_pairs:
            summary["left"] += link(a, b, stage, score, part, merged=False)
        return summary
    from ..deciders.runtime import pair_decider_part, scores_flow
    from ..models.registry import resolve
    from .pairs import unread_pairs

    same = next(i for i, label in enumerate(decider.labels) if label.lower() in SAME_LABELS)
    pairs = [pair_text(texts[a], texts[b]) for a, b, *_ in open_pairs]
    rows = yield from scores_flow(decider, pairs)
    summary["decider"] = decider.ref
    reads = pair_decider_part(decider) if decider.method == "probe-pair" else None
    if reads and not resolve(reads).installed:
        report["notes"].append(f"decider {decider.ref} compares by {reads}, which is not installed: every pair's "
                               f"cosine is 0 (tiankong models pull {reads})")
    if reads and (unread := unread_pairs(pairs, reads)):
        report["notes"].append(f"decider {decider.ref} compares by {reads}, which cannot read {len(unread)} of the "
                               f"{len(pairs)} pairs: their cosine is 0 (tune a decider on pairs in their language)")
    for (a, b, stage, score, part), row in zip(open_pairs, rows, strict=True):
        p = round(float(row[same]), 6)
        if together(a, b):  # joined by a pair of the band decided before it: its decision changes nothing
            summary["already_joined"] += 1
        elif p >= 0.5:
            summary["decided_same"] += link(a, b, stage, score, part, True, decider.ref, p)
        else:
            summary["decided_different"] += link(a, b, stage, score, part, False, decider.ref, p)
    return summary


def pair_text(a: str, b: str) -> str:
    """How a pair is shown to a decider (and how `tune` should show its labelled pairs)."""
    return f"A: {a}\nB: {b}"
