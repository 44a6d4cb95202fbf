"""EngineProcess lifecycle: real llama-server for start/crash/restart, a fake server for the edge cases."""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path

import httpx
import pytest

from conftest import FAKE_SERVER, pid_alive, wait_until
from tiankong.engine import EngineBinary, EngineConfig, EngineProcess, EngineState
from tiankong.errors import ConfigError, EngineStartError, PortInUse


def fake_engine(monkeypatch: pytest.MonkeyPatch, mode: str, **kw: object) -> EngineProcess:
    monkeypatch.setenv("FAKE_MODE", mode)
    return EngineProcess(EngineConfig(model=Path("/dev/null")), FAKE_SERVER, **kw)  # type: ignore[arg-type]


def test_real_engine_serves_and_stops_cleanly(engine_binary: EngineBinary, smol_path: Path) -> None:
    engine = EngineProcess(EngineConfig(model=smol_path, ctx=1024, slots=1), engine_binary)
    with engine:
        assert engine.state == EngineState.READY
        assert engine.url.startswith("http://127.0.0.1:")
        pid = engine.pid
        assert pid is not None
        answer = httpx.post(f"{engine.url}/completion", json={"prompt": "1, 2, 3,", "n_predict": 4}, timeout=60)
        assert answer.status_code == 200 and answer.json()["tokens_predicted"] > 0
    assert engine.state == EngineState.STOPPED
    assert not pid_alive(pid)


def test_state_changes_are_checked_transitions_heard_by_subscribers(monkeypatch: pytest.MonkeyPatch) -> None:
    from tiankong.engine.supervised import IllegalTransition, StateChange

    engine = fake_engine(monkeypatch, "ok", stop_grace_s=1.0)
    heard: list[StateChange] = []
    unsubscribe = engine.subscribe(heard.append)
    with pytest.raises(IllegalTransition, match="stopped → ready"):
        engine._transition(EngineState.READY, "no start")  # an engine cannot be ready without starting
    assert engine.state == EngineState.STOPPED and heard == []
    with engine:
        assert engine.state == EngineState.READY
    assert [(c.old.value, c.new.value) for c in heard] == [
        ("stopped", "starting"), ("starting", "ready"), ("ready", "stopping"), ("stopping", "stopped")]
    assert all(c.process is engine for c in heard) and heard[1].reason == "healthy"
    unsubscribe()
    engine.start()
    engine.stop()
    assert len(heard) == 4  # unsubscribed: nothing more heard


def test_crash_is_restarted(engine_binary: EngineBinary, smol_path: Path) -> None:
    reasons: list[str] = []
    engine = EngineProcess(EngineConfig(model=smol_path, ctx=1024, slots=1), engine_binary, on_restart=reasons.append)
    with engine:
        first = engine.pid
        assert first is not None
        os.kill(first, signal.SIGKILL)
        assert wait_until(lambda: engine.restarts == 1 and engine.state == EngineState.READY and engine.pid != first)
        assert engine.health()
        assert reasons and "exited" in reasons[0]
        assert not pid_alive(first)
    assert engine.pid is None


def test_restart_after_n_requests(engine_binary: EngineBinary, smol_path: Path) -> None:
    engine = EngineProcess(EngineConfig(model=smol_path, ctx=1024, slots=1), engine_binary, restart_after_requests=2)
    with engine:
        first = engine.pid
        engine.note_request()
        assert engine.pid == first
        engine.note_request()
        assert engine.pid != first and engine.restarts == 1 and engine.health()


def test_crash_at_start_fails_fast_with_log_tail(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = fake_engine(monkeypatch, "crash", startup_timeout_s=600)
    with pytest.raises(EngineStartError) as err:
        engine.start()
    assert "exited with code 3" in str(err.value)  # the exit was noticed; not the "not healthy within" deadline
    assert "failed to load model" in err.value.log_tail


def test_slow_health_hits_the_deadline_and_leaves_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = fake_engine(monkeypatch, "slow-health", startup_timeout_s=1.5)
    with pytest.raises(EngineStartError, match="not healthy within"):
        engine.start()
    assert engine.proc is not None and engine.proc.poll() is not None


def test_process_ignoring_sigterm_is_killed(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = fake_engine(monkeypatch, "ignore-term", stop_grace_s=1.0)
    engine.start()
    pid = engine.pid
    assert pid is not None and pid_alive(pid)
    engine.stop()
    assert not pid_alive(pid)
    assert "ignoring SIGTERM" in (engine.log_path.read_text() if engine.log_path else "")


def test_wedged_engine_is_detected_and_restarted(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = fake_engine(monkeypatch, "wedge", stop_grace_s=1.0)
    with engine:
        first = engine.pid
        assert engine.health()  # /health still says ok …
        assert engine.check_wedged(timeout_s=0.5)  # … but /slots does not answer
        assert engine.restarts == 1 and engine.pid != first
    monkeypatch.setenv("FAKE_MODE", "ok")
    healthy = fake_engine(monkeypatch, "ok")
    with healthy:
        assert not healthy.check_wedged(timeout_s=2.0)


def test_explicit_port_in_use_is_refused_before_starting(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        monkeypatch.setenv("FAKE_MODE", "ok")
        engine = EngineProcess(EngineConfig(model=Path("/dev/null"), port=port), FAKE_SERVER)
        with pytest.raises(PortInUse, match=str(port)) as caught:
            engine.start()
        assert engine.proc is None
        assert isinstance(caught.value, ConfigError) and caught.value.http_status == 400  # the config's fault


def test_engine_http_and_stream_errors_are_tiankong_errors() -> None:
    from tiankong.client.assemble import StreamFailed
    from tiankong.errors import TiankongError, TransportError
    from tiankong.gateway.engine_http import EngineHTTPError, EngineTimeout

    for error in (EngineHTTPError("closed"), EngineTimeout("slow"), StreamFailed({"message": "boom"})):
        assert isinstance(error, TransportError) and isinstance(error, TiankongError) and error.one_line()


def _kill_until(engine: EngineProcess, times: int) -> None:
    for _ in range(times):
        assert wait_until(lambda: engine.state == EngineState.READY and engine.alive(), timeout_s=90)
        pid = engine.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        assert wait_until(lambda killed=pid: engine.pid != killed or engine.state != EngineState.READY, timeout_s=30)


def test_after_the_restart_budget_the_engine_keeps_retrying_and_logs_each_crash(
        engine_binary: EngineBinary, smol_path: Path) -> None:
    """Issue 21 row 11: kill -9 more often than the budget allows; the engine still comes back."""
    logs: list[str] = []
    engine = EngineProcess(EngineConfig(model=smol_path, ctx=1024, slots=1), engine_binary, max_restarts=2,
                           restart_window_s=120, max_backoff_s=1.0, log=logs.append)
    with engine:
        _kill_until(engine, 4)
        assert wait_until(lambda: engine.state == EngineState.READY and engine.health(), timeout_s=90)
        assert engine.restarts >= 3
    crashes = [line for line in logs if "exited with status -9" in line]
    assert len(crashes) == 4 and all("log tail:" in line for line in crashes)
    assert any("budget spent; trying again" in line for line in logs)


def test_after_the_restart_budget_exit_mode_gives_up(engine_binary: EngineBinary, smol_path: Path) -> None:
    gave_up: list[bool] = []
    engine = EngineProcess(EngineConfig(model=smol_path, ctx=1024, slots=1), engine_binary, max_restarts=1,
                           restart_window_s=120, after_budget="exit", on_give_up=lambda: gave_up.append(True))
    with engine:
        _kill_until(engine, 2)
        assert wait_until(lambda: bool(gave_up), timeout_s=60)
        assert engine.state == EngineState.FAILED and engine.next_retry_s is None
