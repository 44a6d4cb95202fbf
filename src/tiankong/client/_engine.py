"""Start an embedded managed engine for ``Client(model=…)`` (shared by both clients)."""

from __future__ import annotations

import time
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


def wait_engine_back(engine: Any, url: str | None) -> bool:
    """Wait (at most ``ENGINE_BACK_S``) for an embedded engine being restarted; whether it is back (ready, at a new
    URL, or answering at ``url``). Blocking: ``AsyncClient`` runs it in a thread."""
    deadline = time.monotonic() + ENGINE_BACK_S
    unseen_until = time.monotonic() + 5.0  # a crash its watchdog has not seen yet (0.2 s) still reads "ready"
    while time.monotonic() < deadline:
        now = engine_now(engine)
        if now == "gone":
            return False
        if now == "ready":
            if engine.url != url or engine.health():
                return True
            if time.monotonic() > unseen_until:
                return False
        time.sleep(0.2)
    return False
