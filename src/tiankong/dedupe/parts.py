"""Which embedding part reads which records in dedupe's semantic stage, and at which cosines.

The part follows the text **record by record** (``reading_part``): a Chinese record is read by the catalog's
multilingual part (multilingual-e5-small), every other record by the English one (MiniLM — records in Latin letters
too: its thresholds were measured on tickets and Restaurant's names and addresses). The two groups are searched
apart: one part's vectors cannot be compared with the other's, so a Chinese record and an English one are never a
semantic pair (a mixed corpus told by its first texts only would have embedded the other language's records with a
part that cannot read them). A part named in the options (``part``) reads every record instead, and refuses a
language it cannot read (the stage is skipped and the report says why).

Each part merges at its own default cosines (``CatalogEntry.dedupe_cosine``: MiniLM 0.9 with the uncertain band from
0.8; e5's cosines crowd near 1, so 0.95 — CNSD STS-B dev's best — with the band from 0.93). A threshold given in the
options wins; a given band floor above the merging cosine is an error (it would silently raise the merge, the index
being searched from the floor), and a floor equal to it means no band.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..structured.flow import Flow

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


def reading_part(texts: Sequence[str]) -> str:
    """The catalog part that reads ``texts``: the English part wherever ``retrieval.part_reads`` lets it read
    (lenient: only Chinese is refused), the multilingual part on Chinese text."""
    from ..models.catalog import EMBEDDING_MODEL, MULTILINGUAL_EMBEDDING_MODEL
    from ..tasks.retrieval import part_reads

    return MULTILINGUAL_EMBEDDING_MODEL if part_reads(EMBEDDING_MODEL, texts) else EMBEDDING_MODEL


@dataclass(frozen=True)
class PartGroup:
    """Records (``rows``: indices of the texts) one part reads, and the cosines it merges and bands at."""

    part: str
    merge: float
    floor: float | None  # the uncertain band is [floor, merge); None: no band
    rows: tuple[int, ...]
    note: str = ""  # a given threshold applied to a part whose own differs

    def report(self) -> dict[str, Any]:
        return {"records": len(self.rows), "threshold": self.merge, "band": self.floor}


def part_cosines(part: str, options: DedupeOptions) -> tuple[float, float | None, str]:
    """``(merging cosine, band floor or None, note)`` of ``part`` under ``options``."""
    from ..models.catalog import DEDUPE_COSINE, EMBEDDING_MODEL, find_entry

    entry = find_entry(part)
    merge, floor = entry.dedupe_cosine if entry is not None else DEDUPE_COSINE
    hi = options.semantic if options.semantic is not None else merge
    low = options.semantic_low if options.semantic_low is not None else min(floor, hi)
    if low > hi:
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
    """The records each part reads (one group per part, in the catalog's order of the names), with its cosines;
    a bad threshold is a ``ConfigError`` here, before any stage runs."""
    rows: dict[str, list[int]] = {}
    for index, text in enumerate(texts):
        rows.setdefault(options.part or reading_part([text]), []).append(index)
    groups = []
    for part in sorted(rows):
        hi, low, note = part_cosines(part, options)
        groups.append(PartGroup(part, hi, low, tuple(rows[part]), note))
    return groups


def group_pairs(texts: Sequence[str], group: PartGroup, spread: Any = None
                ) -> Flow[tuple[list[SemanticPair], str] | str]:
    """The semantic pairs among the group's records (indices into ``texts``, at least its band floor or merging
    cosine) and the cut note, or why the part could not read them."""
    from ..structured.part_flows import part_vectors
    from ..tasks.retrieval import part_reads
    from .semantic import SemanticPair, semantic_pairs

    own = [texts[i] for i in group.rows]
    if len(own) < 2:
        return [], ""
    unread = part_reads(group.part, own)
    if unread:
        return unread
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
    cut = ",".join(str(group.rows[int(i)]) for i in cut.split(",")) if cut else ""
    return found, cut
