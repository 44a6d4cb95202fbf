"""``SupervisedProcess``: what ``EngineProcess`` (llama-server) and ``RpcWorker`` (ggml-rpc-server) share.

* An explicit state machine: ``ProcessState``, changed only by :meth:`SupervisedProcess._transition`, which
  checks the move against ``TRANSITIONS`` under a lock (an illegal move is a bug: ``IllegalTransition``) and
  then tells every subscriber (``subscribe``), as llama-swap's process does with its ``swapState`` /
  ``isValidTransition``. Reading ``state`` takes no lock: it is one attribute read, never torn, and a start
  holding the process lock for minutes must not block the gateway asking whether the engine is ready.
* A child in its own session, its output in a private (0600) log file, killed with the parent
  (``PR_SET_PDEATHSIG``; forked from one long-lived thread, ``spawn.SPAWNER``: the signal follows the
  forking thread), stopped with SIGTERM to its process group and SIGKILL after a grace period.
* One watchdog and one restart rule for every kind of child (:meth:`SupervisedProcess._watch`): a crashed child
  is restarted while its :class:`RestartPolicy` allows — at most ``max_restarts`` within ``window_s``; once that
  budget is spent, ``after_budget="retry"`` keeps trying with a backoff doubling up to ``max_backoff_s`` and
  ``"exit"`` leaves it failed (and calls ``on_give_up``). A start-up that fails is retried with the same backoff.
* :func:`check_transition` is the one transition checker: processes and batches (``batch/batches.py``) move
  through their own tables with it.

::

    stopped ──start──▶ starting ──healthy──▶ ready ──stop──▶ stopping ──▶ stopped
       ▲                  │  ▲                 │
       │               failed │ restart (crash, wedge, recycle)
       └──── stop ──── failed ◀──── crash, restart budget spent ──┘
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum, StrEnum
from pathlib import Path
from typing import Literal, Self, TypeVar

from ..errors import ConfigError, EngineError, EngineStartError
from .files import open_private
from .spawn import SPAWNER, die_with_parent


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


E = TypeVar("E", bound=Enum)


def check_transition(table: Mapping[E, frozenset[E]], old: E, new: E,
                     refuse: Callable[[E, E], Exception]) -> None:
    """Raise ``refuse(old, new)`` unless ``table`` has the edge ``old → new``: the one checker of every state
    machine (supervised processes here, batches in ``batch/batches.py``); the caller holds its lock."""
    if new not in table[old]:
        raise refuse(old, new)


@dataclass(frozen=True)
class RestartPolicy:
    """When a crashed child is started again (``SupervisedProcess``'s watchdog, for engines and rpc workers)."""

    restart_on_crash: bool = True
    #: crash restarts allowed within ``window_s`` (``math.inf``: within the process's life)
    max_restarts: int = 5
    window_s: float = 300.0
    #: once the budget is spent: ``"retry"`` keeps trying with the backoff, ``"exit"`` leaves the child failed
    after_budget: Literal["retry", "exit"] = "retry"
    initial_backoff_s: float = 0.5
    max_backoff_s: float = 60.0

    def __post_init__(self) -> None:
        if self.after_budget not in ("retry", "exit"):
            raise ValueError(f"after_budget must be 'retry' or 'exit', not {self.after_budget!r}")
        if self.max_restarts < 0 or self.window_s <= 0 or not 0 < self.initial_backoff_s <= self.max_backoff_s:
            raise ValueError(f"a restart policy needs max_restarts ≥ 0, window_s > 0 and 0 < initial_backoff_s ≤ "
                             f"max_backoff_s, not {self}")

    def next_backoff(self, backoff: float) -> float:
        return min(backoff * 2, self.max_backoff_s)


#: a tool's engine that should fail rather than come back (a benchmark, a measurement, a model check)
NO_RESTARTS = RestartPolicy(restart_on_crash=False)
#: an rpc worker's rule: five restarts in its life, then it stays down (``tiankong rpc`` exits)
RPC_RESTARTS = RestartPolicy(max_restarts=5, window_s=math.inf, after_budget="exit", max_backoff_s=30.0)


@dataclass(frozen=True)
class StateChange:
    """One move of a supervised process, as its subscribers receive it."""

    process: SupervisedProcess
    old: ProcessState
    new: ProcessState
    reason: str = ""


class SupervisedProcess:
    """A child process with an explicit, checked state, state-change events, and a watchdog that restarts it.

    A subclass provides :meth:`_spawn_and_wait` (spawn the child and return once it is ready, moving to READY, or
    raise ``EngineStartError`` having moved to FAILED) and calls :meth:`_start_watchdog` from its ``start``."""

    #: the child's name in messages
    display_name = "process"
    #: how often the watchdog looks at the child
    watch_interval_s = 0.2

    def __init__(self, *, stop_grace_s: float, policy: RestartPolicy | None = None,
                 log: Callable[[str], None] | None = None, on_restart: Callable[[str], None] | None = None,
                 on_give_up: Callable[[], None] | None = None) -> None:
        self.stop_grace_s = stop_grace_s
        self.policy = policy or RestartPolicy()
        self.log, self.on_restart, self.on_give_up = log, on_restart, on_give_up
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path: Path | None = None
        self.restarts = 0
        self.retry_at: float | None = None  # monotonic time of the next restart attempt after a failed one
        self.gave_up = False  # the watchdog stopped for good (budget spent with "exit", or a crash loop)
        self._budget_spent = False
        self._restart_times: list[float] = []
        self._crash_logged: int | None = None
        self._state = ProcessState.STOPPED
        self._state_lock = threading.Lock()
        self._listeners: list[Callable[[StateChange], None]] = []
        self._lock = threading.RLock()  # held while the child is (re)started or stopped
        self._stop_event = threading.Event()
        self._watchdog: threading.Thread | None = None

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
            check_transition(TRANSITIONS, old, new, lambda o, n: IllegalTransition(
                f"{type(self).__name__}: no transition {o} → {n} ({reason or 'no reason'})",
                hint="this is a bug in tiankong: please report it with the log"))
            self._state = new
            listeners = list(self._listeners)
        change = StateChange(self, old, new, reason)
        for listener in listeners:
            with contextlib.suppress(Exception):  # a subscriber's bug must not break supervision
                listener(change)
        return True

    # --- restarts -------------------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop watching and stop the child (SIGTERM, then SIGKILL after ``stop_grace_s``)."""
        self._stop_event.set()
        with self._lock:
            if self.proc is None:
                self._transition(ProcessState.STOPPED, "stop", expected=frozenset({ProcessState.FAILED}))
                return
            self._transition(ProcessState.STOPPING, "stop")
            self._terminate(self.proc)
            self.proc = None
            self._transition(ProcessState.STOPPED, "stop")

    def restart(self, reason: str) -> None:
        """Stop and start again (crash, wedge and request-count restarts); counts against the restart budget."""
        with self._lock:
            if self._stop_event.is_set():
                return
            self._record_restart()
            # starting before the old process goes: the watchdog must not read this planned stop as a crash
            self._transition(ProcessState.STARTING, reason)
            if self.proc is not None:
                self._terminate(self.proc)
                self.proc = None
            if self.on_restart:
                self.on_restart(reason)
            self._spawn_and_wait()

    @property
    def next_retry_s(self) -> float | None:
        """Seconds until the watchdog tries to start a failed child again (None: not waiting to)."""
        return None if self.retry_at is None else max(0.0, round(self.retry_at - time.monotonic(), 1))

    def _spawn_and_wait(self) -> None:
        raise NotImplementedError

    def _crash_loop(self) -> str:
        """Why restarting cannot help ('' when it may): the engine's same-signal start-up deaths."""
        return ""

    def _record_restart(self) -> None:
        policy, now = self.policy, time.monotonic()
        self._restart_times = [t for t in self._restart_times if now - t < policy.window_s]
        if len(self._restart_times) >= policy.max_restarts:
            self._transition(ProcessState.FAILED, "restart budget spent")
            self._budget_spent = True
            within = "" if math.isinf(policy.window_s) else f" within {policy.window_s:.0f} s"
            raise EngineStartError(f"{self.display_name} restarted {policy.max_restarts} times{within}; giving up",
                                   hint=f"see its log, {self.log_path}" if self.log_path else "its log tail says why",
                                   log_tail=self.log_tail())
        self._restart_times.append(now)
        self.restarts += 1

    def _start_watchdog(self) -> None:
        if self._watchdog is None or not self._watchdog.is_alive():
            name = f"tiankong-{self.display_name}-watchdog"
            self._watchdog = threading.Thread(target=self._watch, name=name, daemon=True)
            self._watchdog.start()

    def _note_crash(self, proc: subprocess.Popen[bytes]) -> None:
        if self._crash_logged == proc.pid:
            return
        self._crash_logged = proc.pid
        tail = " | ".join(line for line in self.log_tail(8).splitlines() if line.strip())
        if self.log:
            self.log(f"{self.display_name} pid {proc.pid} exited with status {proc.returncode}; "
                     f"log tail: {tail[-1500:]}")

    def _give_up(self) -> None:
        self.gave_up = True
        if self.on_give_up and self.policy.after_budget == "exit":
            self.on_give_up()

    def _watch(self) -> None:
        """Restart a crashed child by :attr:`policy` (the module text has the rule)."""
        policy = self.policy
        backoff = policy.initial_backoff_s
        while not self._stop_event.wait(self.watch_interval_s):
            proc = self.proc
            crashed = proc is not None and proc.poll() is not None
            if not crashed or self.state in (ProcessState.STARTING, ProcessState.STOPPING):
                continue
            assert proc is not None
            self._note_crash(proc)
            if self._crash_loop():  # the same signal at every start-up: restarting cannot help
                return self._give_up()
            if not policy.restart_on_crash:
                self._transition(ProcessState.FAILED, f"exited with code {proc.returncode}")
                self.gave_up = True
                return None
            if self._budget_spent:
                if policy.after_budget == "exit":
                    self._transition(ProcessState.FAILED, "restart budget spent: giving up")
                    if self.log:
                        within = "" if math.isinf(policy.window_s) else f" in {policy.window_s:.0f} s"
                        self.log(f"{self.display_name} restart budget spent ({policy.max_restarts}{within}): "
                                 "giving up")
                    return self._give_up()
                self.retry_at = time.monotonic() + backoff
                if self.log:
                    self.log(f"{self.display_name} restart budget spent; trying again in {backoff:.1f} s")
                if self._stop_event.wait(backoff):
                    return None
                backoff = policy.next_backoff(backoff)
                self._budget_spent, self._restart_times = False, []
            try:
                with self._lock:
                    if self.proc is not proc or self._stop_event.is_set():
                        continue  # restarted (or stopped) meanwhile: that process's exit was planned
                    self.restart(f"exited with code {proc.returncode}")
                backoff, self.retry_at = policy.initial_backoff_s, None
            except (EngineStartError, ConfigError):  # ConfigError: the bind address went away (ports.py)
                if self._budget_spent or self._crash_loop():
                    continue  # the budget (or the crash loop) decides above
                self.retry_at = time.monotonic() + backoff
                if self._stop_event.wait(backoff):
                    return None
                backoff = policy.next_backoff(backoff)
        return None

    # --- the child --------------------------------------------------------------------------------------

    def _spawn_logged(self, argv: list[str], log_path: Path) -> subprocess.Popen[bytes]:
        """Start ``argv`` in its own session with stdout and stderr in ``log_path`` (created 0600)."""
        self.log_path = log_path
        with open_private(log_path) as log:
            self.proc = SPAWNER.popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
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
