"""Which embedding part reads which records in dedupe's semantic stage, and at which cosines.

The part follows the text **record by record** (``record_part``): a record with any Chinese (or other CJK)
character is read by the catalog's multilingual part (multilingual-e5-small, which reads English too — so a
mixed-script product title and its Chinese twin stay in one group), every other record by the English one (MiniLM:
its thresholds were measured on tickets and Restaurant's names and addresses). The two groups are searched apart:
one part's vectors cannot be compared with the other's, so such records are never a semantic pair (they can still
be exact or near duplicates). A part named in the options (``part``) reads every record it can; the records it
cannot read (CJK text for the English part) are left out of the stage, and the report says how many.

Each part merges at its own default cosines (``CatalogEntry.dedupe_cosine``: MiniLM 0.9 with the uncertain band from
0.8; e5's cosines crowd near 1, so 0.95 — CNSD STS-B dev's best — with the band from 0.93). A threshold given in the
options wins; a given band floor above a merging cosine is refused by ``DedupeOptions.check`` for every part the run
could use (not only those the records happen to need), and a floor equal to the merging cosine means no band.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..structured.flow import Flow
from ..structured.prompts import CJK_SCRIPT

if TYPE_CHECKING:
    from .core import DedupeOptions
    from .semantic import SemanticPair


#: how records are given to parts; a batch job's fingerprint holds it with every part's cosines (``rules``), so a
#: finished job re-runs once when either changes (its clusters would)
RULES = "per-record part, own cosines (2026-12-06)"


def rules() -> str:
    """:data:`RULES` and each catalog embedding part's default cosines, as one string."""
    from ..models.catalog import CATALOG

    return RULES + "".join(f"; {e.name} {e.dedupe_cosine}" for e in CATALOG if e.kind == "embedding")


def cosines_said() -> str:
    """Each catalog embedding part's default cosines, for help texts: "0.9 / 0.8 all-minilm-l6-v2:f16, …"."""
    from ..models.catalog import CATALOG

    return ", ".join(f"{e.dedupe_cosine[0]} / {e.dedupe_cosine[1]} {e.name}" for e in CATALOG if e.kind == "embedding")


def record_part(text: str) -> str:
    """The catalog part that reads one record: the multilingual one when it holds any CJK character, else MiniLM."""
    from ..models.catalog import EMBEDDING_MODEL, MULTILINGUAL_EMBEDDING_MODEL

    return MULTILINGUAL_EMBEDDING_MODEL if CJK_SCRIPT.search(text) else EMBEDDING_MODEL


def reads_cjk(part: str) -> bool:
    """Whether ``part`` reads CJK text (a part trained on named languages without Chinese does not)."""
    from ..models.catalog import find_entry

    entry = find_entry(part)
    return entry is None or not entry.languages or "zh" in entry.languages


@dataclass(frozen=True)
class PartGroup:
    """Records (``rows``: indices of the texts) one part reads, and the cosines it merges and bands at."""

    part: str
    merge: float
    floor: float | None  # the uncertain band is [floor, merge); None: no band
    rows: tuple[int, ...]
    note: str = ""  # a given threshold applied to a part whose own differs
    left_out: int = 0  # records a named part cannot read, left out of the stage

    def report(self) -> dict[str, Any]:
        out = {"records": len(self.rows), "threshold": self.merge, "band": self.floor}
        return out | ({"left_out": self.left_out} if self.left_out else {})


def part_cosines(part: str, options: DedupeOptions) -> tuple[float, float | None, str]:
    """``(merging cosine, band floor or None, note)`` of ``part`` under ``options``."""
    from ..models.catalog import DEDUPE_COSINE, EMBEDDING_MODEL, find_entry

    entry = find_entry(part)
    merge, floor = entry.dedupe_cosine if entry is not None else DEDUPE_COSINE
    hi = options.semantic if options.semantic is not None else merge
    low = options.semantic_low if options.semantic_low is not None else min(floor, hi)
    if low > hi:  # DedupeOptions.check refuses this for every part first; kept for a direct caller
        raise ConfigError(f"semantic_low {low} is above the merging cosine {hi} of {part}",
                          hint="the band is [semantic-low, semantic): give --semantic too, or a lower --semantic-low "
                               "(equal to the merging cosine: no band)")
    given = [f"{name} {value}" for name, value, own in (("semantic", options.semantic, merge),
                                                           ("semantic_low", options.semantic_low, floor))
             if value is not None and value != own]
    # said when the text chose a part other than the English one, whose scale given numbers were long written for
    note = (f"{' and '.join(given)} applied to {part}, whose own are {merge} / {floor} (its cosines have their own "
            "scale: name the part with --part to choose it)") if given and not options.part and \
        part != EMBEDDING_MODEL else ""
    return hi, (low if low < hi else None), note


def semantic_groups(texts: Sequence[str], options: DedupeOptions) -> list[PartGroup]:
    """The records each part reads (one group per part, ordered by the part's name), with its cosines."""
    from ..models.catalog import EMBEDDING_MODEL

    rows: dict[str, list[int]] = {}
    left_out, named_reads_cjk = 0, not options.part or reads_cjk(options.part)
    for index, text in enumerate(texts):
        part = record_part(text)
        if options.part:
            if part != EMBEDDING_MODEL and not named_reads_cjk:
                left_out += 1
                continue
            part = options.part
        rows.setdefault(part, []).append(index)
    if options.part and left_out:
        rows.setdefault(options.part, [])
    groups = []
    for part in sorted(rows):
        hi, low, note = part_cosines(part, options)
        groups.append(PartGroup(part, hi, low, tuple(rows[part]), note, left_out if part == options.part else 0))
    return groups


def floor_refused(options: DedupeOptions) -> str:
    """Why a ``semantic_low`` given without ``semantic`` cannot serve: above the merging cosine of a part the run
    could use (the named one, else every catalog part) — '' when it can."""
    from ..models.catalog import CATALOG, find_entry

    if options.semantic is not None or options.semantic_low is None:
        return ""
    entries = [find_entry(options.part)] if options.part else [e for e in CATALOG if e.kind == "embedding"]
    merges = {e.name: e.dedupe_cosine[0] for e in entries if e is not None}
    low = [f"{merge} ({name})" for name, merge in merges.items() if merge < options.semantic_low]
    return f"semantic_low {options.semantic_low} is above the merging cosine {', '.join(low)}" if low else ""


def group_pairs(texts: Sequence[str], group: PartGroup, spread: Any = None
                ) -> Flow[tuple[list[SemanticPair], str] | str]:
    """The semantic pairs among the group's records (indices into ``texts``, at least its band floor or merging
    cosine) and the cut note, or why the part could not read them."""
    from ..structured.part_flows import part_vectors
    from .semantic import SemanticPair, semantic_pairs

    own = [texts[i] for i in group.rows]
    if not own and group.left_out:
        return f"{group.part} does not read the {group.left_out} records' CJK text"
    if len(own) < 2:
        return [], ""
    vectors: list[list[float]] | None
    if spread is not None:
        vectors, cut = spread.vectors(own, group.part)
    else:
        vectors, cut = yield from part_vectors(own, group.part)
    if vectors is None:
        return str(cut)
    low = group.floor if group.floor is not None else group.merge
    found = [SemanticPair(group.rows[p.a], group.rows[p.b], p.cosine)
             for p in semantic_pairs(vectors, low=low, spread=spread)]
    return found, cut  # the cut note's indices are the group's (only their count is reported)
