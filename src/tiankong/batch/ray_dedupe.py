"""A ``dedupe`` job on Ray (``ray`` set in the job, ``tiankong batch run --kind dedupe --ray [ADDRESS]``).

:class:`RaySpread` is the flow's ``Spread`` (``dedupe/core.py``) on a cluster — the same numbers as in place, so the
same clusters — and the driver alone writes ``OUT``, once (``batch/whole.py``):

- the MinHash **signatures** (128 permutations of every shingle of every record) in partitions of the records;
- the LSH **bands**: the signature matrix is put in the object store once and the bands are split between tasks
  (bands are independent; the driver takes the union of their candidate codes);
- the semantic stage's **ANN search**: the faiss index is built on the driver (one deterministic graph) and
  shipped serialized; the queries are searched in partitions. The vectors come from the driver's embedding part.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

#: records per signature partition at least (a task's overhead is milliseconds; 2,000 texts take ~0.2 s)
MIN_PARTITION = 2000
#: queries per search partition at least
MIN_SEARCH_PARTITION = 256


def _sign_partition(texts: list[str], k: int, num_perm: int) -> Any:
    from ..dedupe.near import signatures

    return signatures(texts, k, num_perm)


def _band_partition(rows: Any, ranges: list[tuple[int, int]]) -> Any:
    from ..dedupe.near import band_codes

    return band_codes(rows, ranges)


def _search_partition(index_bytes: Any, queries: Any, wanted: int) -> Any:
    from ..dedupe.semantic import search_index

    return search_index(index_bytes, queries, wanted)


class RaySpread:
    """The dedupe stages' arithmetic over a Ray cluster; ``partitions``: how many tasks each kind sent."""

    def __init__(self, address: str | None) -> None:
        from .ray_exec import connect

        self.ray = connect(address)
        self.sign_task = self.ray.remote(num_cpus=1)(_sign_partition)
        self.band_task = self.ray.remote(num_cpus=1)(_band_partition)
        self.search_task = self.ray.remote(num_cpus=1)(_search_partition)
        self.cpus = max(1, int(self.ray.cluster_resources().get("CPU", 1)))
        self.partitions = {"signatures": 0, "bands": 0, "search": 0}

    def signatures(self, texts: Sequence[str], k: int, num_perm: int) -> Any:
        size = max(MIN_PARTITION, math.ceil(len(texts) / self.cpus))
        chunks = [list(texts[i:i + size]) for i in range(0, len(texts), size)]
        self.partitions["signatures"] += len(chunks)
        parts = self.ray.get([self.sign_task.remote(chunk, k, num_perm) for chunk in chunks])
        return np.vstack(parts) if parts else np.empty((0, num_perm), dtype=np.uint32)

    def bands(self, rows: Any, ranges: Sequence[tuple[int, int]]) -> tuple[Any, Any]:
        from ..dedupe.near import split_codes

        groups = [list(ranges[i::self.cpus]) for i in range(min(self.cpus, len(ranges)))]
        if len(rows) < MIN_PARTITION:
            groups = [list(ranges)]
        shared = self.ray.put(rows)
        self.partitions["bands"] += len(groups)
        found = [c for c in self.ray.get([self.band_task.remote(shared, group) for group in groups]) if len(c)]
        codes = np.unique(np.concatenate(found)) if found else np.zeros(0, dtype=np.int64)
        return split_codes(codes, len(rows))

    def search(self, index_bytes: Any, queries: Any, wanted: int) -> tuple[Any, Any]:
        size = max(MIN_SEARCH_PARTITION, math.ceil(len(queries) / self.cpus))
        shared = self.ray.put(index_bytes)
        chunks = [queries[i:i + size] for i in range(0, len(queries), size)]
        self.partitions["search"] += len(chunks)
        parts = self.ray.get([self.search_task.remote(shared, chunk, wanted) for chunk in chunks])
        return np.vstack([p[0] for p in parts]), np.vstack([p[1] for p in parts])

    def describe(self) -> dict[str, Any]:
        return {"cpus": self.cpus, "nodes": len([n for n in self.ray.nodes() if n.get("Alive")]),
                "partitions": dict(self.partitions)}

    def close(self) -> None:
        self.ray.shutdown()
