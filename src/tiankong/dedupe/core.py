"""Dedupe as a sans-I/O flow: exact keys, MinHash LSH, the embedding part's cosine, an optional decider for the
uncertain band; union-find clusters; a kept record per cluster by a rule.

The stages run in order on what the earlier ones left: exact groups are found first (``keys.py``), near and semantic
pairs are searched among one member per exact group only. A pair at or above a stage's threshold merges its two
clusters; a pair in the stage's uncertain band (``low ≤ score < threshold``) is merged only when the decider
(``decider=NAME``, ``band.py``) says "same", otherwise it is left apart and reported as uncertain. The only calls the
flow yields are the embedding part's (``part_vectors``) and the decider's; MinHash, the index and the clustering are
computed in place, so the same flow serves the library, the CLI and ``POST /v1/tasks/dedupe``.

Deterministic: fixed MinHash seed, a single-threaded index build, pairs sorted, clusters named by their first
record (input order), ties of the kept rule broken by input order.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from ..errors import ConfigError
from ..structured.flow import Flow
from .band import decide_band, pair_decider
from .keys import KeyOptions, digest
from .parts import PartGroup, floor_refused, group_pairs, semantic_groups

Stage = Literal["exact", "near", "semantic"]
STAGES: tuple[Stage, ...] = ("exact", "near", "semantic")


@dataclass(frozen=True)
class Record:
    """One input record: its id, the text compared, and every field (for the kept rules)."""

    id: str | int
    text: str
    fields: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:  # Record(1, 123) failed deep in unicodedata with a TypeError
        if not isinstance(self.text, str):
            raise ConfigError(f"record {self.id!r}: the text is a {type(self.text).__name__}, not a str",
                              hint="pass the text to compare as a str")


class Spread(Protocol):
    """The stages' arithmetic in partitions — the same numbers as in place, so the same clusters (a Ray job's:
    ``batch/ray_dedupe.py``). ``None`` in the options: everything runs in this process."""

    def signatures(self, texts: Sequence[str], k: int | Sequence[int], num_perm: int) -> Any:
        """``near.signatures`` over ``texts`` (``k``: one shingle size, or each text's)."""

    def bands(self, rows: Any, ranges: Sequence[tuple[int, int]]) -> tuple[Any, Any]:
        """``near.candidate_pairs`` of the signature ``rows`` over the bands ``ranges``."""

    def search(self, index_bytes: Any, queries: Any, wanted: int) -> tuple[Any, Any]:
        """``semantic.search_index`` of every query row."""

    def vectors(self, texts: Sequence[str], part: str) -> tuple[list[list[float]] | None, str]:
        """``part_flows.part_vectors`` of ``texts`` (the same vectors and cut note), embedded where it runs."""


@dataclass(frozen=True)
class DedupeOptions:
    """Thresholds and rules; the defaults are the CLI's and the HTTP body's."""

    near: float = 0.7  # MinHash Jaccard estimate that merges
    near_low: float | None = None  # near pairs in [near_low, near) are uncertain (None: no band)
    #: cosine of the part's sentence vectors that merges (None: the part's own, ``CatalogEntry.dedupe_cosine``:
    #: 0.9 for MiniLM, 0.95 for e5)
    semantic: float | None = None
    #: semantic pairs in [semantic_low, semantic) are uncertain (None: the part's floor, 0.8 / 0.93, kept at most
    #: ``semantic``; equal to ``semantic``: no band)
    semantic_low: float | None = None
    shingle: int | None = None  # characters per shingle (None: 3 for mostly-CJK text, else 5)
    keep: str = "first"  # first | longest | most-complete | field:NAME
    stages: tuple[Stage, ...] = STAGES
    decider: str | None = None  # decides the uncertain band
    part: str = ""  # the embedding part of every record ('': per record, ``parts.record_part``)
    keys: KeyOptions = KeyOptions()
    #: where the heavy arithmetic runs (:class:`Spread`; None: here); not part of the options' identity
    spread: Spread | None = field(default=None, compare=False, repr=False)

    def check(self) -> DedupeOptions:
        for name in ("near", "semantic"):
            value, low = getattr(self, name), getattr(self, f"{name}_low")
            for what, number in ((name, value), (f"{name}_low", low)):
                if number is not None and not 0.0 < number <= 1.0:
                    raise ConfigError(f"{what} threshold {number} is outside (0, 1]",
                                      hint=f"give --{what.replace('_', '-')} a number such as 0.8", param=what)
            if low is not None and value is not None and low > value:
                raise ConfigError(f"{name}_low {low} must be at most {name} ({value})",
                                  hint="the uncertain band is [low, threshold)", param=f"{name}_low")
        if refused := floor_refused(self):
            raise ConfigError(refused, hint="the band is [semantic-low, semantic): give --semantic too, or a lower "
                              "--semantic-low")
        if self.part:
            from ..models.catalog import find_entry

            entry = find_entry(self.part)
            if entry is None or entry.kind != "embedding":
                raise ConfigError(f"unknown embedding part {self.part!r}", hint="use all-minilm-l6-v2:f16 or "
                                  "multilingual-e5-small:q4_0 (`tiankong models list`), or leave it out")
        if self.shingle is not None and not 1 <= self.shingle <= 64:
            raise ConfigError(f"shingle size {self.shingle} is outside 1..64", hint="use 3 to 9 characters")
        unknown = [s for s in self.stages if s not in STAGES]
        if unknown or not self.stages:
            raise ConfigError(f"unknown or no stages {unknown or '(none)'}", hint=f"choose from {', '.join(STAGES)}")
        # an option of a stage left out is refused, not silently ignored (a threshold with a default, ``near``: when
        # it differs from it)
        defaults = {"near": DedupeOptions.near}
        for option, stage in (("shingle", "near"), ("near_low", "near"), ("near", "near"), ("semantic", "semantic"),
                              ("semantic_low", "semantic"), ("part", "semantic")):
            if getattr(self, option) not in (None, "", defaults.get(option)) and stage not in self.stages:
                raise ConfigError(f"{option} applies to the {stage} stage, which stages {list(self.stages)} leaves "
                                  "out", hint=f"add {stage} to the stages, or leave {option} out", param=option)
        if self.keep not in ("first", "longest", "most-complete") and not (
                self.keep.startswith("field:") and len(self.keep) > 6):
            raise ConfigError(f"unknown keep rule {self.keep!r}", hint="use first, longest, most-complete or "
                              "field:NAME (the record with the largest NAME is kept)")
        return self


DEFAULTS = DedupeOptions()
#: an uncertain pair: record indices, the stage, its score and the part that scored it (semantic only)
Uncertain = tuple[int, int, Stage, float, str | None]


@dataclass(frozen=True)
class Evidence:
    """One pair that joined two records (or, ``merged=False``, one left apart as uncertain)."""

    stage: Stage
    other: str | int
    score: float
    merged: bool = True
    decided_by: str | None = None  # the decider that decided this uncertain pair
    p_same: float | None = None
    part: str | None = None  # the embedding part whose cosine ``score`` is (semantic only: each part has its scale)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"stage": self.stage, "with": self.other, "score": self.score, "merged": self.merged}
        if self.part is not None:
            data["part"] = self.part
        if self.decided_by is not None:
            data.update(decided_by=self.decided_by, p_same=self.p_same)
        return data


@dataclass
class Assignment:
    """A record's line of the output: its cluster, whether it is kept, and the pairs that put it there."""

    id: str | int
    cluster: str | int
    kept: bool
    evidence: list[Evidence]

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "cluster": self.cluster, "kept": self.kept,
                "evidence": [e.to_json() for e in self.evidence]}


@dataclass
class Dedupe:
    """Every record's assignment (input order) and a report: counts per stage, and why a stage was skipped."""

    records: list[Assignment]
    report: dict[str, Any]

    def clusters(self) -> list[dict[str, Any]]:
        """``[{ids, kept, evidence}]``, one per cluster in order of its first record; evidence: merged pairs
        and uncertain ones, each once."""
        by: dict[str | int, dict[str, Any]] = {}
        for a in self.records:
            entry = by.setdefault(a.cluster, {"ids": [], "kept": None, "evidence": []})
            entry["ids"].append(a.id)
            if a.kept:
                entry["kept"] = a.id
        seen: set[tuple[str, ...]] = set()
        for a in self.records:
            for e in a.evidence:
                key = (e.stage, *sorted((repr(a.id), repr(e.other))))
                if key not in seen:
                    seen.add(key)
                    by[a.cluster]["evidence"].append({"a": a.id, **e.to_json(), "b": e.other})
        for entry in by.values():
            for item in entry["evidence"]:
                item["ids"] = [item.pop("a"), item.pop("b")]
                item.pop("with")
        return list(by.values())

    def kept_ids(self) -> list[str | int]:
        return [a.id for a in self.records if a.kept]

    def to_json(self) -> dict[str, Any]:
        return {"clusters": self.clusters(), "report": self.report}


class _Forest:
    """Union-find over record indices (path halving); the root of a set is its smallest index."""

    def __init__(self, n: int) -> None:
        self.parent = list(range(n))

    def find(self, i: int) -> int:
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def union(self, a: int, b: int) -> bool:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return False
        self.parent[max(ra, rb)] = min(ra, rb)
        return True


def dedupe_flow(records: Sequence[Record], options: DedupeOptions | None = None) -> Flow[Dedupe]:
    """Clusters of duplicate ``records`` (ids unique) and the evidence for every merge; see the module."""
    options = (options or DEFAULTS).check()
    check_ids(records)
    check_keep_field(records, options.keep)
    decider = pair_decider(options.decider)  # a wrong name fails now, not only when some pair falls in the band
    n = len(records)
    forest = _Forest(n)
    evidence: list[list[Evidence]] = [[] for _ in range(n)]
    report: dict[str, Any] = {"records": n, "stages": {}, "notes": []}

    def link(a: int, b: int, stage: Stage, score: float, part: str | None, merged: bool = True,
             decided_by: str | None = None, p_same: float | None = None) -> bool:
        joined = forest.union(a, b) if merged else forest.find(a) != forest.find(b)
        if joined:
            evidence[a].append(Evidence(stage, records[b].id, score, merged, decided_by, p_same, part))
            evidence[b].append(Evidence(stage, records[a].id, score, merged, decided_by, p_same, part))
        return joined

    # exact: one group per normalised key; the later members joined to the first. A text with nothing left after
    # normalising (only emoji, symbols or spaces: "👍", "😡😡", "!!!") is no one's copy: its own group
    first: dict[str, int] = {}
    exact_merged = empty = 0
    normalised = [options.keys.normalise(record.text) for record in records]
    for i, text in enumerate(normalised):
        empty += not text
        key = digest(text) if "exact" in options.stages and text else f"#{i}"
        if key in first:
            exact_merged += link(first[key], i, "exact", 1.0, None)
        else:
            first[key] = i
    if "exact" in options.stages:
        report["stages"]["exact"] = {"merged": exact_merged}
    if empty:
        report["notes"].append(f"{empty} record(s) hold nothing but symbols, emoji or spaces after normalising: "
                               "each left in a cluster of its own")
    # one record per exact group, with some text: the later stages compare these
    heads = sorted(i for i in first.values() if normalised[i])
    texts = [normalised[i] for i in heads]
    groups = semantic_groups(texts, options) if "semantic" in options.stages else []  # bad thresholds fail here
    uncertain: list[Uncertain] = []

    def apply(stage: Stage, pairs: list[tuple[int, int, float]], hi: float, low: float | None,
              part: str | None = None) -> dict[str, Any]:
        merged = found = band = 0
        for a, b, score in pairs:
            found += 1
            if score >= hi:
                merged += link(heads[a], heads[b], stage, score, part)
            elif low is not None and score >= low:
                band += 1
                uncertain.append((heads[a], heads[b], stage, score, part))
        return {"pairs": found, "merged": merged, "uncertain": band}

    if "near" in options.stages:
        from .near import near_pairs, near_pairs_sized  # noqa: PLC0415 (numpy: not loaded by --help or registry)

        low = options.near_low if options.near_low is not None else options.near
        shingle: int | dict[str, int]
        if options.shingle:
            found = near_pairs(texts, low=low, k=options.shingle, spread=options.spread) if len(texts) > 1 else []
            shingle = options.shingle
        else:  # each record's size from its script; mixed records at both (near.MIXED)
            found, counts = near_pairs_sized(texts, low=low, spread=options.spread)
            # one size, or how many records were compared at each (a file of Chinese and English records)
            shingle = next(iter(counts)) if len(counts) == 1 else {str(n): counts[n] for n in sorted(counts)}
        stats = apply("near", [(p.a, p.b, p.jaccard) for p in found], options.near, options.near_low)
        report["stages"]["near"] = {"threshold": options.near, "band": options.near_low, "shingle": shingle, **stats}
    if "semantic" in options.stages:
        report["stages"]["semantic"] = yield from _semantic_stage(texts, groups, options, apply, report["notes"])
    report["uncertain"] = yield from decide_band(uncertain, [r.text for r in records], decider, link,
                                                 lambda a, b: forest.find(a) == forest.find(b), report)
    return _assign(records, forest, evidence, options.keep, report)


def _semantic_stage(texts: list[str], groups: list[PartGroup], options: DedupeOptions, apply: Any,
                    notes: list[str]) -> Flow[dict[str, Any]]:
    """Each part's group searched on its own (``parts.py``): the stage's totals and, per part, its records,
    cosines and counts — or why it was skipped (all skipped: the stage is)."""
    totals = {"pairs": 0, "merged": 0, "uncertain": 0}
    parts: dict[str, dict[str, Any]] = {}
    for group in groups:
        found = yield from group_pairs(texts, group, options.spread)
        if isinstance(found, str):
            count = len(group.rows) + group.left_out
            parts[group.part] = {"records": count, "skipped": found}
            notes.append(f"semantic stage skipped for {count} records: {found}")
            continue
        pairs, cut = found
        stats = apply("semantic", [(p.a, p.b, p.cosine) for p in pairs], group.merge, group.floor, group.part)
        parts[group.part] = {**group.report(), **stats}
        totals = {k: v + stats[k] for k, v in totals.items()}
        notes += [group.note] if group.note else []
        if cut:
            notes.append(f"{len(cut.split(','))} texts were cut to the embedding part's context ({group.part})")
    skipped = [f"{part}: {p['skipped']}" if len(parts) > 1 else str(p["skipped"]) for part, p in parts.items()
               if "skipped" in p]
    if parts and len(skipped) == len(parts):
        return {"skipped": "; ".join(skipped), "parts": parts}
    return {**totals, "parts": parts}


def check_ids(records: Sequence[Record]) -> None:
    """Unique ids as written (``--keep-ids`` writes ``1`` and ``"1"`` alike: they are one id)."""
    seen: dict[str, int] = {}
    for index, record in enumerate(records):
        written = str(record.id)
        if written in seen:
            raise ConfigError(f"record {index + 1} has the id {record.id!r} of record {seen[written] + 1}",
                              hint="ids must be unique (1 and \"1\" are one id): fix or renumber them",
                              param=f"records[{index}].id")
        seen[written] = index


def check_keep_field(records: Sequence[Record], keep: str) -> None:
    """``--keep field:NAME`` names a field some record has (a typo kept the first of every cluster, silently)."""
    name = keep.removeprefix("field:") if keep.startswith("field:") else None
    if name is not None and records and not any(name in r.fields for r in records):
        raise ConfigError(f"no record has the field {name!r} that keep=field:{name} ranks by",
                          hint="name a field of the records, or keep first, longest or most-complete", param="keep")


def _assign(records: Sequence[Record], forest: _Forest, evidence: list[list[Evidence]], keep: str,
            report: dict[str, Any]) -> Dedupe:
    members: dict[int, list[int]] = {}
    for i in range(len(records)):
        members.setdefault(forest.find(i), []).append(i)
    kept = {root: _kept(records, group, keep) for root, group in members.items()}
    out = []
    for i, record in enumerate(records):
        root = forest.find(i)
        order = {"exact": 0, "near": 1, "semantic": 2}
        ev = sorted(evidence[i], key=lambda e: (not e.merged, order[e.stage], -e.score, repr(e.other)))
        out.append(Assignment(record.id, records[root].id, kept[root] == i, ev))
    report["clusters"] = len(members)
    report["duplicates"] = len(records) - len(members)
    report["kept"] = keep
    return Dedupe(out, report)


#: a text that is a number (``--keep field:NAME`` compares it as one): no inf, no nan, no thousands separators
_NUMERIC = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def _kept(records: Sequence[Record], group: list[int], rule: str) -> int:
    """The index of the kept record of a cluster (``group`` in input order); ties go to the first."""
    if rule == "first":
        return group[0]
    if rule == "longest":
        return max(group, key=lambda i: (len(records[i].text), -i))
    if rule == "most-complete":
        return max(group, key=lambda i: (sum(v not in (None, "", [], {}) for v in records[i].fields.values()),
                                         len(records[i].text), -i))
    name = rule.removeprefix("field:")

    def value(i: int) -> tuple[int, Any, int]:
        v = records[i].fields.get(name)
        if v is None or v == "":
            return (0, 0, -i)
        if isinstance(v, str) and _NUMERIC.fullmatch(v.strip()):  # a CSV cell is text: "100" is a hundred, above "9"
            v = int(v) if v.strip().lstrip("+-").isdigit() else float(v)
        return (2, v, -i) if isinstance(v, (int, float)) and not isinstance(v, bool) else (1, str(v), -i)

    try:
        return max(group, key=value)
    except TypeError:  # numbers and text mixed across kinds never compare: kinds are ranked first
        return group[0]
