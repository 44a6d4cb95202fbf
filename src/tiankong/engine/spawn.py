"""Every supervised child is forked from one thread that lives as long as the process (``SPAWNER``)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import queue
import signal
import subprocess
import threading
from concurrent.futures import Future
from typing import Any


def die_with_parent() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class Spawner:
    """Every child is forked from one thread that lives as long as the process. ``PR_SET_PDEATHSIG`` fires when
    the *thread* that forked the child ends, not the process: an engine started from ``asyncio.to_thread`` (the
    ``AsyncClient``: its executor thread ends with ``asyncio.run``) or from a worker thread was killed with that
    thread while its client still held it (found by a read-only sweep of the Python API)."""

    def __init__(self) -> None:
        self._fresh()
        # a forked child (Ray's workers, multiprocessing) gets its own lock, queue and thread: the copied lock may
        # be held and a copied job would start a second engine
        os.register_at_fork(after_in_child=self._fresh)

    def _fresh(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Future[subprocess.Popen[bytes]], list[str], dict[str, Any]]] = \
            queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def popen(self, argv: list[str], **options: Any) -> subprocess.Popen[bytes]:
        with self._lock:  # after a fork the copied thread is not alive: this process gets its own
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="tiankong-spawner", daemon=True)
                self._thread.start()
        done: Future[subprocess.Popen[bytes]] = Future()
        self._jobs.put((done, argv, options))
        return done.result()

    def _run(self) -> None:
        while True:
            done, argv, options = self._jobs.get()
            try:
                done.set_result(subprocess.Popen(argv, **options))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller, which raises it
                done.set_exception(exc)


#: the process's one spawner
SPAWNER = Spawner()
