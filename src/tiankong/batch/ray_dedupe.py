"""A ``dedupe`` job on Ray (``ray`` set in the job, ``tiankong batch run --kind dedupe --ray [ADDRESS]``).

The MinHash signatures — the stage's arithmetic, 128 permutations of every shingle of every record — are computed
in partitions by Ray tasks spread over the cluster's CPUs (``tiankong.dedupe.near.signatures`` on each partition;
the same numbers as on one machine, so the same clusters). The driver stacks the partitions in input order, bands
them, runs the other stages and alone writes ``OUT``, once (``batch/whole.py``). The semantic stage's vectors come
from the driver's embedding part (not partitioned yet).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

#: records per partition at least (a task's overhead is milliseconds; a partition of 2,000 texts takes ~0.5 s)
MIN_PARTITION = 2000


def _sign_partition(texts: list[str], k: int, num_perm: int) -> Any:
    from ..dedupe.near import signatures

    return signatures(texts, k, num_perm)


class RaySigner:
    """``signatures`` over a Ray cluster: ``sign(texts, k, num_perm)``; ``partitions``: how many it sent."""

    def __init__(self, address: str | None) -> None:
        from .ray_exec import connect

        self.ray = connect(address)
        self.remote = self.ray.remote(num_cpus=1)(_sign_partition)
        self.cpus = max(1, int(self.ray.cluster_resources().get("CPU", 1)))
        self.partitions = 0

    def __call__(self, texts: Sequence[str], k: int, num_perm: int) -> Any:
        size = max(MIN_PARTITION, math.ceil(len(texts) / self.cpus))
        chunks = [list(texts[i:i + size]) for i in range(0, len(texts), size)]
        self.partitions += len(chunks)
        parts = self.ray.get([self.remote.remote(chunk, k, num_perm) for chunk in chunks])
        return np.vstack(parts) if parts else np.empty((0, num_perm), dtype=np.uint32)

    def describe(self) -> dict[str, Any]:
        return {"cpus": self.cpus, "nodes": len([n for n in self.ray.nodes() if n.get("Alive")]),
                "partitions": self.partitions}

    def close(self) -> None:
        self.ray.shutdown()


Signer = Callable[[Sequence[str], int, int], Any]
