"""Progress lines for the long steps a fresh machine takes: the engine build, model downloads, engine start-up.

Each step reports through its ``log`` callable (the CLI prints to stderr) at most every ``every_s`` seconds:
how far, how fast and, when the total is known, the estimated time left. Nothing here draws bars: the lines
read the same in a terminal, a CI log and a file.
"""

from __future__ import annotations

import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

Log = Callable[[str], None]
PERCENT = re.compile(r"^\[\s*(\d{1,3})%\]")


def eta(done: float, total: float, elapsed_s: float) -> str:
    """``42% · 1m05s elapsed · about 1m30s left`` (no estimate before anything is done)."""
    if total <= 0:
        return f"{_clock(elapsed_s)} elapsed"
    share = min(max(done / total, 0.0), 1.0)
    left = f" · about {_clock(elapsed_s * (1 - share) / share)} left" if share > 0 else ""
    return f"{share:.0%} · {_clock(elapsed_s)} elapsed{left}"


def _clock(seconds: float) -> str:
    seconds = max(int(round(seconds)), 0)
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def run_with_percent(cmd: list[str], what: str, log: Log, every_s: float = 15.0) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` (cmake/ninja/make print ``[ 42%] …``), logging the percentage and ETA every ``every_s``."""
    started = last = time.monotonic()
    lines: list[str] = []
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          errors="replace") as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            found = PERCENT.match(line.strip())
            now = time.monotonic()
            if found and now - last >= every_s:
                last = now
                log(f"{what}: {eta(int(found.group(1)), 100, now - started)}")
    return subprocess.CompletedProcess(cmd, proc.returncode, "".join(lines[-400:]), "")


def directory_bytes(directory: Path) -> int:
    return sum(f.stat().st_size for f in directory.rglob("*") if f.is_file()) if directory.exists() else 0


@contextmanager
def watching_bytes(directory: Path, what: str, log: Log, total: int | None = None,
                   every_s: float | None = 10.0, on_bytes: Callable[[int], None] | None = None,
                   poll_s: float = 0.25) -> Iterator[None]:
    """While the body runs, log how many bytes have arrived under ``directory`` (a download's temp dir) every
    ``every_s`` (None: never), and hand the count to ``on_bytes`` every ``poll_s`` (a progress bar's feed)."""
    stop = threading.Event()
    started = last = time.monotonic()

    def watch() -> None:
        nonlocal last
        while not stop.wait(poll_s if on_bytes else (every_s or 10.0)):
            done = directory_bytes(directory)
            if on_bytes is not None:
                on_bytes(done)
            now = time.monotonic()
            if every_s is None or now - last < every_s - 1e-3:
                continue
            last = now
            rate = done / max(now - started, 1e-6)
            tail = eta(done, total, now - started) if total else f"{_clock(now - started)} elapsed"
            log(f"{what}: {done / 1e6:.0f} MB{f' of {total / 1e6:.0f} MB' if total else ''} "
                f"({rate / 1e6:.1f} MB/s) · {tail}")

    thread = threading.Thread(target=watch, daemon=True, name="tiankong-progress")
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=1)
