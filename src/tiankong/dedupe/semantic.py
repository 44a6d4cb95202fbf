"""Semantic duplicates: sentence vectors from the catalog's embedding part, neighbours from a faiss HNSW index.

The vectors come from ``structured.part_flows.part_vectors`` (the part's own engine, started on first use); they
are L2-normalised so the index's inner product is the cosine. ``faiss.IndexHNSWFlat`` is built single-threaded
(OpenMP off for the build, restored after) so the same input gives the same graph, and so the same pairs, on every
run; small inputs (up to ``EXACT_BELOW`` vectors) use the exact flat index, which costs less than the graph there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: neighbours asked per vector (a record with more semantic duplicates than this still joins their cluster
#: through the others' lists)
NEIGHBOURS = 16
#: below this many vectors the flat (exact) inner-product index is used
EXACT_BELOW = 2048
HNSW_M = 32
HNSW_EF_CONSTRUCTION = 80
HNSW_EF_SEARCH = 64


@dataclass(frozen=True)
class SemanticPair:
    a: int
    b: int
    cosine: float


def semantic_pairs(vectors: Sequence[Sequence[float]], *, low: float,
                   neighbours: int = NEIGHBOURS) -> list[SemanticPair]:
    """Pairs ``(a < b)`` whose cosine is at least ``low``, found among each vector's nearest ``neighbours``."""
    import faiss

    if len(vectors) < 2:
        return []
    matrix = np.ascontiguousarray(np.asarray(vectors, dtype=np.float32))
    faiss.normalize_L2(matrix)
    dim = matrix.shape[1]
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)  # a deterministic build (and search): the same graph on every run
    try:
        index: faiss.Index
        if len(matrix) < EXACT_BELOW:
            index = faiss.IndexFlatIP(dim)
        else:
            graph = faiss.IndexHNSWFlat(dim, HNSW_M, faiss.METRIC_INNER_PRODUCT)
            graph.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
            graph.hnsw.efSearch = max(HNSW_EF_SEARCH, neighbours + 1)
            index = graph
        index.add(matrix)
        scores, found = index.search(matrix, min(neighbours + 1, len(matrix)))
    finally:
        faiss.omp_set_num_threads(threads)
    best: dict[tuple[int, int], float] = {}
    for a in range(len(matrix)):
        for score, b in zip(scores[a].tolist(), found[a].tolist(), strict=True):
            if b < 0 or b == a or score < low:
                continue
            key = (a, b) if a < b else (b, a)
            best[key] = max(best.get(key, -1.0), round(float(score), 6))
    return [SemanticPair(a, b, score) for (a, b), score in sorted(best.items())]
