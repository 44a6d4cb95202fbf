"""``EngineProcess``: one supervised llama-server.

States: stopped → starting → ready → stopping → stopped (``failed`` when restarts are exhausted), moved only
through the checked transitions of ``SupervisedProcess`` (``engine/supervised.py``, with the diagram), whose
subscribers hear every change. The port comes from the OS, the bind address is 127.0.0.1, ``/health`` is
polled with a deadline and start-up fails fast with the log tail when the process exits. Stopping sends
SIGTERM to the process group, then SIGKILL after a grace period. ``SupervisedProcess``'s watchdog restarts a
crashed engine by its ``RestartPolicy``; :meth:`note_request` restarts after N requests when configured;
:meth:`check_wedged` restarts an engine whose ``/slots`` endpoint stops answering while ``/health`` may still say ok.

Build one with :func:`tiankong.engine.launch`: it resolves ``spec="auto"`` by measuring (``spec_auto``) *before*
the process exists and hands the decision in; when auto mode enabled speculation, a
:class:`~tiankong.engine.spec.SpecMonitor` turns it off again if the rolling acceptance drops. Before the first
spawn, :meth:`start` checks the files a flag names (draft vocabulary against the model, ``mmproj``).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import subprocess
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import httpx

from .. import paths
from ..errors import ConfigError, EngineStartError, PortInUse
from .build import EngineBinary, locate_engine
from .files import prune_logs, write_key_file
from .flags import EngineConfig
from .ports import free_port as free_port  # re-exported: callers name it from here
from .ports import port_in_use as port_in_use
from .smoke import crash_diagnosis, managed_flags, signal_name
from .spec import SpecMonitor
from .supervised import ProcessState, RestartPolicy, SupervisedProcess
from .vocab import preflight_files

if TYPE_CHECKING:
    from .spec_auto import SpecDecision

_LIVE: weakref.WeakSet[EngineProcess] = weakref.WeakSet()


EngineState = ProcessState  # the engine's name for the shared state enum (the same enum, not a copy)


REBUILD_HINT = "rebuild the engine for this CPU: `tiankong engine install --rebuild` (see `tiankong doctor`)"


#: while an engine starts, a line every this many seconds (big models load for a while)
STARTUP_NOTE_S = 5.0


class EngineProcess(SupervisedProcess):
    """A llama-server process with health checks, restart on crash and clean shutdown."""

    display_name = "llama-server"

    def __init__(
        self,
        config: EngineConfig,
        binary: EngineBinary | Path | str | None = None,
        *,
        policy: RestartPolicy | None = None,
        startup_timeout_s: float = 180.0,
        stop_grace_s: float = 10.0,
        restart_after_requests: int | None = None,
        on_restart: Callable[[str], None] | None = None,
        log: Callable[[str], None] | None = None,
        on_give_up: Callable[[], None] | None = None,
        spec_decision: SpecDecision | None = None,
        restart_on_crash: bool = True,
        max_restarts: int = 5,
        restart_window_s: float = 300.0,
        after_budget: str = "retry",
        max_backoff_s: float = 60.0,
    ) -> None:
        """``policy``: when a crashed engine is restarted (``RestartPolicy``; once ``max_restarts`` crashes fell
        within the window, ``"retry"`` keeps restarting with a backoff — ``next_retry_s`` says when — and
        ``"exit"`` leaves the engine failed and calls ``on_give_up``: ``tiankong serve`` then exits non-zero so a
        supervisor restarts it). Without ``policy`` the loose keywords after ``spec_decision`` make one. Every
        crash is logged with its exit status and the log's last lines. ``spec_decision``: what ``launch`` measured
        for ``spec="auto"`` (``config`` is then the chosen configuration)."""
        if config.spec == "auto":
            raise ConfigError("spec='auto' is decided before the engine is built",
                              hint="start it with tiankong.engine.launch(config), which measures and decides")
        if policy is None:
            if after_budget not in ("retry", "exit"):
                raise ValueError(f"after_budget must be 'retry' or 'exit', not {after_budget!r}")
            policy = RestartPolicy(restart_on_crash=restart_on_crash, max_restarts=max_restarts,
                                   window_s=restart_window_s,
                                   after_budget="exit" if after_budget == "exit" else "retry",
                                   initial_backoff_s=min(0.5, max_backoff_s), max_backoff_s=max_backoff_s)
        super().__init__(stop_grace_s=stop_grace_s, policy=policy, log=log, on_restart=on_restart,
                         on_give_up=on_give_up)
        config.validate()
        self.config = config
        self._binary_arg = binary
        self._binary: Path | None = None
        self._startup_exits: list[int] = []  # exit codes of start-ups that died, since the last good start
        self.crash_loop = ""  # set once two start-ups in a row died by the same signal: no more restarts
        self.startup_timeout_s = startup_timeout_s
        self.restart_after_requests = restart_after_requests
        self.spec_decision = spec_decision
        self.spec_monitor: SpecMonitor | None = None
        self.requests_since_start = 0
        self.port = config.port
        self.started_at = 0.0
        self.ready_seconds = 0.0

    # --- public ---------------------------------------------------------------------------------

    @property
    def binary(self) -> Path:
        """The llama-server binary (located on first use, so a missing engine fails at start)."""
        if self._binary is None:
            arg = self._binary_arg
            self._binary = arg.path if isinstance(arg, EngineBinary) else locate_engine(arg).path
        return self._binary

    @property
    def url(self) -> str:
        return f"http://{self.config.host}:{self.port}"

    def start(self) -> EngineProcess:
        with self._lock:
            if self.state == ProcessState.READY and self.alive():
                return self
            if self.crash_loop:
                raise EngineStartError(self.crash_loop, hint=REBUILD_HINT, log_tail=self.log_tail())
            self._stop_event.clear()
            preflight_files(self.config)
            self._spawn_and_wait()
            _LIVE.add(self)
            self._start_spec_monitor()
            self._start_watchdog()
        return self

    def stop(self) -> None:
        self._stop_event.set()
        if self.spec_monitor is not None:
            self.spec_monitor.stop()
            self.spec_monitor = None
        super().stop()
        _LIVE.discard(self)

    def health(self, timeout_s: float = 2.0) -> bool:
        try:
            return httpx.get(f"{self.url}/health", timeout=timeout_s,
                             headers=self.config.auth_headers()).status_code == 200
        except httpx.HTTPError:
            return False

    def probe_slots(self, timeout_s: float = 5.0) -> bool:
        """True when ``/slots`` answers in time: the engine's request loop is alive."""
        try:
            return httpx.get(f"{self.url}/slots", timeout=timeout_s,
                             headers=self.config.auth_headers()).status_code == 200
        except httpx.HTTPError:
            return False

    def check_wedged(self, timeout_s: float = 5.0) -> bool:
        """Restart the engine if ``/slots`` does not answer; returns True when it did."""
        if self.state != ProcessState.READY or self.probe_slots(timeout_s):
            return False
        self.restart("wedged: /slots did not answer")
        return True

    def count_request(self) -> bool:
        """Count a finished request; True when ``restart_after_requests`` is reached (time to :meth:`recycle`)."""
        with self._state_lock:
            self.requests_since_start += 1
            limit = self.restart_after_requests
            return bool(limit and self.requests_since_start >= limit)

    def recycle(self) -> None:
        """The planned restart after ``restart_after_requests`` requests (blocking)."""
        self.restart(f"restart after {self.restart_after_requests} requests")

    def note_request(self) -> None:
        """Count a finished request; restart when ``restart_after_requests`` is reached."""
        if self.count_request():
            self.recycle()

    def __enter__(self) -> EngineProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- internals ------------------------------------------------------------------------------

    def _start_spec_monitor(self) -> None:
        decision = self.spec_decision
        if decision is None or not decision.enabled or self.spec_monitor is not None or not self.config.spec_types():
            return  # no auto decision, speculation off (or already turned off), or already watching
        auto = decision.config.spec_auto if decision.config else None
        if auto is not None:
            self.spec_monitor = SpecMonitor(self, min_acceptance=auto.min_acceptance,
                                            window_tokens=auto.window_tokens, interval_s=auto.check_interval_s,
                                            log=self.log).start()

    def _spawn_and_wait(self) -> None:
        if self.state != ProcessState.STARTING:  # a restart already said so
            self._transition(ProcessState.STARTING, "spawn")
        explicit_port = self.config.port
        try:  # a host that is not this machine's is a ConfigError: the state must not stay "starting"
            if explicit_port and port_in_use(self.config.host, explicit_port):
                raise PortInUse(self.config.host, explicit_port)
            self.port = explicit_port or free_port(self.config.host)
        except ConfigError as exc:
            self._transition(ProcessState.FAILED, exc.one_line())
            raise
        argv = self.config.to_argv(self.binary)
        argv[argv.index("--port") + 1] = str(self.port)
        logs = paths.logs_dir()
        logs.mkdir(parents=True, exist_ok=True)
        prune_logs(logs)
        log_path = logs / f"llama-server-{os.getpid()}-{self.port}.log"
        key_file = write_key_file(self.config.api_key) if self.config.api_key else None
        if key_file is not None:
            argv += ["--api-key-file", str(key_file)]
        try:
            self._spawn_logged(argv, log_path)
            assert self.proc is not None
            self.started_at = time.monotonic()
            self.requests_since_start = 0
            self._wait_ready(self.proc)
        finally:
            if key_file is not None:  # read at start-up: a restart writes a new one
                key_file.unlink(missing_ok=True)
        self.ready_seconds = time.monotonic() - self.started_at
        self._startup_exits = []
        self._transition(ProcessState.READY, "healthy")

    def _wait_ready(self, proc: subprocess.Popen[bytes]) -> None:
        deadline = self.started_at + self.startup_timeout_s
        delay, told = 0.05, self.started_at
        with httpx.Client(timeout=2.0) as http:
            while time.monotonic() < deadline:
                if self.log is not None and time.monotonic() - told >= STARTUP_NOTE_S:  # a large model: say so
                    told = time.monotonic()
                    self.log(f"llama-server is loading the model … {told - self.started_at:.0f} s (at most "
                             f"{self.startup_timeout_s:.0f} s)")
                code = proc.poll()
                if code is not None:
                    self._startup_died(code)
                try:
                    if http.get(f"{self.url}/health").status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                time.sleep(delay)
                delay = min(delay * 1.5, 0.5)
        self._terminate(proc)
        self._transition(ProcessState.FAILED, "not healthy in time")
        raise EngineStartError(
            f"llama-server was not healthy within {self.startup_timeout_s:.0f} s",
            hint="a large model on a slow disk may need a longer startup_timeout_s",
            log_tail=self.log_tail(),
        )

    def _startup_died(self, code: int) -> NoReturn:
        """A start-up that died: diagnose a signal death; the second identical one in a row ends the restarts."""
        name = signal_name(code)
        self._startup_exits.append(code)
        flags = self._binary_arg.cmake_flags if isinstance(self._binary_arg, EngineBinary) else None
        diagnosis = crash_diagnosis(code, flags or managed_flags(self.binary))
        message = f"llama-server {'was killed by ' + name if name else f'exited with code {code}'} during start-up"
        if name and self._startup_exits[-2:] == [code, code]:
            self.crash_loop = (f"llama-server crashed with {name} at {len(self._startup_exits)} start-ups in a row; "
                               f"not restarting it. {diagnosis}")
            message = self.crash_loop
            if self.log:
                self.log(self.crash_loop)
        elif diagnosis:
            message = f"{message}. {diagnosis}"
        self._transition(ProcessState.FAILED, message[:200])
        raise EngineStartError(message, hint=REBUILD_HINT if name else f"see its log, {self.log_path}",
                               log_tail=self.log_tail())

    def _crash_loop(self) -> str:
        return self.crash_loop


@atexit.register
def _stop_all() -> None:
    for engine in list(_LIVE):
        with contextlib.suppress(Exception):  # best effort at exit
            engine.stop()
