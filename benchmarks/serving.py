"""Start ``tiankong serve`` as a user does (a process of its own, own session) and wait until it is healthy."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx


def serve(args: list[str], port: int, env: dict[str, str] | None = None,
          timeout_s: float = 300.0) -> subprocess.Popen[bytes]:
    """``tiankong serve --port PORT ARGS``, once ``/health`` answers 200; the process group is killed and the run
    stops with a one-line reason when it exits first or is not healthy within ``timeout_s``."""
    tiankong = str(Path(sys.executable).with_name("tiankong"))
    proc = subprocess.Popen([tiankong, "serve", "--port", str(port), *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True, env=env)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"tiankong serve exited with status {proc.returncode}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGTERM)
    raise SystemExit(f"tiankong serve did not become healthy within {timeout_s:.0f} s")
