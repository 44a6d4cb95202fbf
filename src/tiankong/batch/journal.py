"""A journal of a flow's engine answers, so a whole-data-set step killed mid-run resumes where it was.

A batch job of a whole-data-set kind (``kind = "dedupe"``, ``batch/whole.py``) is one sans-I/O flow over every
record: its only engine calls are the embedding part's and a decider's, and everything between them (MinHash, the
index, the clusters) is computed in place and deterministic. :func:`journaled` wraps such a flow: every call it
yields is looked up in ``OUT.calls.jsonl`` by the sha256 of ``(method, path, body, part)``; a call answered before
(by a run that was killed) gets that answer back without reaching an engine, the others are sent on in groups of
:data:`GROUP`, and each group's answers are appended as whole lines and fsynced before the flow sees them. A re-run
after ``kill -9`` therefore hands the flow exactly the answers the killed run had, and the flow (deterministic for
the same answers) ends in the same clusters. Errors (a part not installed, an engine that failed) are not journaled:
the re-run asks again.

The first line names the run it belongs to (``fingerprint``: the input's sha256 and the step's arguments); a
journal of another input or other arguments is started afresh. A torn last line (a kill mid-append) is cut first.
Memory: one offset per answer (the answers stay on disk until asked for).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Generator
from pathlib import Path
from typing import Any, TypeVar

from ..errors import ConfigError
from ..structured.flow import Call, Flow
from .store import repair

T = TypeVar("T")
#: calls sent (and journaled) at once: small enough that a kill loses little, large enough to keep an engine busy
GROUP = 4
_MISS = object()


def call_key(call: Call) -> str:
    """The journal key of a call: its method, path, body and part (an embedding batch's texts, a decider's prompt)."""
    data = json.dumps([call.method, call.path, call.body, call.part], sort_keys=True, ensure_ascii=False,
                      default=str)
    return hashlib.sha256(data.encode("utf-8")).hexdigest()


class CallJournal:
    """``OUT.calls.jsonl``: a header line ``{"fingerprint"}``, then ``{"key", "answer"}`` lines (append-only)."""

    def __init__(self, path: Path, fingerprint: str) -> None:
        self.path = path
        self.replayed = 0  # calls answered from the journal in this run
        self.called = 0  # calls sent to an engine in this run
        self._where: dict[str, tuple[int, int]] = {}
        self.repaired = repair(path)
        if not self._load(fingerprint):
            self._start(fingerprint)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        self._end = os.fstat(self._fd).st_size

    def _load(self, fingerprint: str) -> bool:
        if not self.path.exists():
            return False
        with self.path.open("rb") as handle:
            offset = 0
            for number, raw in enumerate(handle):
                try:
                    line = json.loads(raw)
                except ValueError:
                    raise ConfigError(f"{self.path} line {number + 1} is not valid JSON",
                                      hint="the journal was edited or damaged: remove it (the step runs again)"
                                      ) from None
                if number == 0 and (not isinstance(line, dict) or line.get("fingerprint") != fingerprint):
                    return False  # another input or other arguments: not this run's answers
                if number > 0:
                    self._where.setdefault(str(line["key"]), (offset, len(raw)))
                offset += len(raw)
        return offset > 0

    def _start(self, fingerprint: str) -> None:
        self._where.clear()
        with self.path.open("wb") as handle:
            handle.write(json.dumps({"fingerprint": fingerprint}).encode("utf-8") + b"\n")
            handle.flush()
            os.fsync(handle.fileno())

    def __len__(self) -> int:
        return len(self._where)

    def get(self, call: Call) -> Any:
        where = self._where.get(call_key(call))
        if where is None:
            return _MISS
        with self.path.open("rb") as handle:
            handle.seek(where[0])
            return json.loads(handle.read(where[1]))["answer"]

    def put(self, pairs: list[tuple[Call, Any]]) -> None:
        """Append the answers of one group as whole lines, one write and one fsync."""
        lines: list[bytes] = []
        for call, answer in pairs:
            key = call_key(call)
            line = json.dumps({"key": key, "answer": answer}, ensure_ascii=False).encode("utf-8") + b"\n"
            if key not in self._where:
                self._where[key] = (self._end + sum(len(x) for x in lines), len(line))
            lines.append(line)
        data = memoryview(b"".join(lines))
        while data:
            written = os.write(self._fd, data)
            self._end += written
            data = data[written:]
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def remove(self) -> None:
        """The step's output is written: its answers are no longer needed."""
        self.close()
        self.path.unlink(missing_ok=True)


def journaled(flow: Flow[T], journal: CallJournal) -> Generator[list[Call], list[Any], T]:
    """``flow`` with every call answered from ``journal`` when it can be, and every new answer journaled first."""
    try:
        batch = next(flow)
        while True:
            answers: list[Any] = [journal.get(call) for call in batch]
            missing = [i for i, answer in enumerate(answers) if answer is _MISS]
            journal.replayed += len(batch) - len(missing)
            for start in range(0, len(missing), GROUP):
                group = missing[start:start + GROUP]
                got = yield [batch[i] for i in group]
                journal.called += len(group)
                for i, answer in zip(group, got, strict=True):
                    answers[i] = answer
                journal.put([(batch[i], answers[i]) for i in group if not isinstance(answers[i], BaseException)])
            batch = flow.send(answers)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
