"""Engine slots held by runs of calls: a run keeps its prompt cache on one slot (fast-forward, ``ask``)."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from .calls import Call, Flow


class SlotLeases:
    """The engine slots that runs of one client hold (``SlotPin``), so that concurrent runs keep to distinct
    slots. Shared by the threads of a sync client and the tasks of an async one (a short lock, never awaited)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: set[int] = set()
        self.total: int | None = None  # the engine's slots (``/props`` ``total_slots``), learnt on first use

    def acquire(self) -> int | None:
        with self._lock:
            free = next((s for s in range(self.total or 0) if s not in self._held), None)
            if free is not None:
                self._held.add(free)
            return free

    def release(self, slot: int) -> None:
        with self._lock:
            self._held.discard(slot)


@dataclass
class SlotPin:
    """A run of calls that should stay on one engine slot (its prompt cache), and what the engine read for them.

    With ``leases`` (the client's), the run leases a slot no other run of the client holds and sends every call
    there (``id_slot``). Without, nothing is forced: llama-server gives a request the idle slot whose cache
    shares the most with its prompt — but concurrent runs whose prompts share a long start (one schema's system
    prompt) then take each other's slots in the gap between two calls and prefill their text again
    (``benchmarks/extract_speed.py`` at concurrency 4: 45 tokens re-read on most calls; forcing one slot that
    others may also take was worse: a pinned call waits, then re-reads everything). Counts the prompt tokens
    the engine evaluated (``timings.prompt_n``) and those sent.
    """

    leases: SlotLeases | None = None
    slot: int | None = None
    evaluated: int = 0
    sent: int = 0

    def lease(self) -> Flow[None]:
        """Take a free slot of the client's (learning the engine's slot count once); none free: not pinned."""
        if self.leases is None or self.slot is not None:
            return
        if self.leases.total is None:
            (props,) = yield [Call("GET", "/props")]
            total = props.get("total_slots") if isinstance(props, dict) else None
            self.leases.total = total if isinstance(total, int) and total > 0 else 0
        self.slot = self.leases.acquire()

    def release(self) -> None:
        if self.leases is not None and self.slot is not None:
            self.leases.release(self.slot)
            self.slot = None

    def pin(self, body: dict[str, Any]) -> dict[str, Any]:
        return body if self.slot is None else {**body, "id_slot": self.slot}

    def saw(self, answer: Any) -> None:
        if not isinstance(answer, dict):
            return
        timings = answer.get("timings")
        timings = timings if isinstance(timings, dict) else {}
        self.evaluated += int(timings.get("prompt_n") or 0)
        self.sent += int(answer.get("tokens_evaluated") or 0)
