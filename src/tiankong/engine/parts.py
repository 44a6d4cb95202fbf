"""Retrieval parts: an engine per installed embedding model, started on first use beside the chat engine.

A task flow asks a part by name (``Call(..., part="all-minilm-l6-v2:f16")``); the flow drivers send such a call
here instead of to the client's own engine. One managed llama-server per part and process (``--embeddings
--pooling mean``, one slot's context = the model's training context), supervised like every engine, stopped with
:func:`stop_parts` or at interpreter exit. A part that is not installed is not started: the caller learns
:class:`PartMissing` and the task says which part it went without.

Why an engine of our own rather than a pool entry of the gateway: the part answers a task's flow wherever that
flow runs (an embedded ``Client``, a client over plain llama-server, or the gateway), and an embedding of a
100-token passage takes milliseconds, so it needs no admission queue of its own.
"""

from __future__ import annotations

import atexit
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from ..errors import ConfigError, ServerError, TransportError
from .launcher import launch
from .process import EngineProcess
from .settings import engine_config, engine_keys
from .supervised import ProcessState

#: texts one request carries (llama-server embeds a request's inputs in one batch)
BATCH = 64


class PartMissing(ConfigError):
    """The retrieval part a task wanted is not installed (the task goes on without it, and says so)."""


class PartEngines:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._engines: dict[str, EngineProcess] = {}
        # no keep-alive: llama-server's HTTP library closes a kept connection after a few requests, and a pooled
        # connection it closed meanwhile answers the next request with a reset (seen under a flow's parallel calls);
        # a fresh loopback connection per call costs well under a millisecond
        self._http = httpx.Client(timeout=120.0, limits=httpx.Limits(max_keepalive_connections=0))
        self.llama_server: str | None = None
        self._starter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tiankong-parts")

    def engine(self, name: str) -> EngineProcess:
        with self._lock:
            engine = self._engines.get(name)
            if engine is not None and engine.state == ProcessState.READY and engine.alive():
                return engine
            if engine is not None:
                engine.stop()
            # started from one long-lived thread: an engine dies with the thread that spawned it (PR_SET_PDEATHSIG),
            # and a flow's call may run on a short-lived worker thread
            self._engines[name] = engine = self._starter.submit(self._start, name).result()
            return engine

    def _start(self, name: str) -> EngineProcess:
        from ..models import resolve_installed
        from ..models.registry import resolve

        record = resolve(name)
        if not record.installed:
            raise PartMissing(f"the retrieval part {name} is not installed",
                              hint=f"tiankong models pull {name}")
        record = resolve_installed(name)
        train_ctx = record_ctx(record.path)
        keys = engine_keys(ctx=train_ctx * 2, slots=2, embeddings=True, pooling="mean")
        config = engine_config(keys, record.path, alias=record.name, batch=train_ctx, ubatch=train_ctx, metrics=False)
        return launch(config, self.llama_server)

    def send(self, name: str, method: str, path: str, body: dict[str, Any] | None) -> Any:
        engine = self.engine(name)
        for attempt in range(3):  # every part call is idempotent (tokenize, embed, props): a reset one goes again
            try:
                response = self._http.request(method, engine.url + path, json=body,
                                              headers=engine.config.auth_headers())
                break
            except httpx.TransportError as exc:
                if attempt == 2 or not engine.alive():
                    raise TransportError(f"retrieval part {name}: {exc!r}",
                                         hint="see the part engine's log; the next call restarts it") from None
                engine = self.engine(name)
        if response.status_code != 200:
            raise ServerError(response.status_code, f"retrieval part {name}: {response.text[:300]}")
        return response.json()

    def stop_all(self) -> None:
        with self._lock:
            engines, self._engines = list(self._engines.values()), {}
        for engine in engines:
            engine.stop()


def record_ctx(path: Any) -> int:
    """The model's training context (an embedding model's positions), at most 8192."""
    from ..models.gguf_meta import read_gguf

    info = read_gguf(path)
    return max(64, min(8192, int(getattr(info, "context_length", 0) or 512)))


PARTS = PartEngines()
atexit.register(PARTS.stop_all)


def part_request(part: str, method: str, path: str, body: dict[str, Any] | None) -> Any:
    """What a flow's ``Call(part=…)`` is answered with."""
    return PARTS.send(part, method, path, body)


def stop_parts() -> None:
    PARTS.stop_all()
