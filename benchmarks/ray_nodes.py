"""A loopback Ray cluster whose nodes are each pinned to one core, for the scale-out benchmarks
(benchmarks/batch_ray.py, benchmarks/dedupe_ray.py).

Each node is a raylet started while this process is pinned to that node's core (``os.sched_setaffinity``), so the
node's workers — and what they start, e.g. an engine actor's llama-server (``-t 1``) — inherit the pin; this process
gets every core back at once. Loopback only; the cluster is shut down when the ``with`` block ends.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # a loopback cluster (batch/ray_exec.py)


def two_cores() -> list[int]:
    """This process's cores (at least two: one per node), or exit with a one-line reason."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        raise SystemExit("needs two cores (one per node)")
    return cores


@contextmanager
def pinned(core: int) -> Iterator[None]:
    every = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {core})
    try:
        yield
    finally:
        os.sched_setaffinity(0, every)


@contextmanager
def pinned_cluster(core: int) -> Iterator[Any]:
    """A one-node cluster (one CPU) whose head runs on ``core``; grow it with :func:`add_pinned_node`."""
    import ray
    from ray.cluster_utils import Cluster

    with pinned(core):
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "node_ip_address": "127.0.0.1",
                                                                "include_dashboard": False})
    try:
        cluster.wait_for_nodes()
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


def add_pinned_node(cluster: Any, core: int) -> None:
    """One more node (one CPU) on ``core``, waited for (and 2 s for its workers to settle)."""
    with pinned(core):
        cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1")
    cluster.wait_for_nodes()
    time.sleep(2)
