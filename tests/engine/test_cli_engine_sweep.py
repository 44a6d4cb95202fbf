"""What a read-only sweep of the engine and model verbs found (2026-12-07, second sweep): values a binary cannot
use taken and failing late or misleadingly (`--jobs -3` read as a missing compiler, `--port 70000` and `--host ::1`
as a worker that "exited during start-up", `--max-tokens 0` refused only after an engine start), a hint that said
to rebuild when the user's own `TIANKONG_LLAMA_SERVER` was the broken part, and a second `engine install` that
waited for the first without a word. Each is a one-line error (or a said wait) now, before any process starts."""

from __future__ import annotations

import fcntl
import threading
from pathlib import Path

import pytest

from conftest import assert_one_line_error, run_cli
from tiankong.models import TEST_MODEL


@pytest.mark.parametrize("args, needle", [
    (["engine", "install", "--jobs", "0"], "--jobs"),
    (["engine", "install", "--jobs", "-3"], "--jobs"),
    (["engine", "rpc-worker", "--port", "70000"], "--port"),
    (["engine", "rpc-worker", "--port", "-1"], "--port"),
    (["engine", "rpc-worker", "--threads", "0"], "--threads"),
    (["engine", "rpc-worker", "--host", "::1"], "ipv4"),
    (["run", "--max-tokens", "0", "hi"], "--max-tokens"),
    (["chat", "--max-tokens", "-1"], "--max-tokens"),
    (["run", "--url", "http://127.0.0.1:9", "--llama-server", "/x", "hi"], "--llama-server"),  # it was ignored
    (["bench", "ladder", "--url", "http://127.0.0.1:9", "--slots", "4"], "--slots"),  # so was this
    (["tune", "classify", "--data", "x.jsonl", "--name", "t", "--no-engine", "--model", TEST_MODEL], "--no-engine"),
    (["tune", "classify", "--data", "x.jsonl", "--name", "t", "--url", "http://127.0.0.1:9", "--model", "m"], "--url"),
    (["tune", "dedupe", "--data", "x.jsonl", "--name", "t", "--methods", ""], "--methods"),
    # measured without the mode they shape (an n-gram-only bench with draft lengths, a draft bench with n-gram modes)
    (["bench", "spec", "--target", TEST_MODEL, "--ngram", "--n-max", "4"], "--draft"),
    (["bench", "spec", "--target", TEST_MODEL, "--draft", TEST_MODEL, "--ngram-types", "ngram-simple"], "--ngram"),
])
def test_a_value_the_binary_cannot_use_is_refused_first(args: list[str], needle: str) -> None:
    proc = run_cli(*args, timeout=60)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    assert needle.lower() in proc.stderr.lower() and "start-up" not in proc.stderr, proc.stderr


def test_a_broken_engine_the_user_named_is_theirs_to_fix() -> None:
    proc = run_cli("engine", "info", env={"TIANKONG_LLAMA_SERVER": "/bin/true"})
    assert_one_line_error(proc, "TIANKONG_LLAMA_SERVER")
    assert "--force" not in proc.stderr  # a rebuild cannot help: the variable wins over the managed build


def test_a_second_install_says_it_waits_for_the_first(tmp_path: Path) -> None:
    from tiankong.engine.install import _install_lock

    lock = tmp_path / ".install.lock"
    said: list[str] = []
    inside = threading.Event()

    def second() -> None:
        with _install_lock(lock, said.append):
            inside.set()

    with lock.open("w") as first:
        fcntl.flock(first, fcntl.LOCK_EX)  # the first install, building
        thread = threading.Thread(target=second)
        thread.start()
        assert not inside.wait(1.0)  # it waits …
        assert said and "waiting" in said[0]  # … and says so
        fcntl.flock(first, fcntl.LOCK_UN)
    thread.join(10)
    assert inside.is_set()


def test_engine_info_keeps_the_design_contract() -> None:
    """DESIGN.md: `engine info --json` has `path`, `version`, `rung`, `amx` (bool) and `smoke` ("ok" or the
    failure); `smoke` was the whole result object."""
    import json

    proc = run_cli("engine", "info", "--json")
    data = json.loads(proc.stdout)
    assert {"path", "version", "rung", "amx", "smoke"} <= data.keys() and isinstance(data["amx"], bool)
    assert data["smoke"] == "ok" and data["smoke_test"]["status"] == "ok"
