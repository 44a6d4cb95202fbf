"""Start an embedded managed engine for ``Client(model=…)`` (shared by both clients)."""

from __future__ import annotations

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
