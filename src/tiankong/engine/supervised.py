"""``SupervisedProcess``: what ``EngineProcess`` (llama-server) and ``RpcWorker`` (ggml-rpc-server) share.

* An explicit state machine: ``ProcessState``, changed only by :meth:`SupervisedProcess._transition`, which
  checks the move against ``TRANSITIONS`` under a lock (an illegal move is a bug: ``IllegalTransition``) and
  then tells every subscriber (``subscribe``), as llama-swap's process does with its ``swapState`` /
  ``isValidTransition``. Reading ``state`` takes no lock: it is one attribute read, never torn, and a start
  holding the process lock for minutes must not block the gateway asking whether the engine is ready.
* A child in its own session, its output in a private (0600) log file, killed with the parent
  (``PR_SET_PDEATHSIG``), stopped with SIGTERM to its process group and SIGKILL after a grace period.

::

    stopped ──start──▶ starting ──healthy──▶ ready ──stop──▶ stopping ──▶ stopped
       ▲                  │  ▲                 │
       │               failed │ restart (crash, wedge, recycle)
       └──── stop ──── failed ◀──── crash, restart budget spent ──┘
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Self

from ..errors import EngineError
from .files import open_private


class ProcessState(StrEnum):
    STOPPED = "stopped"
    STARTING = "starting"
    READY = "ready"
    STOPPING = "stopping"
    FAILED = "failed"


S = ProcessState
#: every legal move; staying in the same state is legal only where listed (a restart while starting, a
#: failure reported twice)
TRANSITIONS: dict[ProcessState, frozenset[ProcessState]] = {
    S.STOPPED: frozenset({S.STARTING, S.STOPPED}),
    S.STARTING: frozenset({S.READY, S.FAILED, S.STARTING, S.STOPPING}),
    S.READY: frozenset({S.STARTING, S.STOPPING, S.FAILED}),
    S.STOPPING: frozenset({S.STOPPED}),
    S.FAILED: frozenset({S.STARTING, S.STOPPING, S.STOPPED, S.FAILED}),
}


class IllegalTransition(EngineError):
    """A process was asked to move between states that have no edge (a bug in the supervisor)."""


@dataclass(frozen=True)
class StateChange:
    """One move of a supervised process, as its subscribers receive it."""

    process: SupervisedProcess
    old: ProcessState
    new: ProcessState
    reason: str = ""


def die_with_parent() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class SupervisedProcess:
    """A child process with an explicit, checked state and state-change events."""

    def __init__(self, *, stop_grace_s: float) -> None:
        self.stop_grace_s = stop_grace_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path: Path | None = None
        self._state = ProcessState.STOPPED
        self._state_lock = threading.Lock()
        self._listeners: list[Callable[[StateChange], None]] = []

    @property
    def state(self) -> ProcessState:
        return self._state

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def subscribe(self, listener: Callable[[StateChange], None]) -> Callable[[], None]:
        """Call ``listener`` after every state change (in the thread that made it); returns the unsubscriber."""
        with self._state_lock:
            self._listeners.append(listener)

        def unsubscribe() -> None:
            with self._state_lock, contextlib.suppress(ValueError):
                self._listeners.remove(listener)

        return unsubscribe

    def _transition(self, new: ProcessState, reason: str = "", *,
                    expected: frozenset[ProcessState] | None = None) -> bool:
        """Move to ``new`` (only from ``expected`` when given: False, and no move, from any other state)."""
        with self._state_lock:
            old = self._state
            if expected is not None and old not in expected:
                return False
            if new not in TRANSITIONS[old]:
                raise IllegalTransition(f"{type(self).__name__}: no transition {old} → {new} ({reason or 'no reason'})",
                                        hint="this is a bug in tiankong: please report it with the log")
            self._state = new
            listeners = list(self._listeners)
        change = StateChange(self, old, new, reason)
        for listener in listeners:
            with contextlib.suppress(Exception):  # a subscriber's bug must not break supervision
                listener(change)
        return True

    def _spawn_logged(self, argv: list[str], log_path: Path) -> subprocess.Popen[bytes]:
        """Start ``argv`` in its own session with stdout and stderr in ``log_path`` (created 0600)."""
        self.log_path = log_path
        with open_private(log_path) as log:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True, preexec_fn=die_with_parent)
        return self.proc

    def _terminate(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGTERM to the process group, SIGKILL after ``stop_grace_s``."""
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=self.stop_grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)

    def log_tail(self, lines: int = 25) -> str:
        """The last lines of the process log (read from its last 16 KiB)."""
        if not self.log_path or not self.log_path.exists():
            return ""
        with self.log_path.open("rb") as handle:
            handle.seek(max(0, handle.seek(0, os.SEEK_END) - 16384))
            text = handle.read().decode("utf-8", "replace")
        return "\n".join(text.splitlines()[-lines:])


class Watcher:
    """A daemon thread calling :meth:`check_once` every ``interval_s`` until :meth:`stop` (the wedge watch, the
    speculative-decoding monitor); with ``stop_after_action`` it also ends once ``check_once`` acted."""

    thread_name = "tiankong-watcher"
    stop_after_action = False

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=self.interval_s + 5)

    def check_once(self) -> bool:
        """One look; True when it acted (restarted the engine)."""
        raise NotImplementedError

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            if self.check_once() and self.stop_after_action:
                return
