"""Batch jobs on a Ray cluster (``executor="ray"``, ``tiankong batch run --ray [ADDRESS]``; extra ``[ray]``).

Each alive node gets one actor (``EngineActor``) pinned to it and sized to its CPUs: it installs the job's model
from the catalog into the node's data dir if it is missing (sha256-checked by ``models.pull``), starts and
supervises its own llama-server (``EngineProcess``: watchdog, restarts, dies with the actor), and runs the
task flows against it. The driver keeps the single-machine worker (``runner.py``): it reads the input, sends
items to the least busy actor, and alone appends to the output store — so exactly-once, resume, dedupe and the
report work unchanged. An actor that dies (or whose node does) fails its in-flight items as unreachable; they
are sent again to the other actors (Ray restarts the actor too, up to ``ACTOR_RESTARTS`` times). A driver
killed mid-job leaves the store as a local run does: the same command resumes it.

Ray is used rather than a scheduler of our own: it already places actors on nodes, restarts them, moves
objects between hosts and tells the driver when an actor's process is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError, EngineError, TiankongError, TransportError
from .engines import EngineGone
from .job import BatchJob

MIN_RAY = (2, 9)
ACTOR_RESTARTS = 2
READY_TIMEOUT_S = 1800.0  # an actor may install its model (hundreds of MB) before its engine starts
CONNECT_TIMEOUT_S = 5.0
GIB = 1024 ** 3


def import_ray() -> Any:
    """The ``ray`` module, or a one-line error naming the extra (or the version) to install."""
    try:
        import ray
    except ImportError:
        raise ConfigError("the Ray executor needs Ray", hint="pip install 'tiankong[ray]'") from None
    version = tuple(int(part) for part in ray.__version__.split(".")[:2] if part.isdigit())
    if version < MIN_RAY or version[0] != 2:
        raise ConfigError(f"Ray {ray.__version__} is not supported by the Ray executor",
                          hint="pip install 'ray>=2.9,<3' (the [ray] extra)")
    return ray


def connect(address: str | None) -> Any:
    """Join the cluster at ``address`` (``host:port`` of the head's GCS; ``auto``: the one ``ray start`` started;
    empty: a one-machine cluster of this process)."""
    target = "local" if address in (None, "", "local") else address  # "local": always a new cluster of its own,
    # never one that ray.init(None) would find on this machine (a `ray start` cluster, another job's)
    host = (target or "127.0.0.1").removeprefix("ray://").rpartition(":")[0] or "127.0.0.1"
    loopback = target != "auto" and host in ("127.0.0.1", "localhost")
    if loopback:  # Ray rewrites a loopback address to this host's network IP, which a loopback-bound cluster
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # does not listen on: keep loopback
    ray = import_ray()
    if loopback:
        with contextlib.suppress(AttributeError):
            ray._private.ray_constants.ENABLE_RAY_CLUSTER = os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] != "0"
    if ray.is_initialized():
        return ray
    if address and address not in ("auto", "local"):
        host, _, port = address.removeprefix("ray://").rpartition(":")
        try:
            with socket.create_connection((host or "127.0.0.1", int(port)), timeout=CONNECT_TIMEOUT_S):
                pass
        except (OSError, ValueError) as exc:
            raise TransportError(f"cannot reach the Ray cluster at {address} ({type(exc).__name__})",
                                 hint="start it with `ray start --head` and pass the address it prints "
                                      "(host:6379)") from None
    logging.getLogger("ray").setLevel(logging.ERROR)  # Ray's notices (auth mode, …) would break one-line output
    try:
        ray.init(address=target, namespace="tiankong", include_dashboard=False, log_to_driver=False,
                 configure_logging=False, **({"_node_ip_address": "127.0.0.1"} if loopback else {}))
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise TransportError(f"cannot join the Ray cluster at {address or 'a new local cluster'}: "
                             f"{str(exc).splitlines()[0][:200]}", hint="check the address and the Ray versions "
                             "(driver and cluster must run the same Ray)") from None
    return ray


@dataclass
class NodeStats:
    """Progress of one node (one actor) for the job report."""

    node: str
    cpus: int
    slots: int
    processed: int = 0
    failed: int = 0
    busy_s: float = 0.0
    started: float = field(default_factory=time.monotonic)

    def to_json(self) -> dict[str, Any]:
        elapsed = max(1e-9, time.monotonic() - self.started)
        return {"node": self.node, "cpus": self.cpus, "slots": self.slots, "processed": self.processed,
                "failed": self.failed, "items_per_s": round(self.processed / elapsed, 4)}


def node_slots(memory_bytes: float, job: BatchJob, spec: Any | None, model_bytes: int) -> int:
    """Slots for a node: the job's ``slots`` (default 4) at most, fewer when the memory plan (``tiankong.plan``:
    weights, KV cache, compute buffers) of 2048 tokens per slot does not fit 80 % of the node's memory. Without
    the model's GGUF on the driver (``spec`` None) the plan is the file size plus 64 MiB per slot."""
    from ..plan import PlanConfig, plan_memory

    budget = 0.8 * memory_bytes
    for slots in range(job.slots, 0, -1):
        if spec is not None:
            needed = plan_memory(spec, PlanConfig(ctx=2048 * slots, slots=slots)).total_bytes
        else:
            needed = model_bytes + slots * 64 * 1024 * 1024 + GIB // 4
        if needed <= budget:
            return slots
    raise ConfigError(f"a Ray node has {memory_bytes / GIB:.1f} GiB for tasks: too little for one slot of "
                      f"{job.model}", hint="add memory to the node, or use a smaller model")


class EngineActor:
    """One node's engine and the task flows that use it (made a Ray actor by :func:`actor_class`)."""

    def __init__(self, job_data: dict[str, Any], fmt: str, slots: int, threads: int) -> None:
        from ..engine.launcher import launch
        from ..engine.ports import free_port
        from ..engine.settings import engine_config, engine_keys
        from .tasks import MeteredClient

        self.engine: Any = None
        self.failure: str | None = None  # why this node cannot run the job (told by ``where``, not raised:
        try:  # Ray would wrap a raised error in a multi-line creation-task report)
            job = BatchJob.model_validate(job_data)
            record = ensure_model(str(job.model))
            needs = job.decider_engine()
            keys = engine_keys(ctx=2048 * slots, slots=slots, threads=threads, embeddings=needs.embeddings,
                               pooling="none", lora=list(needs.adapters))
            config = engine_config(keys, record.path, alias=record.name, port=free_port())
            self.engine = launch(config, job.llama_server)
        except TiankongError as exc:
            self.failure = exc.one_line()
            return
        self.client = MeteredClient(self.engine.url, model=record.name, timeout_s=job.timeout_s)
        self.job, self.fmt = job, fmt

    def where(self) -> dict[str, Any]:
        import ray

        return {"node": ray.get_runtime_context().get_node_id(), "pid": os.getpid(), "failure": self.failure,
                "engine_pid": self.engine.pid if self.engine is not None else None}

    async def run(self, data: dict[str, Any]) -> dict[str, Any]:
        """One item: ``{"result", "usage"}`` or ``{"error": {type, message, http_status}, "unreachable"}``."""
        from ..engine.supervised import ProcessState
        from . import openai_fmt
        from .engines import unreachable
        from .tasks import METER, Meter, run_task

        if self.engine is None or self.engine.state == ProcessState.FAILED:  # restarted actor: no engine came up
            why = self.failure or "its engine kept crashing and was given up"
            return {"error": {"type": "engine_error", "message": why, "http_status": 503}, "unreachable": True,
                    "gave_up": True}
        meter = Meter()
        METER.set(meter)
        try:
            if self.fmt == "openai":
                result = await openai_fmt.run_request(self.client, data)
            else:
                result = await run_task(self.client, self.job, data)
        except TiankongError as exc:
            return {"error": {"type": exc.type, "message": exc.one_line(), "http_status": exc.http_status},
                    "unreachable": unreachable(exc)}
        except Exception as exc:  # noqa: BLE001 - a bug in one item must not kill the actor and its engine
            return {"error": {"type": "internal_error", "message": f"{type(exc).__name__}: {exc}",
                              "http_status": 500}, "unreachable": False}
        return {"result": result, "usage": meter.to_json()}

    def stop(self) -> None:
        if self.engine is not None:
            with contextlib.suppress(Exception):
                self.engine.stop()


def ensure_model(name: str) -> Any:
    """The model on this node: installed already, or pulled from the catalog now (sha256-checked)."""
    from ..models import resolve_installed
    from ..models.catalog import find_entry
    from ..models.pull import pull_model

    # a catalog model can be pulled on the node; any other (a fine-tuned part, a local file) must be copied there
    in_catalog = find_entry(name) is not None
    fix = f"run `tiankong models pull {name}` on that node" if in_catalog else \
        f"install {name} on that node (`tiankong models add FILE`; it is not in the catalog)"
    try:
        return resolve_installed(name)
    except ConfigError as missing:
        try:
            return pull_model(name, log=lambda _: None)
        except TiankongError as exc:
            raise ConfigError(f"node {socket.gethostname()} has no {name} and could not install it: "
                              f"{exc.one_line()}", hint=fix + (" (or give it network to the package registry)"
                                                               if in_catalog else "")) from missing
        except OSError as exc:
            raise ConfigError(f"node {socket.gethostname()} has no {name} and could not install it: {exc}",
                              hint=fix) from missing


class RemoteItemError(TiankongError):
    """An item that failed inside an actor, carried back as its type, message and HTTP status."""

    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(str(error.get("message", "failed")))
        self.type = str(error.get("type", "internal_error"))
        self.http_status = int(error.get("http_status", 500))


class RayEngines:
    """The runner's engines on a Ray cluster: one actor per node, least-busy selection, dead actors skipped."""

    passthrough = False

    def __init__(self, ray: Any, actors: list[Any], stats: list[NodeStats]) -> None:
        self.ray, self.actors, self.nodes = ray, actors, stats
        self.inflight = [0] * len(actors)
        self.failures = [0] * len(actors)  # consecutive calls that found the actor gone
        self.dead: set[int] = set()
        self.clients = actors  # the runner indexes engines by position

    @classmethod
    async def open(cls, job: BatchJob, fmt: str) -> RayEngines:
        ray = connect(job.ray)
        if not job.model:
            raise ConfigError("the Ray executor starts the job's model on every node", hint="pass --model NAME")
        from ..models import resolve

        record = resolve(job.model)  # an unknown name fails here, before any actor starts
        model_bytes = int(record.catalog.bytes) if record.catalog is not None else (
            Path(record.path).stat().st_size if record.installed else 0)
        spec = None
        if record.installed:
            from ..plan import load_spec

            with contextlib.suppress(TiankongError, OSError, ValueError):
                spec = load_spec(record.name)
        scheduling = ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy
        remote = ray.remote(EngineActor)
        plans = []  # every node's size first: a node too small fails the run before any actor starts
        for node in [n for n in ray.nodes() if n.get("Alive")]:
            cpus = int(node["Resources"].get("CPU", 0))
            if cpus >= 1:
                plans.append((node, cpus, node_slots(float(node["Resources"].get("memory", 8 * GIB)), job, spec,
                                                     model_bytes)))
        actors, stats = [], []
        for node, cpus, slots in plans:
            actor = remote.options(num_cpus=cpus, max_concurrency=4 * slots, max_restarts=ACTOR_RESTARTS,
                                   scheduling_strategy=scheduling(node_id=node["NodeID"], soft=False)).remote(
                job.model_dump(mode="json", by_alias=True), fmt, slots, cpus)
            actors.append(actor)
            stats.append(NodeStats(node=str(node.get("NodeManagerAddress", "?")) + "/" + node["NodeID"][:8],
                                   cpus=cpus, slots=slots))
        if not actors:
            raise ConfigError("the Ray cluster has no node with a CPU to run an engine on",
                              hint="add a node: ray start --address HEAD:6379 --num-cpus N")
        engines = cls(ray, actors, stats)
        await engines._ready()
        return engines

    async def _ready(self) -> None:
        """Wait for every actor's engine; a node that cannot start one is a one-line error."""
        for index, actor in enumerate(self.actors):
            try:
                where = await asyncio.wait_for(actor.where.remote(), READY_TIMEOUT_S)
                failure = where["failure"]
            except TimeoutError:
                failure = (f"not up within {READY_TIMEOUT_S:.0f} s (are the node's CPUs taken by other Ray work, "
                           "or is the model still being installed there?)")
            except Exception as exc:  # noqa: BLE001 - the actor's process died while it started
                failure = str(exc).splitlines()[0][:300]
            if failure:
                await self.close()
                raise EngineError(f"the engine on Ray node {self.nodes[index].node} did not start: {failure}",
                                  hint="fix that node and re-run the same command")
        for stat in self.nodes:
            stat.started = time.monotonic()  # per-node items/s count from when every engine is up

    async def slots(self) -> int:
        return sum(stat.slots for stat in self.nodes)

    def acquire(self) -> int:
        alive = [i for i in range(len(self.actors)) if i not in self.dead]
        if not alive:
            raise EngineError("every Ray actor of the job has died", hint="finished items are kept; re-run the "
                              "same command once the cluster is healthy")
        index = min(alive, key=lambda i: self.inflight[i] / self.nodes[i].slots)
        self.inflight[index] += 1
        return index

    def release(self, index: int) -> None:
        self.inflight[index] -= 1

    async def run_item(self, index: int, data: dict[str, Any]) -> tuple[Any, dict[str, int]]:
        """Run one item on actor ``index``: its result and token usage, or the error it raised."""
        started = time.monotonic()
        errors = self.ray.exceptions
        gone = (errors.RayActorError, getattr(errors, "ActorUnavailableError", errors.RayActorError))
        try:
            answer = await self.actors[index].run.remote(data)
        except gone as exc:  # died (Ray restarts it, ACTOR_RESTARTS times) or unreachable for now
            self.failures[index] += 1
            if self.failures[index] > ACTOR_RESTARTS + 1:
                self.dead.add(index)
            raise EngineGone(f"the Ray actor on {self.nodes[index].node} is gone: {type(exc).__name__}") from None
        finally:
            self.nodes[index].busy_s += time.monotonic() - started
        self.failures[index] = 0
        if "error" in answer:
            if answer.get("gave_up"):
                self.dead.add(index)
            if answer.get("unreachable"):
                raise EngineGone(f"the engine on {self.nodes[index].node}: {answer['error']['message']}")
            self.nodes[index].failed += 1
            raise RemoteItemError(answer["error"])
        self.nodes[index].processed += 1
        return answer["result"], answer["usage"]

    def engine_gave_up(self) -> bool:
        return len(self.dead) == len(self.actors)

    def describe(self) -> list[dict[str, Any]]:
        return [stat.to_json() for stat in self.nodes]

    async def close(self) -> None:
        for actor in self.actors:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(actor.stop.remote(), 30)
            with contextlib.suppress(Exception):
                self.ray.kill(actor)
