"""``engine/spawn.py``: children are forked from one long-lived thread, and a forked process gets its own."""

from __future__ import annotations

import os
import threading

import pytest

from tiankong.engine.spawn import SPAWNER

pytestmark = pytest.mark.unit


def test_a_child_outlives_the_thread_that_asked_for_it() -> None:
    started = []
    thread = threading.Thread(target=lambda: started.append(SPAWNER.popen(["sleep", "5"])))
    thread.start()
    thread.join()
    try:
        assert started[0].poll() is None  # PR_SET_PDEATHSIG would follow the asking thread if it had forked it
    finally:
        started[0].kill()
        started[0].wait()


def test_a_forked_process_spawns_with_its_own_thread_and_queue() -> None:
    SPAWNER.popen(["true"]).wait()  # the parent's spawner thread exists
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports by its exit status
        code = 1
        try:
            code = SPAWNER.popen(["true"]).wait()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
