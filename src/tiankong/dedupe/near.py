"""Near duplicates: MinHash signatures of character shingles, candidate pairs from LSH banding (``datasketch``).

Character shingles rather than words, so Chinese (no spaces) and English go through one path; the shingle size
defaults by script, record by record (3 characters for mostly-CJK text, 5 otherwise — a CJK character carries about
as much as a short English word).

Signatures are datasketch's ``affine32`` scheme (its permutations ``h -> a*h + b mod 2^32`` from the fixed seed,
after the MurmurHash3 finalizer), computed in numpy over many records at once instead of one Python call per
shingle: a text's code points are one array, each ``k``-character window is hashed by a multilinear hash of its
code points (``sum(c_j * M_j) mod 2^64``, the high 32 bits), and the minimum of every permutation over a record's
window hashes is one ``np.minimum.reduceat``. Rows are kept in one ``uint32`` matrix (512 bytes a record);
``datasketch.MinHashLSH`` (banding tuned for the threshold) gives the candidates, and each candidate pair's
Jaccard is the signatures' estimate, all pairs in one vectorised comparison (``benchmarks/dedupe.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..structured.prompts import CJK_SCRIPT

NUM_PERM = 128
SEED = 1
SCHEME = "affine32"
#: the highest threshold datasketch bands for at 128 permutations (two bands of 64 rows)
BANDING_MAX = 0.98
#: the multilinear hash's multipliers (odd, 64-bit, fixed): window position j is multiplied by _MULT[j]
_MULT = (np.random.RandomState(SEED).randint(0, 1 << 62, 64, dtype=np.uint64) * np.uint64(2) + np.uint64(1))
_CHUNK_WINDOWS = 1 << 16  # windows per signature block: 65,536 x 128 permutations x 4 bytes = 32 MiB


def cjk_share(text: str) -> float:
    """The share of CJK characters among the letters and digits of (the first 200 characters of) ``text``."""
    sample = text[:200]
    letters = sum(1 for c in sample if c.isalnum())
    return len(CJK_SCRIPT.findall(sample)) / letters if letters else 0.0


def shingle_size(text: str) -> int:
    """3 when most letters and digits of (the first 200 characters of) ``text`` are CJK, else 5. Per record, not
    per file: a Chinese pair merged or not by whether a few English records were in the same file."""
    return 3 if cjk_share(text) > 0.5 else 5


#: records whose CJK share is in this range (mixed Chinese and English) are compared at both shingle sizes: two
#: copies of one mixed record on either side of the 0.5 line got sizes 3 and 5, whose shingles never match (a
#: pair that differed by one character was never compared)
MIXED = (0.3, 0.7)


def sized_groups(texts: Sequence[str]) -> dict[int, list[int]]:
    """The records compared at each shingle size: 3 for a CJK share from ``MIXED[0]`` up, 5 up to ``MIXED[1]`` —
    a mixed record in both. Two records whose shares differ by less than the overlap share a size."""
    shares = [cjk_share(t) for t in texts]
    groups = {3: [i for i, s in enumerate(shares) if s >= MIXED[0]],
              5: [i for i, s in enumerate(shares) if s <= MIXED[1]]}
    return {k: members for k, members in groups.items() if members}


def near_pairs_sized(texts: Sequence[str], *, low: float, spread: Any = None) -> tuple[list[NearPair],
                                                                                       dict[int, int]]:
    """``near_pairs`` with each record's shingle size from its script (``sized_groups``); a pair found at both
    sizes keeps its higher estimate. Also how many records were compared at each size."""
    best: dict[tuple[int, int], float] = {}
    groups = sized_groups(texts)
    for k, members in groups.items():
        if len(members) < 2:
            continue
        for pair in near_pairs([texts[i] for i in members], low=low, k=k, spread=spread):
            key = (members[pair.a], members[pair.b])
            best[key] = max(best.get(key, 0.0), pair.jaccard)
    return ([NearPair(a, b, s) for (a, b), s in sorted(best.items())],
            {k: len(members) for k, members in groups.items()})


Shingles = int | Sequence[int]  # one size for every text, or one per text


def _size(k: Shingles, index: int) -> int:
    return k if isinstance(k, int) else k[index]


def shingle_hashes(text: str, k: int) -> np.ndarray[Any, np.dtype[np.uint32]]:
    """The distinct 32-bit hashes of every ``k``-character window of ``text`` (the whole text when shorter)."""
    points = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32).astype(np.uint64)
    n = len(points)
    if n == 0:
        return np.zeros(1, dtype=np.uint32)  # the empty text: one fixed shingle, as every empty text shares
    width = min(k, n)
    count = n - width + 1
    acc = np.zeros(count, dtype=np.uint64)
    for j in range(width):  # uint64 arithmetic wraps: the hash is mod 2^64 by design
        acc += points[j:j + count] * _MULT[j]
    return np.unique((acc >> np.uint64(32)).astype(np.uint32))


def _fmix32(h: np.ndarray[Any, np.dtype[np.uint32]]) -> np.ndarray[Any, np.dtype[np.uint32]]:
    """MurmurHash3's 32-bit finalizer (as datasketch applies before its affine permutations)."""
    h = h ^ (h >> np.uint32(16))
    h = h * np.uint32(0x85EBCA6B)
    h = h ^ (h >> np.uint32(13))
    h = h * np.uint32(0xC2B2AE35)
    return h ^ (h >> np.uint32(16))


def signatures(texts: Sequence[str], k: Shingles, num_perm: int = NUM_PERM) -> np.ndarray[Any, np.dtype[np.uint32]]:
    """One MinHash row per text (``uint32``, ``num_perm`` wide): datasketch's affine32 permutations of seed 1; ``k``:
    the shingle size, or each text's."""
    from datasketch import MinHash

    a, b = (p.astype(np.uint32).reshape(-1, 1) for p in MinHash(num_perm=num_perm, seed=SEED,
                                                                   scheme=SCHEME).permutations)
    out = np.empty((len(texts), num_perm), dtype=np.uint32)
    start = 0
    while start < len(texts):
        hashes, offsets, total, end = [], [], 0, start
        while end < len(texts) and (total < _CHUNK_WINDOWS or end == start):
            h = shingle_hashes(texts[end], _size(k, end))
            offsets.append(total)
            hashes.append(h)
            total += len(h)
            end += 1
        mixed = _fmix32(np.concatenate(hashes)).reshape(1, -1)  # permutations down, windows across: rows
        out[start:end] = np.minimum.reduceat(a * mixed + b, np.asarray(offsets), axis=1).T  # reduce contiguously
        start = end
    return out


@dataclass(frozen=True)
class NearPair:
    a: int
    b: int
    jaccard: float


def near_pairs(texts: Sequence[str], *, low: float, k: Shingles, num_perm: int = NUM_PERM,
               spread: Any = None) -> list[NearPair]:
    """Pairs ``(a < b)`` whose estimated Jaccard is at least ``low``, by LSH banding tuned for ``low``; ``spread``:
    computes the signatures and the bands' candidates in partitions instead (``core.Spread``: the same numbers,
    e.g. on a Ray cluster)."""
    rows = spread.signatures(texts, k, num_perm) if spread is not None else signatures(texts, k, num_perm)
    ranges = band_ranges(low, num_perm)
    left, right = spread.bands(rows, ranges) if spread is not None else candidate_pairs(rows, ranges)
    if not len(left):
        return []
    scores = np.empty(len(left), dtype=np.float64)
    for at in range(0, len(left), 8192):  # the estimate: the share of equal signature positions
        scores[at:at + 8192] = (rows[left[at:at + 8192]] == rows[right[at:at + 8192]]).mean(axis=1)
    keep = scores >= low
    return [NearPair(int(x), int(y), float(s)) for x, y, s in zip(left[keep], right[keep], scores[keep], strict=True)]


def band_ranges(low: float, num_perm: int = NUM_PERM) -> list[tuple[int, int]]:
    """datasketch's banding for the threshold: the ``(start, end)`` signature slice of each band (``MinHashLSH``
    chooses bands and rows by minimising the false positive and negative areas at ``low``)."""
    from datasketch import MinHashLSH

    # datasketch finds no banding of 2+ bands past about 0.98 ("number of bands are too small"): candidates are
    # banded at 0.98 then and kept by their estimate, so a threshold of 0.99 or 1 still means what it says
    return [(int(a), int(b)) for a, b in MinHashLSH(threshold=min(low, BANDING_MAX), num_perm=num_perm).hashranges]


def candidate_pairs(rows: np.ndarray[Any, np.dtype[np.uint32]],
                    ranges: Sequence[tuple[int, int]]) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Every pair of rows equal in at least one band, ``a < b``, sorted: the candidates ``MinHashLSH.query``
    returns, found by sorting each band's 64-bit key instead of a dict of sets per band (about 16 bytes a record
    at a time, where the dicts take about 4 KB a record: ``benchmarks/dedupe.py --tiny``)."""
    return split_codes(band_codes(rows, ranges), len(rows))


def split_codes(codes: np.ndarray[Any, Any], n: int) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Pair codes ``a * n + b`` (sorted, unique) back into the ``a`` and ``b`` arrays."""
    return codes // n, codes % n


def band_codes(rows: np.ndarray[Any, np.dtype[np.uint32]], ranges: Sequence[tuple[int, int]]) -> np.ndarray[Any, Any]:
    """The candidates of the bands ``ranges`` as sorted unique codes ``a * n + b`` (bands are independent: a union
    of the codes of any split of the bands is the codes of all of them)."""
    n = len(rows)
    found: list[np.ndarray[Any, Any]] = []
    for start, end in ranges:
        keys = np.zeros(n, dtype=np.uint64)
        for j in range(start, end):  # the band's values folded into one key (wrapping uint64 arithmetic)
            keys = keys * np.uint64(0x9E3779B97F4A7C15) + rows[:, j].astype(np.uint64)
        order = np.argsort(keys, kind="stable")
        ranked = keys[order]
        edges = np.flatnonzero(ranked[1:] != ranked[:-1]) + 1
        starts = np.concatenate(([0], edges))
        sizes = np.diff(np.concatenate((starts, [n])))
        for at, size in zip(starts[sizes > 1], sizes[sizes > 1], strict=True):
            members = np.sort(order[at:at + size])
            band = rows[members, start:end]
            for block in range(0, size, 1024):  # the folded key's collisions left out; big buckets in blocks
                same = (band[block:block + 1024, None, :] == band[None, :, :]).all(axis=2)
                a, b = np.nonzero(np.triu(same, 1 + block))
                found.append(members[a + block].astype(np.int64) * n + members[b])
    if not found:
        return np.zeros(0, dtype=np.int64)
    return np.unique(np.concatenate(found))
