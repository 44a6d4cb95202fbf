"""Run by tests/unit/test_sigterm.py as a pytest file of its own: a module fixture starts a child in a session of its
own (as the engine and gateway fixtures do), and the test waits until the outer test sends pytest SIGTERM."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

OUT = Path(os.environ["SIGTERM_PROBE_DIR"])


@pytest.fixture(scope="module")
def child() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    (OUT / "child.pid").write_text(str(proc.pid))
    try:
        yield proc
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        (OUT / "torn-down").write_text("yes")


def test_waits_for_the_signal(child: subprocess.Popen[bytes]) -> None:
    (OUT / "ready").write_text("yes")
    time.sleep(600)
