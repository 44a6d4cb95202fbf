"""The unit tier: sans-I/O flows driven by a scripted transport (``helpers/scripted.py``), pure functions on
hand-made inputs. No engine, no model, no network: a unit test that starts a process named like an engine, or asks
for an engine fixture, fails at once (run the tier alone with ``make test-unit``; it takes seconds)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ENGINE_NAMES = ("llama-server", "rpc-server", "llama-bench", "fake_server")
ENGINE_FIXTURES = ("smol_engine", "engine_binary", "default_model_path", "smol_path", "embed_engine")
HERE = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.unit)
            asked = [name for name in ENGINE_FIXTURES if name in getattr(item, "fixturenames", ())]
            if asked:
                raise pytest.UsageError(f"{item.nodeid} is a unit test but asks for {asked}: unit tests run no "
                                        "engine (move it to tests/engine/)")


class _NoEnginePopen(subprocess.Popen):  # type: ignore[type-arg]
    def __init__(self, args: Any, *rest: Any, **kwargs: Any) -> None:
        argv = [str(a) for a in (args if isinstance(args, (list, tuple)) else [args])]
        if any(name in part for part in argv[:2] for name in ENGINE_NAMES):
            pytest.fail(f"a unit test tried to start an engine: {' '.join(argv)[:200]}", pytrace=True)
        super().__init__(args, *rest, **kwargs)


@pytest.fixture(autouse=True)
def no_engine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """Fail loudly when a unit test starts an engine (any llama.cpp process) — it belongs in the engine tier.
    The data dir is empty: no installed model (an embedding part would start its own engine), and no retrieval
    part an engine-tier test left running in this process is reachable (found when the whole suite ran: a dedupe
    flow test got real embeddings from one)."""
    from tiankong.engine.parts import stop_parts

    stop_parts()
    monkeypatch.setattr(subprocess, "Popen", _NoEnginePopen)
    monkeypatch.setenv("TIANKONG_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("TIANKONG_CACHE_DIR", str(tmp_path / "cache"))
    # not the user's config file (route reads [route] there): an empty config dir, no TIANKONG_CONFIG (which must
    # name a file that is there)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.delenv("TIANKONG_CONFIG", raising=False)
    monkeypatch.delenv("TIANKONG_URL", raising=False)
    yield
