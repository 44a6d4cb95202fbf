"""The engines a batch runs on: one managed llama-server (``model``) or running servers (``url``, a pool).

A managed engine gets a fixed port, so when its watchdog restarts it after a crash the clients reconnect
to the same URL. With several URLs each item goes to the server with the fewest items in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path
from typing import Any

import httpx

from ..engine.launcher import launch
from ..engine.ports import free_port
from ..engine.process import EngineProcess
from ..engine.settings import engine_config, engine_keys
from ..engine.supervised import ProcessState
from ..errors import ConfigError, TransportError
from ..models import resolve_installed
from .job import BatchJob
from .tasks import MeteredClient

#: the client of an engine-free job: its tasks make no engine calls (a closed port, never contacted)
NO_ENGINE_URL = "http://127.0.0.1:9"


def start_managed(job: BatchJob) -> EngineProcess:
    """Start the job's model on a fixed free port (restarts keep the URL)."""
    assert job.model is not None
    record = resolve_installed(job.model)
    slots = job.slots
    ctx = job.slot_ctx
    if ctx % slots:
        raise ConfigError(f"ctx {ctx} is not divisible by slots {slots}", hint="pick ctx = slots × per-slot ctx")
    needs = job.decider_engine()
    embeddings = needs.embeddings or _asks_embeddings(job)
    keys = engine_keys(ctx=ctx, slots=slots, embeddings=embeddings, pooling="none", lora=list(needs.adapters))
    return launch(engine_config(keys, record.path, alias=record.name, port=free_port()), job.llama_server)


def _asks_embeddings(job: BatchJob) -> bool:
    """An OpenAI batch file (no task) with a ``/v1/embeddings`` line: the managed engine starts with embeddings on
    (each such line failed with llama-server's 501 "start it with --embeddings", a flag `batch run` does not take).
    A byte search, not a parse: a chat line that merely mentions the path only turns embeddings on."""
    if job.task is not None or job.kind != "records" or not Path(job.input).is_file():
        return False
    with Path(job.input).open("rb") as handle:
        return any(b"/embeddings" in line for line in handle)


class BatchEngines:
    """Clients for the job's servers, least-busy selection, and the managed engine (if any).

    ``passthrough``: the one client is a tiankong gateway running the batch itself (its Batch API), which
    takes every request line's body on the route of its URL; ``slot_count`` is then how many items it wants in
    flight.
    """

    def __init__(self, clients: list[MeteredClient], engine: EngineProcess | None = None,
                 engine_free: bool = False, *, passthrough: bool = False, slot_count: int | None = None) -> None:
        self.clients = clients
        self.engine = engine
        self.engine_free = engine_free
        self.passthrough = passthrough
        self.slot_count = slot_count
        self.inflight = [0] * len(clients)

    @classmethod
    async def open(cls, job: BatchJob) -> BatchEngines:
        engine = None
        urls = list(job.url)
        needs = job.decider_engine()
        if not job.model and not urls and not os.environ.get("TIANKONG_URL"):
            if not needs.engine:  # an engine-free decider (tf-idf): no call ever reaches this placeholder
                return cls([MeteredClient(NO_ENGINE_URL, timeout_s=job.timeout_s)], None, engine_free=True)
            if needs.model:  # a decider runs on the model it was tuned on
                job = job.model_copy(update={"model": needs.model})
        if job.model:
            engine = await asyncio.to_thread(start_managed, job)
            urls = [engine.url]
        elif not urls and os.environ.get("TIANKONG_URL"):
            urls = [os.environ["TIANKONG_URL"]]
        if not urls:
            raise ConfigError("no engine for the batch", hint="pass --model NAME (managed engine) or --url URL")
        model = engine.config.alias if engine else None
        key = None if engine else (os.environ.get("TIANKONG_API_KEY") or None)  # a gateway's key, for its urls
        clients = [MeteredClient(url, model=model, timeout_s=job.timeout_s, api_key=key) for url in urls]
        return cls(clients, engine)

    async def slots(self) -> int:
        """Total parallel slots of all servers (``/props`` ``total_slots``; 1 for a server that does not say)."""
        if self.slot_count is not None:
            return self.slot_count
        if self.engine is not None:
            return self.engine.config.slots
        if self.engine_free:
            return 4
        counts = await asyncio.gather(*(self._slots(client) for client in self.clients))
        return sum(counts)

    @staticmethod
    async def _slots(client: MeteredClient) -> int:
        try:
            props: Any = await client._request("GET", "/props")
        except TransportError as exc:
            raise ConfigError(f"cannot use the server {client.url}: {exc.one_line()}") from None
        value = props.get("total_slots") if isinstance(props, dict) else None
        return int(value) if isinstance(value, int) and value > 0 else 1

    def acquire(self) -> int:
        index = min(range(len(self.clients)), key=self.inflight.__getitem__)
        self.inflight[index] += 1
        return index

    def release(self, index: int) -> None:
        self.inflight[index] -= 1

    def engine_gave_up(self) -> bool:
        return self.engine is not None and self.engine.state == ProcessState.FAILED

    async def close(self) -> None:
        for client in self.clients:
            with contextlib.suppress(Exception):
                await client.close()
        if self.engine is not None:
            await asyncio.to_thread(self.engine.stop)
            self.engine = None


class EngineGone(TransportError):
    """The engine (or the Ray actor that runs it) went away with the item in flight: send it again."""


def unreachable(exc: BaseException) -> bool:
    """A server that could not be reached or dropped the connection (not an HTTP error answer)."""
    from ..errors import ServerError

    if isinstance(exc, EngineGone):
        return True
    if isinstance(exc, ServerError):
        if exc.status == 504 and '"deadline_exceeded"' in exc.body:
            return False  # a tiankong gateway's deadline for this one request: its answer, not an outage
        return exc.status in (502, 503, 504)  # loading, restarting, a proxy in front of a dead engine
    if not isinstance(exc, TransportError):
        return False
    return isinstance(exc.__context__, httpx.HTTPError) or str(exc).startswith("cannot reach")
