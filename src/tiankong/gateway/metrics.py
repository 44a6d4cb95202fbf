"""Prometheus metrics for the gateway (``GET /metrics``), in a registry of the app's own.

Request metrics are recorded when a request ends (:meth:`GatewayMetrics.finish` with its :class:`RequestRecord`);
engine gauges (queue depth, in flight, busy slots, RSS, restarts) are read at scrape time from the engine
handles, busy slots from llama-server's ``/slots`` with a short timeout.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import httpx
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ..engine.pool import ProcessState, spec_from_timings
from .admission import Lane
from .stats import LiveStats

LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
WAIT_BUCKETS = (0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
RATE_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 5000.0)


@dataclass
class RequestRecord:
    """One gateway request as the metrics see it."""

    route: str
    model: str = "-"
    engine: str = ""
    stream: bool = False
    started: float = field(default_factory=time.perf_counter)
    queue_wait_s: float | None = None
    ttft_s: float | None = None
    usage: dict[str, Any] | None = None
    timings: dict[str, Any] | None = None
    attempts: int | None = None
    schema_failed: bool = False
    retried: bool = False
    rejected: str | None = None
    degraded: str | None = None  # what degradation did to it: truncated | rejected | fallback
    key: str = ""  # the API key's name ("" without keys)
    group: tuple[tuple[int, float], ...] = ()  # the LoRA adapters applied (id, scale); () = the base model
    batch: bool = False  # a line of a Batch API batch (second in line for a slot; kept out of the latency stats)
    draft: bool = False  # asked for a draft first (``"tiankong": {"draft": true}``, cascade.py)

    def first_token(self) -> None:
        if self.ttft_s is None:
            self.ttft_s = time.perf_counter() - self.started

    def note_answer(self, data: Any) -> None:
        """Usage, timings and structured-output attempts from an OpenAI-style answer (or a task result)."""
        if not isinstance(data, dict):
            return
        if isinstance(data.get("usage"), dict):
            self.usage = data["usage"]
        if isinstance(data.get("timings"), dict):
            self.timings = data["timings"]
        extension = data["tiankong"] if isinstance(data.get("tiankong"), dict) else data
        attempts = extension.get("attempts", data.get("attempts"))  # a task answer's own (extract's)
        if isinstance(attempts, int):
            self.attempts = attempts


class GatewayMetrics:
    """Every metric the gateway exports; one instance per app."""

    def __init__(self, engines: Callable[[], list[Lane]]) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("tiankong_requests", "Requests by route, model and HTTP status (499: client gone)",
                                ["route", "model", "status"], registry=r)
        self.latency = Histogram("tiankong_request_duration_seconds", "End-to-end latency, queue wait included",
                                 ["route"], buckets=LATENCY_BUCKETS, registry=r)
        self.ttft = Histogram("tiankong_time_to_first_token_seconds", "Time to the first content token, queue "
                              "wait included (non-streaming: queue wait + llama-server timings.prompt_ms)",
                              ["route"], buckets=LATENCY_BUCKETS, registry=r)
        self.queue_wait = Histogram("tiankong_queue_wait_seconds", "Time spent waiting for an engine slot",
                                    ["engine"], buckets=WAIT_BUCKETS, registry=r)
        self.gen_rate = Histogram("tiankong_generation_tokens_per_second", "Decode speed per request "
                                  "(llama-server timings.predicted_per_second)", ["model"], buckets=RATE_BUCKETS,
                                  registry=r)
        self.prompt_rate = Histogram("tiankong_prompt_tokens_per_second", "Prompt processing speed per request "
                                     "(llama-server timings.prompt_per_second)", ["model"], buckets=RATE_BUCKETS,
                                     registry=r)
        self.prompt_tokens = Counter("tiankong_prompt_tokens", "Prompt tokens (from usage)", ["model"], registry=r)
        self.completion_tokens = Counter("tiankong_completion_tokens", "Completion tokens (from usage)", ["model"],
                                         registry=r)
        self.spec_drafted = Counter("tiankong_spec_draft_tokens", "Speculative decoding: tokens drafted "
                                    "(llama-server timings.draft_n)", ["model"], registry=r)
        self.spec_accepted = Counter("tiankong_spec_accepted_tokens", "Speculative decoding: drafted tokens accepted "
                                     "(timings.draft_n_accepted); acceptance = accepted / draft", ["model"], registry=r)
        self.rejections = Counter("tiankong_rejections", "Requests refused with 429", ["route", "reason"], registry=r)
        self.auth_failures = Counter("tiankong_auth_failures", "Requests with a missing or wrong API key (401), and "
                                     "those refused because their address failed too often (429)", ["outcome"],
                                     registry=r)
        self.key_requests = Counter("tiankong_key_requests", "Requests by API key name and HTTP status",
                                    ["key", "status"], registry=r)
        self.schema_retries = Counter("tiankong_schema_retries", "Structured-output attempts beyond the first",
                                      ["route"], registry=r)
        self.schema_failures = Counter("tiankong_schema_failures", "Structured-output requests that ended without "
                                       "a valid answer", ["route"], registry=r)
        self.engine_retries = Counter("tiankong_engine_retries", "Requests sent again after the engine failed "
                                      "under them", ["route"], registry=r)
        self.disconnects = Counter("tiankong_client_disconnects", "Requests whose client went away (upstream "
                                   "cancelled)", ["route"], registry=r)
        self.degradation_level = Gauge("tiankong_degradation_level", "Current degradation level (0: normal, "
                                       "1: prompt cap, 2: + lower concurrency, 3: + fallback)", registry=r)
        self.degradation_actions = Counter("tiankong_degradation_actions", "Requests changed by degradation",
                                           ["action"], registry=r)
        self.engine_transitions = Counter("tiankong_engine_transitions", "Engine state changes (the engine "
                                          "pool's events), by engine and the state entered", ["engine", "state"],
                                          registry=r)
        self.batch_requests = Counter("tiankong_batch_requests", "Batch API request lines run, by route and HTTP "
                                      "status (kept out of the interactive latency metrics)", ["route", "status"],
                                      registry=r)
        self.engines = EngineCollector(engines)
        r.register(self.engines)
        self.live = LiveStats()

    def finish(self, call: RequestRecord, status: int) -> None:
        if call.batch:
            self.batch_requests.labels(call.route, str(status)).inc()
            self._structured(call)
            if status == 200 or call.schema_failed:  # as below
                self._answer(call)
            return
        latency = time.perf_counter() - call.started
        self.requests.labels(call.route, call.model, str(status)).inc()
        self.latency.labels(call.route).observe(latency)
        self.live.record(status, latency_s=latency, ttft_s=call_ttft(call) if status == 200 else None,
                         tokens=call_tokens(call) if status == 200 or call.schema_failed else 0)
        if status == 499:
            self.disconnects.labels(call.route).inc()
        if call.rejected:
            self.rejections.labels(call.route, call.rejected).inc()
        if call.degraded:
            self.degradation_actions.labels(call.degraded).inc()
        if call.key:
            self.key_requests.labels(call.key, str(status)).inc()
        if call.queue_wait_s is not None:
            self.queue_wait.labels(call.engine).observe(call.queue_wait_s)
        if call.retried:
            self.engine_retries.labels(call.route).inc()
        self._structured(call)
        if status == 200 or call.schema_failed:  # a failed structured answer decoded its tokens too
            self._answer(call)

    def _structured(self, call: RequestRecord) -> None:
        if call.attempts is not None and call.attempts > 1:
            self.schema_retries.labels(call.route).inc(call.attempts - 1)
        if call.schema_failed:
            self.schema_failures.labels(call.route).inc()

    def _answer(self, call: RequestRecord) -> None:
        timings = call.timings or {}
        ttft = call_ttft(call)
        if ttft is not None:
            self.ttft.labels(call.route).observe(ttft)
        # usage, else llama-server's timings (a stream without stream_options.include_usage has no usage: its
        # tokens went uncounted here while the dashboard counted them)
        prompt = _count(call.usage, "prompt_tokens") or _count(timings, "prompt_n") + _count(timings, "cache_n")
        for counter, tokens in ((self.prompt_tokens, prompt), (self.completion_tokens, call_tokens(call))):
            if tokens:
                counter.labels(call.model).inc(tokens)
        for histogram, key, count in ((self.gen_rate, "predicted_per_second", "predicted_n"),
                                      (self.prompt_rate, "prompt_per_second", "prompt_n")):
            rate = timings.get(key)
            if isinstance(rate, int | float) and rate > 0 and (timings.get(count) or 0) > 1:
                histogram.labels(call.model).observe(float(rate))
        spec = spec_from_timings(timings)
        if spec.drafted > 0:
            self.spec_drafted.labels(call.model).inc(spec.drafted)
            self.spec_accepted.labels(call.model).inc(spec.accepted)

    async def scrape(self, http: httpx.AsyncClient) -> bytes:
        await self.engines.refresh_slots(http)
        return generate_latest(self.registry)


def call_ttft(call: RequestRecord) -> float | None:
    """Streaming: the observed first token; otherwise queue wait + llama-server's ``timings.prompt_ms``."""
    timings = call.timings or {}
    if call.ttft_s is None and not call.stream and isinstance(timings.get("prompt_ms"), int | float):
        return (call.queue_wait_s or 0.0) + float(timings["prompt_ms"]) / 1000.0
    return call.ttft_s


def call_tokens(call: RequestRecord) -> int:
    """Completion tokens from ``usage``, else from llama-server's ``timings.predicted_n``."""
    return _count(call.usage, "completion_tokens") or _count(call.timings, "predicted_n")


def _count(source: dict[str, Any] | None, key: str) -> int:
    value = (source or {}).get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


class EngineCollector(Collector):
    """Engine gauges read at scrape time."""

    def __init__(self, engines: Callable[[], list[Lane]]) -> None:
        self.handles = engines
        self.busy: dict[str, tuple[int, int]] = {}  # engine name → (busy, total) from the last /slots probe

    async def refresh_slots(self, http: httpx.AsyncClient, timeout_s: float = 1.0) -> None:
        for handle in self.handles():
            self.busy.pop(handle.name, None)
            if not handle.replica.ready():
                continue
            with contextlib.suppress(httpx.HTTPError, ValueError, TypeError, AttributeError):
                replica = handle.replica
                answer = await http.get(replica.url() + "/slots", timeout=timeout_s, headers=replica.auth_headers())
                if answer.status_code == 200:
                    slots = answer.json()
                    self.busy[handle.name] = (sum(1 for s in slots if s.get("is_processing")), len(slots))

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterable[Metric]:
        families = {
            "queue": GaugeMetricFamily("tiankong_queue_depth", "Requests waiting for an engine slot",
                                       labels=["engine"]),
            "capacity": GaugeMetricFamily("tiankong_queue_capacity", "Waiting-queue bound (429 beyond it)",
                                          labels=["engine"]),
            "in_flight": GaugeMetricFamily("tiankong_in_flight", "Requests (and tasks' extra engine calls) being "
                                           "served by the engine", labels=["engine"]),
            "limit": GaugeMetricFamily("tiankong_in_flight_limit", "Requests sent to the engine at once",
                                       labels=["engine"]),
            "batch_in_flight": GaugeMetricFamily("tiankong_batch_in_flight", "Batch API lines being served by the "
                                                 "engine (part of tiankong_in_flight)", labels=["engine"]),
            "extra": GaugeMetricFamily("tiankong_task_extra_in_flight", "Slots held by task requests' side-by-side "
                                       "engine calls beyond their first (part of tiankong_in_flight)",
                                       labels=["engine"]),
            "batch_queue": GaugeMetricFamily("tiankong_batch_queue_depth", "Batch API lines waiting for a slot "
                                             "nobody interactive wants", labels=["engine"]),
            "up": GaugeMetricFamily("tiankong_engine_up", "1 when the engine is ready", labels=["engine", "state"]),
            "busy": GaugeMetricFamily("tiankong_engine_busy_slots", "llama-server slots processing (from /slots)",
                                      labels=["engine"]),
            "slots": GaugeMetricFamily("tiankong_engine_slots", "llama-server slots (from /slots)", labels=["engine"]),
            "rss": GaugeMetricFamily("tiankong_engine_rss_bytes", "Resident memory of the engine process",
                                     labels=["engine"]),
        }
        restarts = CounterMetricFamily("tiankong_engine_restarts", "Engine restarts (crash, wedge, recycle)",
                                       labels=["engine"])
        preemptions = CounterMetricFamily("tiankong_batch_preemptions", "Times a Batch API line stepped aside for "
                                          "an interactive request (it went on later)", labels=["engine"])
        for handle in self.handles():
            self._one(handle, families, restarts)
            preemptions.add_metric([handle.name], handle.admission.preemptions)
        yield from families.values()
        yield restarts
        yield preemptions

    def _one(self, handle: Lane, families: dict[str, GaugeMetricFamily],
             restarts: CounterMetricFamily) -> None:
        name, admission = [handle.name], handle.admission
        families["queue"].add_metric(name, admission.waiting)
        families["capacity"].add_metric(name, admission.queue_size)
        families["in_flight"].add_metric(name, admission.in_flight)
        families["limit"].add_metric(name, admission.limit)
        families["batch_in_flight"].add_metric(name, admission.batch_in_flight)
        families["batch_queue"].add_metric(name, admission.batch_waiting)
        families["extra"].add_metric(name, admission.extra_in_flight)
        state = handle.replica.state()
        families["up"].add_metric([handle.name, state.value], 1.0 if state is ProcessState.READY else 0.0)
        if handle.name in self.busy:
            busy, total = self.busy[handle.name]
            families["busy"].add_metric(name, busy)
            families["slots"].add_metric(name, total)
        rss = process_rss_bytes(handle.replica.pid())
        if rss is not None:
            families["rss"].add_metric(name, rss)
        restarts.add_metric(name, handle.replica.restarts())


def process_rss_bytes(pid: int | None) -> int | None:
    """VmRSS of a process from ``/proc/<pid>/status`` (Linux), or None."""
    if not pid:
        return None
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
