"""Binding checks (``engine/ports.py``): IPv6 is tried as IPv6, a host that is not this machine's is said to be so
— not "port already in use" — and an engine given such a host fails instead of staying "starting"."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tiankong.engine.flags import EngineConfig
from tiankong.engine.ports import free_port, port_in_use
from tiankong.engine.process import EngineProcess
from tiankong.engine.supervised import NO_RESTARTS, ProcessState
from tiankong.errors import ConfigError

pytestmark = pytest.mark.unit


def test_a_taken_port_is_in_use_and_a_free_one_is_not() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        assert port_in_use("127.0.0.1", taken.getsockname()[1])
    assert not port_in_use("127.0.0.1", free_port("127.0.0.1"))


def test_ipv6_loopback_is_bound_as_ipv6() -> None:
    port = free_port("::1")
    assert port > 0 and not port_in_use("::1", port)


@pytest.mark.parametrize(("host", "said"), [("nosuch.invalid", "does not resolve"),
                                             ("10.9.9.9", "not an address of this machine")])
def test_a_host_that_is_not_this_machines_is_said_so(host: str, said: str) -> None:
    for check in (lambda: port_in_use(host, 18999), lambda: free_port(host)):
        with pytest.raises(ConfigError, match=said):
            check()


def test_an_engine_on_such_a_host_fails_instead_of_staying_starting() -> None:
    engine = EngineProcess(EngineConfig(model=Path("/nonexistent.gguf"), host="10.9.9.9", port=18999),
                           Path("/bin/true"), policy=NO_RESTARTS)
    with pytest.raises(ConfigError, match="not an address"):
        engine.start()
    assert engine.state == ProcessState.FAILED
