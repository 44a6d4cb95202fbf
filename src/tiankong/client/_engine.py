"""Start an embedded managed engine for ``Client(model=…)`` (shared by both clients)."""

from __future__ import annotations

from typing import Any

from ..engine.launcher import launch
from ..engine.process import EngineProcess
from ..engine.settings import engine_config, engine_keys
from ..models import resolve_installed


def start_embedded(
    model: str, *, ctx: int = 4096, slots: int = 2, llama_server: str | None = None,
    startup_timeout_s: float = 180.0, adapters: list[str] | None = None, embeddings: bool = False,
) -> EngineProcess:
    """A managed engine for an installed model, with LoRA ``adapters`` (names or paths) loaded unapplied;
    ``embeddings``: per-token embeddings on (``--pooling none``: deciders pool them themselves)."""
    record = resolve_installed(model)
    keys = engine_keys(ctx=ctx, slots=slots, lora=list(adapters or []), embeddings=embeddings, pooling="none")
    return launch(engine_config(keys, record.path, alias=record.name), llama_server,
                  startup_timeout_s=startup_timeout_s)


#: the longest a request waits for an embedded engine its watchdog is restarting (a restart is seconds; a model's
#: load on a busy machine can take a minute)
ENGINE_BACK_S = 120.0


def engine_now(engine: Any) -> str:
    """Where an embedded engine stands for a request that could not connect: "ready" (send again, at its URL:
    a restart moves it to a new port), "wait" (being restarted) or "gone" (stopped, or its watchdog gave up)."""
    state = str(getattr(engine, "state", ""))
    if state == "ready":
        return "ready"
    return "wait" if state == "starting" or (state == "failed" and not getattr(engine, "gave_up", False)) else "gone"
