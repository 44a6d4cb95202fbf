"""Start an embedded managed engine for ``Client(model=…)`` (shared by both clients)."""

from __future__ import annotations

from ..engine import EngineConfig, EngineProcess
from ..lora import adapter_file
from ..models import resolve_installed


def start_embedded(
    model: str, *, ctx: int = 4096, slots: int = 2, llama_server: str | None = None,
    startup_timeout_s: float = 180.0, adapters: list[str] | None = None, embeddings: bool = False,
) -> EngineProcess:
    """A managed engine for an installed model, with LoRA ``adapters`` (names or paths) loaded unapplied;
    ``embeddings``: per-token embeddings on (``--pooling none``: deciders pool them themselves)."""
    record = resolve_installed(model)
    lora = [adapter_file(name, record.path) for name in adapters or []]
    config = EngineConfig(model=record.path, ctx=ctx, slots=slots, alias=record.name, lora=lora,
                          embeddings=embeddings, pooling="none")
    return EngineProcess(config, llama_server, startup_timeout_s=startup_timeout_s).start()
