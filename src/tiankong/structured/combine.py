"""Run several sans-I/O flows side by side: each step's calls are merged into one batch.

The async driver sends a batch concurrently (so N flows use N engine slots); the sync driver uses a small
thread pool for batches of more than one call. Results come back in the order of the flows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from .flow import Call, Flow

T = TypeVar("T")


def gather(flows: Sequence[Flow[T]]) -> Flow[list[T]]:
    """One flow whose result is the list of the given flows' results (an error in one is raised)."""
    results: dict[int, T] = {}
    pending: dict[int, list[Call]] = {}
    for index, flow in enumerate(flows):
        _advance(index, flow, None, pending, results)
    while pending:
        order = sorted(pending)
        batch = [call for index in order for call in pending[index]]
        answers: list[Any] = yield batch
        cursor = 0
        for index in order:
            size = len(pending.pop(index))
            _advance(index, flows[index], answers[cursor:cursor + size], pending, results)
            cursor += size
    return [results[index] for index in range(len(flows))]


def _advance(index: int, flow: Flow[T], answers: list[Any] | None, pending: dict[int, list[Call]],
             results: dict[int, T]) -> None:
    try:
        batch = next(flow) if answers is None else flow.send(answers)
    except StopIteration as stop:
        results[index] = stop.value
        return
    if not batch:  # a flow that yields nothing is given nothing back at once
        _advance(index, flow, [], pending, results)
        return
    pending[index] = batch


def pure(value: T) -> Flow[T]:
    """A flow that makes no calls (for composing with ``gather``)."""
    return value
    yield []  # pragma: no cover - makes this a generator
