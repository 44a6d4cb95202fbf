"""``EngineProcess``: one supervised llama-server.

States: stopped → starting → ready → stopping → stopped (``failed`` when restarts are exhausted), moved only
through the checked transitions of ``SupervisedProcess`` (``engine/supervised.py``, with the diagram), whose
subscribers hear every change. The port comes from the OS, the bind address is 127.0.0.1, ``/health`` is
polled with a deadline and start-up fails fast with the log tail when the process exits. Stopping sends
SIGTERM to the process group, then SIGKILL after a grace period. A watchdog thread restarts a crashed engine
with exponential backoff; :meth:`note_request` restarts after N requests when configured; :meth:`check_wedged` restarts
an engine whose ``/slots`` endpoint stops answering while ``/health`` may still say ok.

Before the first spawn, :meth:`start` checks the files a flag names (draft vocabulary against the model,
``mmproj``) and resolves ``spec="auto"`` by measuring (``spec_auto``); when auto mode enabled speculation,
a :class:`~tiankong.engine.spec.SpecMonitor` turns it off again if the rolling acceptance drops.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import socket
import subprocess
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

import httpx

from .. import paths
from ..errors import EngineStartError, PortInUse
from .build import EngineBinary, locate_engine
from .files import prune_logs, write_key_file
from .flags import EngineConfig
from .smoke import crash_diagnosis, managed_flags, signal_name
from .spec import SpecMonitor
from .spec_auto import SpecDecision, resolve_auto_spec
from .supervised import ProcessState, SupervisedProcess
from .vocab import preflight_files

_LIVE: weakref.WeakSet[EngineProcess] = weakref.WeakSet()


EngineState = ProcessState  # the engine's name for the shared state enum


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


REBUILD_HINT = "rebuild the engine for this CPU: `tiankong engine install --rebuild` (see `tiankong doctor`)"


#: while an engine starts, a line every this many seconds (big models load for a while)
STARTUP_NOTE_S = 5.0


class EngineProcess(SupervisedProcess):
    """A llama-server process with health checks, restart on crash and clean shutdown."""

    def __init__(
        self,
        config: EngineConfig,
        binary: EngineBinary | Path | str | None = None,
        *,
        startup_timeout_s: float = 180.0,
        stop_grace_s: float = 10.0,
        restart_on_crash: bool = True,
        max_restarts: int = 5,
        restart_window_s: float = 300.0,
        restart_after_requests: int | None = None,
        on_restart: Callable[[str], None] | None = None,
        log: Callable[[str], None] | None = None,
        after_budget: str = "retry",
        on_give_up: Callable[[], None] | None = None,
        max_backoff_s: float = 60.0,
    ) -> None:
        """``after_budget``: once ``max_restarts`` crashes fell within ``restart_window_s``, ``"retry"`` keeps
        restarting with a backoff doubling up to ``max_backoff_s`` (``next_retry_s`` says when), ``"exit"``
        leaves the engine failed and calls ``on_give_up`` (``tiankong serve`` then exits non-zero so a
        supervisor restarts it). Every crash is logged with its exit status and the log's last lines."""
        if after_budget not in ("retry", "exit"):
            raise ValueError(f"after_budget must be 'retry' or 'exit', not {after_budget!r}")
        super().__init__(stop_grace_s=stop_grace_s)
        self.after_budget, self.on_give_up, self.max_backoff_s = after_budget, on_give_up, max_backoff_s
        self.retry_at: float | None = None  # monotonic time of the next restart attempt after a failed one
        self._crash_logged: int | None = None
        config.validate()
        self.config = config
        self._binary_arg = binary
        self._binary: Path | None = None
        self._gave_up = False
        self._startup_exits: list[int] = []  # exit codes of start-ups that died, since the last good start
        self.crash_loop = ""  # set once two start-ups in a row died by the same signal: no more restarts
        self.startup_timeout_s = startup_timeout_s
        self.restart_on_crash = restart_on_crash
        self.max_restarts = max_restarts
        self.restart_window_s = restart_window_s
        self.restart_after_requests = restart_after_requests
        self.on_restart = on_restart
        self.log = log
        self.spec_decision: SpecDecision | None = None
        self.spec_monitor: SpecMonitor | None = None
        self.restarts = 0
        self.requests_since_start = 0
        self.port = config.port
        self.started_at = 0.0
        self.ready_seconds = 0.0
        self._restart_times: list[float] = []
        self._lock = threading.RLock()
        self._watchdog: threading.Thread | None = None
        self._stop_event = threading.Event()

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
            if self.state == EngineState.READY and self.alive():
                return self
            if self.crash_loop:
                raise EngineStartError(self.crash_loop, hint=REBUILD_HINT, log_tail=self.log_tail())
            self._stop_event.clear()
            self._prepare()
            self._spawn_and_wait()
            _LIVE.add(self)
            self._start_spec_monitor()
            if self._watchdog is None or not self._watchdog.is_alive():
                self._watchdog = threading.Thread(target=self._watch, name="tiankong-engine-watchdog", daemon=True)
                self._watchdog.start()
        return self

    def stop(self) -> None:
        self._stop_event.set()
        if self.spec_monitor is not None:
            self.spec_monitor.stop()
            self.spec_monitor = None
        with self._lock:
            if self.proc is None:
                self._transition(EngineState.STOPPED, "stop", expected=frozenset({EngineState.FAILED}))
                return
            self._transition(EngineState.STOPPING, "stop")
            self._terminate(self.proc)
            self.proc = None
            self._transition(EngineState.STOPPED, "stop")
        _LIVE.discard(self)

    def restart(self, reason: str) -> None:
        """Stop and start again (used for crash, wedge and request-count restarts)."""
        with self._lock:
            if self._stop_event.is_set():
                return
            self._record_restart()
            # starting before the old process goes: the watchdog must not read this planned stop as a crash
            self._transition(EngineState.STARTING, reason)
            if self.proc is not None:
                self._terminate(self.proc)
                self.proc = None
            if self.on_restart:
                self.on_restart(reason)
            self._spawn_and_wait()

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
        if self.state != EngineState.READY or self.probe_slots(timeout_s):
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

    def _prepare(self) -> None:
        """Resolve ``spec="auto"`` (start-up A/B) and check the files the flags name, before spawning."""
        if self.config.spec == "auto":
            decision = resolve_auto_spec(self.config, self.binary, log=self.log,
                                         startup_timeout_s=self.startup_timeout_s)
            assert decision.config is not None
            self.spec_decision, self.config = decision, decision.config
        preflight_files(self.config)

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
        if self.state != EngineState.STARTING:  # a restart already said so
            self._transition(EngineState.STARTING, "spawn")
        explicit_port = self.config.port
        if explicit_port and port_in_use(self.config.host, explicit_port):
            self._transition(EngineState.FAILED, f"port {explicit_port} in use")
            raise PortInUse(self.config.host, explicit_port)
        self.port = explicit_port or free_port(self.config.host)
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
        self._transition(EngineState.READY, "healthy")

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
        self._transition(EngineState.FAILED, "not healthy in time")
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
            self._gave_up = True
            message = self.crash_loop
            if self.log:
                self.log(self.crash_loop)
        elif diagnosis:
            message = f"{message}. {diagnosis}"
        self._transition(EngineState.FAILED, message[:200])
        raise EngineStartError(message, hint=REBUILD_HINT if name else f"see the log tail below or {self.log_path}",
                               log_tail=self.log_tail())

    def _record_restart(self) -> None:
        now = time.monotonic()
        self._restart_times = [t for t in self._restart_times if now - t < self.restart_window_s]
        if len(self._restart_times) >= self.max_restarts:
            self._transition(EngineState.FAILED, "restart budget spent")
            self._gave_up = True
            raise EngineStartError(
                f"llama-server restarted {self.max_restarts} times within {self.restart_window_s:.0f} s; giving up",
                hint="see the log tail",
                log_tail=self.log_tail(),
            )
        self._restart_times.append(now)
        self.restarts += 1

    @property
    def next_retry_s(self) -> float | None:
        """Seconds until the watchdog tries to start a failed engine again (None: not waiting to)."""
        return None if self.retry_at is None else max(0.0, round(self.retry_at - time.monotonic(), 1))

    def _note_crash(self, proc: subprocess.Popen[bytes]) -> None:
        if self._crash_logged == proc.pid:
            return
        self._crash_logged = proc.pid
        tail = " | ".join(line for line in self.log_tail(8).splitlines() if line.strip())
        if self.log:
            self.log(f"engine pid {proc.pid} exited with status {proc.returncode}; log tail: {tail[-1500:]}")

    def _watch(self) -> None:
        backoff = 0.5
        while not self._stop_event.wait(0.2):
            proc = self.proc
            crashed = proc is not None and proc.poll() is not None
            if not crashed or self.state in (EngineState.STARTING, EngineState.STOPPING):
                continue
            assert proc is not None
            self._note_crash(proc)
            if self.crash_loop:  # the same signal at every start-up: restarting cannot help
                if self.on_give_up and self.after_budget == "exit":
                    self.on_give_up()
                return
            if not self.restart_on_crash:
                self._transition(EngineState.FAILED, f"exited with code {proc.returncode}")
                return
            if self._gave_up:
                if self.after_budget == "exit":
                    self._transition(EngineState.FAILED, "restart budget spent: giving up")
                    if self.log:
                        self.log(f"engine restart budget spent ({self.max_restarts} in {self.restart_window_s:.0f} s): "
                                 "giving up")
                    if self.on_give_up:
                        self.on_give_up()
                    return
                self.retry_at = time.monotonic() + backoff
                if self.log:
                    self.log(f"engine restart budget spent; trying again in {backoff:.1f} s")
                if self._stop_event.wait(backoff):
                    return
                backoff = min(backoff * 2, self.max_backoff_s)
                self._gave_up, self._restart_times = False, []
            try:
                with self._lock:
                    if self.proc is not proc or self._stop_event.is_set():
                        continue  # restarted (or stopped) meanwhile: that process's exit was planned
                    self.restart(f"exited with code {proc.returncode}")
                backoff, self.retry_at = 0.5, None
            except EngineStartError:
                if self._gave_up:
                    continue  # the budget decides above
                self.retry_at = time.monotonic() + backoff
                if self._stop_event.wait(backoff):
                    return
                backoff = min(backoff * 2, self.max_backoff_s)


@atexit.register
def _stop_all() -> None:
    for engine in list(_LIVE):
        with contextlib.suppress(Exception):  # best effort at exit
            engine.stop()
