"""``tiankong.engine.launch`` and ``SupervisedProcess``'s one restart rule (``RestartPolicy``), on the fake server.

The real-engine restart tests stay in test_engine_process.py (budget retry/exit with llama-server); these run in
seconds without a model: the policy's budget and give-up, the refusal of an unresolved ``spec="auto"`` and the one
transition checker that processes and batches share.
"""

from __future__ import annotations

import math
import os
import signal
from pathlib import Path

import pytest

from conftest import FAKE_SERVER, wait_until
from tiankong.batch.batches import TRANSITIONS as BATCH_TRANSITIONS
from tiankong.batch.batches import BatchState, IllegalBatchTransition
from tiankong.engine import NO_RESTARTS, EngineConfig, EngineProcess, ProcessState, RestartPolicy, launch
from tiankong.engine.supervised import RPC_RESTARTS, TRANSITIONS, IllegalTransition, check_transition
from tiankong.errors import ConfigError

FAST = RestartPolicy(max_restarts=2, window_s=120.0, after_budget="exit", initial_backoff_s=0.1, max_backoff_s=0.2)


def fake(monkeypatch: pytest.MonkeyPatch, mode: str = "ok") -> EngineConfig:
    monkeypatch.setenv("FAKE_MODE", mode)
    return EngineConfig(model=Path("/dev/null"))


def kill(engine: EngineProcess) -> int:
    assert wait_until(lambda: engine.state == ProcessState.READY and engine.alive(), timeout_s=30)
    pid = engine.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    return pid


def test_launch_starts_a_supervised_engine_and_can_leave_it_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    idle = launch(fake(monkeypatch), FAKE_SERVER, start=False)
    assert idle.state == ProcessState.STOPPED and idle.pid is None
    with launch(fake(monkeypatch), FAKE_SERVER, policy=FAST, stop_grace_s=1.0) as engine:
        assert engine.state == ProcessState.READY and engine.health()
        assert engine.policy is FAST and engine.spec_decision is None
    assert engine.state == ProcessState.STOPPED


def test_the_restart_budget_is_the_policy_s_and_exit_gives_up_once(monkeypatch: pytest.MonkeyPatch) -> None:
    gave_up: list[bool] = []
    logs: list[str] = []
    engine = launch(fake(monkeypatch), FAKE_SERVER, policy=FAST, stop_grace_s=1.0, log=logs.append,
                    on_give_up=lambda: gave_up.append(True))
    try:
        for expected in (1, 2):  # two crashes within the window: both restarted
            killed = kill(engine)
            assert wait_until(lambda k=killed: engine.pid != k and engine.state == ProcessState.READY, timeout_s=30)
            assert engine.restarts == expected
        kill(engine)  # the third: the budget (2 in 120 s) is spent
        assert wait_until(lambda: bool(gave_up), timeout_s=30)
        assert engine.state == ProcessState.FAILED and engine.gave_up and engine.restarts == 2
        assert gave_up == [True] and not engine.alive()
        assert sum("exited with status -9" in line for line in logs) == 3
        assert any("restart budget spent (2 in 120 s): giving up" in line for line in logs)
    finally:
        engine.stop()
    assert engine.state == ProcessState.STOPPED


def test_no_restarts_leaves_a_crashed_engine_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = launch(fake(monkeypatch), FAKE_SERVER, policy=NO_RESTARTS, stop_grace_s=1.0)
    try:
        kill(engine)
        assert wait_until(lambda: engine.state == ProcessState.FAILED, timeout_s=30)
        assert engine.restarts == 0 and engine.gave_up
    finally:
        engine.stop()


def test_spec_auto_is_decided_by_launch_not_by_the_process() -> None:
    auto = EngineConfig(model=Path("/dev/null"), spec="auto", draft_model=Path("/dev/null"))
    with pytest.raises(ConfigError, match="launch"):
        EngineProcess(auto)


def test_policies_are_checked_and_the_rpc_rule_counts_a_life() -> None:
    with pytest.raises(ValueError, match="after_budget"):
        RestartPolicy(after_budget="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="backoff"):
        RestartPolicy(initial_backoff_s=5.0, max_backoff_s=1.0)
    assert [FAST.next_backoff(b) for b in (0.1, 0.15, 0.2)] == [0.2, 0.2, 0.2]
    assert math.isinf(RPC_RESTARTS.window_s) and RPC_RESTARTS.after_budget == "exit"


def test_one_transition_checker_for_processes_and_batches() -> None:
    def refuse(old: object, new: object) -> Exception:
        return IllegalTransition(f"{old} → {new}")

    check_transition(TRANSITIONS, ProcessState.READY, ProcessState.STARTING, refuse)
    with pytest.raises(IllegalTransition, match="stopping → ready"):
        check_transition(TRANSITIONS, ProcessState.STOPPING, ProcessState.READY, refuse)
    check_transition(BATCH_TRANSITIONS, BatchState.VALIDATING, BatchState.IN_PROGRESS, refuse)
    with pytest.raises(IllegalTransition, match="completed → in_progress"):
        check_transition(BATCH_TRANSITIONS, BatchState.COMPLETED, BatchState.IN_PROGRESS, refuse)
    assert issubclass(IllegalBatchTransition, Exception)
