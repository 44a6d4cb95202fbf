"""``KeyTurns``: the batches waiting for their turn, served round-robin between API keys (issue 46).

A key with four open batches must not get four turns for every one of another key's: the next turn goes to the
waiting key that was served longest ago (never served: first), and within a key to its batches in the order they
were queued. A batch whose turn ended is queued again behind its own key's other batches. Pure asyncio, no I/O.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque


class KeyTurns:
    def __init__(self) -> None:
        self._waiting: dict[str, deque[str]] = {}  # owner -> its queued batch ids, oldest first
        self._arrived: dict[str, int] = {}  # owner -> when it started waiting (ties between never-served keys)
        self._served: dict[str, int] = {}  # owner -> when it last got a turn
        self._clock = itertools.count()
        self._ready = asyncio.Event()

    def put(self, owner: str, batch_id: str) -> None:
        if owner not in self._waiting:
            self._waiting[owner] = deque()
            self._arrived[owner] = next(self._clock)
        self._waiting[owner].append(batch_id)
        self._ready.set()

    def empty(self) -> bool:
        return not self._waiting

    def waiting(self) -> list[str]:
        return [batch_id for queue in self._waiting.values() for batch_id in queue]

    async def get(self) -> str:
        while not self._waiting:
            self._ready.clear()
            await self._ready.wait()
        owner = min(self._waiting, key=lambda o: (self._served.get(o, -1), self._arrived[o]))
        queue = self._waiting[owner]
        batch_id = queue.popleft()
        if not queue:
            del self._waiting[owner], self._arrived[owner]
        self._served[owner] = next(self._clock)
        return batch_id
