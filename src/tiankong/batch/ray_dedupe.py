"""A ``dedupe`` job on Ray (``ray`` set in the job, ``tiankong batch run --kind dedupe --ray [ADDRESS]``).

:class:`RaySpread` is the flow's ``Spread`` (``dedupe/core.py``) on a cluster — the same numbers as in place, so the
same clusters — and the driver alone writes ``OUT``, once (``batch/whole.py``):

- the MinHash **signatures** (128 permutations of every shingle of every record) in partitions of the records;
- the LSH **bands**: the signature matrix is put in the object store once and the bands are split between tasks
  (bands are independent; the driver takes the union of their candidate codes);
- the semantic stage's **vectors**: each partition of the texts is embedded by a task that installs the embedding
  part on its node if missing (``ray_exec.ensure_model``), starts it there, embeds and stops it. Partitions are
  whole multiples of the part's request batch (``EMBED_BATCH``), so every request holds the texts it holds in place;
  the numbers can still differ from the driver's by float noise (the part batches concurrent requests as they come:
  cosines within 5e-5 measured on 2,000 records), so a pair that close to a threshold can fall the other way
  (Ray 1 and 2 nodes gave the same bytes; the local job differed in 3 of 2,000 records);
- the semantic stage's **ANN search**: the faiss index is built on the driver (one deterministic graph) and
  shipped serialized; the queries are searched in partitions.

Vectors embedded on the nodes are not journaled (the driver's part calls are): a resumed job embeds them again,
and the clusters are the same.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import ConfigError

#: records per signature partition at least (a task's overhead is milliseconds; 2,000 texts take ~0.2 s)
MIN_PARTITION = 2000
#: queries per search partition at least
MIN_SEARCH_PARTITION = 256
#: texts per vector partition at least (a node starts its own embedding part for it: about a second)
MIN_VECTOR_PARTITION = 256


def _sign_partition(texts: list[str], k: int | list[int], num_perm: int) -> Any:
    from ..dedupe.near import signatures

    return signatures(texts, k, num_perm)


def _band_partition(rows: Any, ranges: list[tuple[int, int]]) -> Any:
    from ..dedupe.near import band_codes

    return band_codes(rows, ranges)


def _search_partition(index_bytes: Any, queries: Any, wanted: int) -> Any:
    from ..dedupe.semantic import search_index

    return search_index(index_bytes, queries, wanted)


def _vector_partition(texts: list[str], part: str) -> tuple[list[list[float]] | None, str]:
    from ..dedupe.files import no_chat_engine
    from ..engine.parts import stop_parts
    from ..structured.drivers import run_sync
    from ..structured.part_flows import part_vectors
    from .ray_exec import ensure_model

    try:
        ensure_model(part)
    except ConfigError as exc:  # as in place without the part: the semantic stage is skipped, and the report says why
        return None, exc.one_line()
    try:
        return run_sync(part_vectors(texts, part), no_chat_engine)
    finally:
        stop_parts()  # the part engine lives as long as its task: no llama-server outlives the job


class RaySpread:
    """The dedupe stages' arithmetic over a Ray cluster; ``partitions``: how many tasks each kind sent."""

    def __init__(self, address: str | None) -> None:
        from .ray_exec import connect

        self.ray = connect(address)
        self.sign_task = self.ray.remote(num_cpus=1)(_sign_partition)
        self.band_task = self.ray.remote(num_cpus=1)(_band_partition)
        self.search_task = self.ray.remote(num_cpus=1)(_search_partition)
        self.vector_task = self.ray.remote(num_cpus=1)(_vector_partition)
        self.cpus = max(1, int(self.ray.cluster_resources().get("CPU", 1)))
        self.partitions = {"signatures": 0, "bands": 0, "vectors": 0, "search": 0}

    def signatures(self, texts: Sequence[str], k: int | Sequence[int], num_perm: int) -> Any:
        size = max(MIN_PARTITION, math.ceil(len(texts) / self.cpus))
        starts = range(0, len(texts), size)
        self.partitions["signatures"] += len(starts)
        parts = self.ray.get([self.sign_task.remote(list(texts[i:i + size]),
                                                    k if isinstance(k, int) else list(k[i:i + size]), num_perm)
                              for i in starts])
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

    def vectors(self, texts: Sequence[str], part: str) -> tuple[list[list[float]] | None, str]:
        from ..structured.part_flows import EMBED_BATCH

        size = max(MIN_VECTOR_PARTITION, math.ceil(len(texts) / self.cpus))
        size = math.ceil(size / EMBED_BATCH) * EMBED_BATCH  # whole requests: the same batches as in place
        starts = list(range(0, len(texts), size))
        self.partitions["vectors"] += len(starts)
        parts = self.ray.get([self.vector_task.remote(list(texts[i:i + size]), part) for i in starts])
        vectors: list[list[float]] = []
        cut: list[str] = []
        for start, (found, reason) in zip(starts, parts, strict=True):
            if found is None:
                return None, reason
            vectors += found
            cut += [str(start + int(i)) for i in reason.split(",") if i]
        return vectors, ",".join(cut)

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
