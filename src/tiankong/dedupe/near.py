"""Near duplicates: MinHash signatures of character shingles, candidate pairs from LSH banding (``datasketch``).

Character shingles rather than words, so Chinese (no spaces) and English go through one path; the shingle size
defaults by script (3 characters for mostly-CJK text, 5 otherwise — a CJK character carries about as much as a
short English word). Signatures are built with ``MinHash.bulk`` (hashing vectorised in numpy) and kept as
``LeanMinHash`` rows; each candidate pair's Jaccard is the signatures' estimate. Shingles are hashed with CRC-32
(``zlib``, in C) rather than datasketch's default SHA-1 prefix: three times faster, and the permutations that
follow spread its values (measured in ``benchmarks/dedupe.py``).
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af]")
NUM_PERM = 128
SEED = 1


def shingle_size(texts: Sequence[str]) -> int:
    """3 when most characters of a sample are CJK, else 5."""
    sample = "".join(t[:200] for t in texts[:200])
    letters = sum(1 for c in sample if c.isalnum())
    cjk = len(_CJK.findall(sample))
    return 3 if letters and cjk / letters > 0.5 else 5


def shingles(text: str, k: int) -> set[bytes]:
    """Every ``k``-character window of ``text`` (the whole text when shorter)."""
    if len(text) <= k:
        return {text.encode("utf-8")} if text else set()
    if text.isascii():  # one character per byte: slicing the bytes is the same windows, about twice as fast
        raw = text.encode("ascii")
        return {raw[i:i + k] for i in range(len(raw) - k + 1)}
    return {text[i:i + k].encode("utf-8") for i in range(len(text) - k + 1)}


@dataclass(frozen=True)
class NearPair:
    a: int
    b: int
    jaccard: float


def near_pairs(texts: Sequence[str], *, low: float, k: int, num_perm: int = NUM_PERM) -> list[NearPair]:
    """Pairs ``(a < b)`` whose estimated Jaccard is at least ``low``, by LSH banding tuned for ``low``."""
    from datasketch import LeanMinHash, MinHash, MinHashLSH

    lsh = MinHashLSH(threshold=low, num_perm=num_perm)
    signatures: list[LeanMinHash] = []
    batch = 1024
    for start in range(0, len(texts), batch):
        sets = [shingles(t, k) or {b""} for t in texts[start:start + batch]]
        for offset, minhash in enumerate(MinHash.bulk(sets, num_perm=num_perm, seed=SEED, hashfunc=zlib.crc32)):
            lean = LeanMinHash(minhash)
            lsh.insert(start + offset, lean, check_duplication=False)
            signatures.append(lean)
    found: list[NearPair] = []
    for a, signature in enumerate(signatures):
        for b in _later(lsh.query(signature), a):
            score = signature.jaccard(signatures[b])
            if score >= low:
                found.append(NearPair(a, b, float(score)))
    return found


def _later(candidates: Iterable[int], a: int) -> list[int]:
    return sorted(b for b in candidates if b > a)
