"""pytest killed by SIGTERM (`timeout`, a CI cancel, `kill`) still tears its fixtures down, so the engines and
gateways they started in sessions of their own are stopped, not left running (tests/conftest.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

PROBE = Path(__file__).parent.parent / "helpers" / "sigterm_probe.py"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("workers", [[], ["-n", "1"]], ids=["plain", "xdist"])
def test_sigterm_tears_the_fixtures_down(tmp_path: Path, workers: list[str]) -> None:
    env = {**os.environ, "SIGTERM_PROBE_DIR": str(tmp_path)}
    env.pop("PYTEST_XDIST_WORKER", None)
    env.pop("PYTEST_XDIST_WORKER_COUNT", None)
    pytest_run = subprocess.Popen(
        [sys.executable, "-m", "pytest", str(PROBE), "-q", "-p", "no:cacheprovider", *workers],
        cwd=PROBE.parent.parent.parent, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True)
    child = None
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "ready").exists():
            assert pytest_run.poll() is None, pytest_run.communicate()[0].decode(errors="replace")
            assert time.monotonic() < deadline, "the probe never started its test"
            time.sleep(0.1)
        child = int((tmp_path / "child.pid").read_text())
        os.killpg(pytest_run.pid, signal.SIGTERM)  # as `timeout` does: the whole process group
        output = pytest_run.communicate(timeout=60)[0].decode(errors="replace")
        assert (tmp_path / "torn-down").exists(), output
        assert not _alive(child)
    finally:
        if pytest_run.poll() is None:
            os.killpg(pytest_run.pid, signal.SIGKILL)
        if child is not None and _alive(child):
            os.kill(child, signal.SIGKILL)
