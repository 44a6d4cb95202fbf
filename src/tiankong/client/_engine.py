"""Start an embedded managed engine for ``Client(model=…)`` (shared by both clients)."""

from __future__ import annotations

from ..engine import EngineConfig, EngineProcess
from ..models import resolve_installed


def start_embedded(
    model: str, *, ctx: int = 4096, slots: int = 2, llama_server: str | None = None,
    startup_timeout_s: float = 180.0,
) -> EngineProcess:
    record = resolve_installed(model)
    config = EngineConfig(model=record.path, ctx=ctx, slots=slots, alias=record.name)
    return EngineProcess(config, llama_server, startup_timeout_s=startup_timeout_s).start()
