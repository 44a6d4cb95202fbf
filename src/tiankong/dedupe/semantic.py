"""Semantic duplicates: sentence vectors from the catalog's embedding part, neighbours from a faiss HNSW index.

The vectors come from ``structured.part_flows.part_vectors`` (the part's own engine, started on first use); they
are L2-normalised so the index's inner product is the cosine. ``faiss.IndexHNSWFlat`` is built single-threaded
(OpenMP off for the build, restored after) so the same input gives the same graph, and so the same pairs, on every
run; small inputs (up to ``EXACT_BELOW`` vectors) use the exact flat index, which costs less than the graph there.
:func:`search_index` is the search on its own, for a serialized index and some of the queries (a Ray partition).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

#: neighbours asked per vector (a record with more semantic duplicates than this still joins their cluster
#: through the others' lists)
NEIGHBOURS = 16
#: below this many vectors the flat (exact) inner-product index is used
EXACT_BELOW = 2048
HNSW_M = 32
HNSW_EF_CONSTRUCTION = 80
HNSW_EF_SEARCH = 64
#: faiss's flat search switches to BLAS from this many queries at once, and BLAS's blocking makes a query's floats
#: (and so its neighbours among near-ties) depend on the other queries in the batch; above any input size, each
#: query is scored on its own: the same neighbours searched at once or in partitions (``search_index``, a Ray job)
PER_QUERY = 1 << 30


@dataclass(frozen=True)
class SemanticPair:
    a: int
    b: int
    cosine: float


def semantic_pairs(vectors: Sequence[Sequence[float]], *, low: float, neighbours: int = NEIGHBOURS,
                   spread: Any = None) -> list[SemanticPair]:
    """Pairs ``(a < b)`` whose cosine is at least ``low``, found among each vector's nearest ``neighbours``;
    ``spread``: searches the index in partitions of the queries instead (``core.Spread``; the index is built here
    and shipped, so the graph — and the pairs — are the same as searched in place)."""
    import faiss

    if len(vectors) < 2:
        return []
    matrix = np.ascontiguousarray(np.asarray(vectors, dtype=np.float32))
    faiss.normalize_L2(matrix)
    dim = matrix.shape[1]
    with deterministic():
        index: faiss.Index
        if len(matrix) < EXACT_BELOW:
            index = faiss.IndexFlatIP(dim)
        else:
            graph = faiss.IndexHNSWFlat(dim, HNSW_M, faiss.METRIC_INNER_PRODUCT)
            graph.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
            graph.hnsw.efSearch = max(HNSW_EF_SEARCH, neighbours + 1)
            index = graph
        index.add(matrix)
        wanted = min(neighbours + 1, len(matrix))
        if spread is not None:
            scores, found = spread.search(faiss.serialize_index(index), matrix, wanted)
        else:
            scores, found = index.search(matrix, wanted)
    best: dict[tuple[int, int], float] = {}
    for a in range(len(matrix)):
        for score, b in zip(scores[a].tolist(), found[a].tolist(), strict=True):
            if b < 0 or b == a or score < low:
                continue
            key = (a, b) if a < b else (b, a)
            best[key] = max(best.get(key, -1.0), round(float(score), 6))
    return [SemanticPair(a, b, score) for (a, b), score in sorted(best.items())]


def search_index(index_bytes: Any, queries: np.ndarray[Any, Any], wanted: int) -> tuple[Any, Any]:
    """``(scores, ids)`` of ``queries``' nearest ``wanted`` in a ``faiss.serialize_index`` array, single-threaded
    (the same answers as the index searched where it was built)."""
    import faiss

    with deterministic():
        index = faiss.deserialize_index(index_bytes)
        return index.search(np.ascontiguousarray(queries, dtype=np.float32), wanted)


@contextmanager
def deterministic() -> Iterator[None]:
    """One OpenMP thread (the same graph on every build) and each query scored on its own (``PER_QUERY``), faiss's
    process-wide settings restored after."""
    import faiss

    threads, blas = faiss.omp_get_max_threads(), faiss.cvar.distance_compute_blas_threshold
    faiss.omp_set_num_threads(1)
    faiss.cvar.distance_compute_blas_threshold = PER_QUERY
    try:
        yield
    finally:
        faiss.omp_set_num_threads(threads)
        faiss.cvar.distance_compute_blas_threshold = blas
