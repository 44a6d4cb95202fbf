"""``RpcWorker``: a supervised ``ggml-rpc-server``, the worker side of llama.cpp's multi-host mode.

A main llama-server started with ``--rpc host:port[,host:port…]`` (``EngineConfig.rpc``) treats every
worker as one more device and splits the model's layers (weights, KV cache, compute) across them; each
token then crosses the network once per device boundary. That is how several old machines pool their
memory for a model that does not fit one of them (docs/speed.md). ``ggml-rpc-server`` comes from the same
managed build as llama-server (``tiankong engine info --json`` → ``ggml_rpc_server``).

The RPC protocol has no authentication or encryption: a worker binds 127.0.0.1 unless ``allow_remote`` is
given, and then belongs on a private network only. Readiness is a TCP connect (the protocol has no health
call); a worker that exits during start-up fails fast with its log tail; a crashed worker is restarted by
``SupervisedProcess``'s watchdog under :data:`~tiankong.engine.supervised.RPC_RESTARTS` (five restarts in its
life, backoff up to 30 s, then it stays failed); stopping sends SIGTERM to its process group, then SIGKILL.
"""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import os
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from .. import paths
from ..errors import ConfigError, EngineNotFound, EngineStartError, PortInUse
from .build import EngineBinary, locate_engine
from .ports import free_port, port_in_use
from .supervised import RPC_RESTARTS, ProcessState, RestartPolicy, SupervisedProcess

RPC_BINARY = "ggml-rpc-server"


def locate_rpc_server(binary: EngineBinary | Path | str | None = None) -> Path:
    """``ggml-rpc-server``: an explicit path to it, or the one next to the (located) llama-server."""
    if binary is not None and not isinstance(binary, EngineBinary) and Path(binary).name == RPC_BINARY:
        path = Path(binary)
        if path.is_file() and os.access(path, os.X_OK):
            return path
        raise EngineNotFound(f"{path} is not an executable file", hint="fix the ggml-rpc-server path")
    engine = binary if isinstance(binary, EngineBinary) else locate_engine(binary)
    found = engine.path.parent / RPC_BINARY
    if not (found.is_file() and os.access(found, os.X_OK)):
        raise EngineNotFound(
            f"no {RPC_BINARY} next to {engine.path}",
            hint="`tiankong engine install --force` builds it (cmake -DGGML_RPC=ON, target ggml-rpc-server)",
        )
    return found


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class RpcWorker(SupervisedProcess):
    """One ``ggml-rpc-server`` process; use ``endpoint`` in ``EngineConfig.rpc``. Its states are the engine's
    (``SupervisedProcess``): ready once it listens; failed once its restarts are spent."""

    display_name = RPC_BINARY
    watch_interval_s = 0.5

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, threads: int = 1, cache: bool = False,
                 binary: EngineBinary | Path | str | None = None, allow_remote: bool = False,
                 startup_timeout_s: float = 30.0, stop_grace_s: float = 5.0, restart_on_crash: bool = True,
                 max_restarts: int = 5, policy: RestartPolicy | None = None) -> None:
        """``policy``: the restart rule (default :data:`RPC_RESTARTS` with ``restart_on_crash``/``max_restarts``)."""
        if not is_loopback(host) and not allow_remote:
            raise ConfigError(f"refusing to bind an RPC worker to {host}",
                              hint="the RPC protocol has no authentication; bind 127.0.0.1, or allow it "
                                   "(allow_remote=True, CLI --allow-remote) on a private network you trust")
        if threads < 1:
            raise ConfigError(f"threads must be ≥ 1, not {threads}")
        if host == "localhost":  # ggml-rpc-server takes an IPv4 address only ("Invalid host address: localhost")
            host = "127.0.0.1"
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            raise ConfigError(f"ggml-rpc-server binds an IPv4 address, not {host!r}",
                              hint="give one, e.g. --host 127.0.0.1 (or this machine's private IPv4 address)") from None
        if not 0 <= port <= 65535:
            raise ConfigError(f"port {port} is not a TCP port", hint="give 1-65535, or 0 for any free port")
        policy = policy or dataclasses.replace(RPC_RESTARTS, restart_on_crash=restart_on_crash,
                                               max_restarts=max_restarts)
        super().__init__(stop_grace_s=stop_grace_s, policy=policy)
        self.host, self.port, self.threads, self.cache = host, port, threads, cache
        self.binary = locate_rpc_server(binary)
        self.startup_timeout_s = startup_timeout_s

    @property
    def endpoint(self) -> str:
        """``host:port`` for ``EngineConfig.rpc`` / ``--rpc``."""
        return f"{self.host}:{self.port}"

    def start(self) -> RpcWorker:
        with self._lock:
            if self.alive():
                return self
            if self.port and port_in_use(self.host, self.port):
                raise PortInUse(self.host, self.port)
            self.port = self.port or free_port(self.host)
            self._stop_event.clear()
            self._spawn_and_wait()
            self._start_watchdog()
        return self

    def wait_down(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s``; True when the worker is down for good (its watchdog gave up)."""
        self._stop_event.wait(timeout_s)
        return not self.alive() and self.gave_up

    def __enter__(self) -> RpcWorker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _spawn_and_wait(self) -> None:
        argv = [str(self.binary), "-H", self.host, "-p", str(self.port), "-t", str(self.threads)]
        if self.cache:
            argv.append("-c")
        paths.logs_dir().mkdir(parents=True, exist_ok=True)
        if self.state != ProcessState.STARTING:  # a restart already said so
            self._transition(ProcessState.STARTING, "spawn")
        proc = self._spawn_logged(argv, paths.logs_dir() / f"ggml-rpc-server-{os.getpid()}-{self.port}.log")
        try:
            self._wait_listening(proc)
        except EngineStartError as exc:
            self._transition(ProcessState.FAILED, exc.message)
            raise
        self._transition(ProcessState.READY, "listening")

    def _wait_listening(self, proc: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise EngineStartError(f"{RPC_BINARY} exited with code {proc.returncode} during start-up",
                                       hint=f"see {self.log_path}", log_tail=self.log_tail())
            with contextlib.suppress(OSError), socket.create_connection((self.host, self.port), timeout=1.0):
                return
            time.sleep(0.1)
        self._terminate(proc)
        raise EngineStartError(f"{RPC_BINARY} did not listen on {self.endpoint} within {self.startup_timeout_s:.0f} s",
                               hint=f"see {self.log_path}", log_tail=self.log_tail())


def run_rpc_worker(worker: RpcWorker, log: Callable[[str], None] = print) -> None:
    """Start ``worker``, report its endpoint, block until interrupted (Ctrl-C) or it cannot be kept up; stop it."""
    try:
        worker.start()
        log(f"rpc worker on {worker.endpoint} (pid {worker.pid}, {worker.threads} threads); main engine: "
            f"rpc = [\"{worker.endpoint}\"]; Ctrl-C stops it")
        while not worker.wait_down(1.0):
            pass
        raise EngineStartError(f"{RPC_BINARY} on {worker.endpoint} kept crashing ({worker.restarts} restarts)",
                               hint=f"see {worker.log_path}", log_tail=worker.log_tail())
    finally:
        worker.stop()
        log("rpc worker stopped")

