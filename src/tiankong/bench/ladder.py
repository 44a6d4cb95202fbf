"""``bench ladder``: climb concurrency 1, 2, 4, … against one server, find the knee, recommend a cap.

Every step sends a bounded number of streamed chat completions (``requests_per_level``, at least the
concurrency itself; no new request starts after ``step_time_s``) with exactly ``concurrency`` in flight.
Each request generates ``max_tokens`` tokens (``ignore_eos`` where the server accepts it), temperature 0.
Per step: requests/s and generated tokens/s over the step's wall time, TTFT (send → first streamed
text) and latency (send → last byte) p50/p99, failures.

The knee (see :func:`find_knee` and docs/bench.md): the last concurrency after which throughput grows by
less than ``min_gain`` (10 %) while p99 latency climbs by more than ``p99_climb`` (10 %), or a step fails
requests. The recommended cap is ``max(1, floor(cap_fraction × knee))`` with ``cap_fraction`` 0.7: headroom
below the point where added load only adds waiting.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field

from ..engine.flags import default_threads
from ..errors import ConfigError, TransportError
from .common import RunFacts, ServerInfo, asse_events, check_server, chunk_text, managed_engine, percentile

Progress = Callable[[str], None]
TOPICS = ["a lighthouse keeper", "the first snow", "a lost key", "bread baking", "a night train", "river stones",
          "an old map", "a kite festival", "tea harvest", "a quiet library", "mountain weather", "a paper boat"]


class LadderConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str | None = None
    url: str | None = None
    slots: int = Field(8, ge=1)
    slot_ctx: int = Field(1024, ge=64)
    threads: int | None = Field(None, ge=1)
    levels: list[int] = Field(default_factory=lambda: [1, 2, 4, 8, 16, 32])
    requests_per_level: int | None = Field(None, ge=1)
    max_tokens: int = Field(64, ge=1)
    step_time_s: float = Field(120.0, gt=0)
    min_gain: float = Field(0.10, ge=0)
    p99_climb: float = Field(0.10, ge=0)
    cap_fraction: float = Field(0.7, gt=0, le=1)
    ignore_eos: bool = True
    llama_server: str | None = None
    api_key: str | None = None
    timeout_s: float = Field(600.0, gt=0)


class StepResult(BaseModel):
    concurrency: int
    requests: int
    completed: int
    errors: int = 0
    error_codes: dict[str, int] = Field(default_factory=dict)
    wall_s: float
    completion_tokens: int = 0
    req_per_s: float
    tok_per_s: float
    ttft_p50_s: float
    ttft_p99_s: float
    latency_p50_s: float
    latency_p99_s: float
    stopped_by_time: bool = False


class Knee(BaseModel):
    found: bool
    concurrency: int | None
    recommended: int
    metric: str
    reason: str


class LadderReport(RunFacts):
    kind: str = "ladder"
    model: str
    url: str | None
    server_kind: str
    slots: int | None
    config: LadderConfig
    ignore_eos_used: bool = False
    steps: list[StepResult] = Field(default_factory=list)
    knee: Knee | None = None
    files: list[str] = Field(default_factory=list)


def find_knee(steps: Sequence[StepResult], *, min_gain: float = 0.10, p99_climb: float = 0.10,
              cap_fraction: float = 0.7) -> Knee:
    """The knee of a measured ladder and the recommended concurrency cap (pure: steps in, verdict out).

    Walking up the levels, the knee is the last level before a step that (a) failed requests, or (b) added
    less than ``min_gain`` throughput while its p99 latency grew by more than ``p99_climb``. Throughput is
    tokens/s (requests/s when a server reports no tokens). Without a knee the highest clean level is
    recommended as it is (the server had headroom there: measure higher levels to find its knee).
    """
    ordered = sorted(steps, key=lambda s: s.concurrency)
    if not ordered:
        raise ConfigError("no ladder steps to analyse", hint="measure at least two concurrency levels")
    metric = "tok_per_s" if all(s.tok_per_s > 0 for s in ordered if s.completed) else "req_per_s"
    if ordered[0].errors or not ordered[0].completed:
        return Knee(found=False, concurrency=None, recommended=1, metric=metric,
                    reason=f"requests failed already at concurrency {ordered[0].concurrency}")
    for prev, cur in zip(ordered, ordered[1:], strict=False):
        reason = _bend(prev, cur, metric, min_gain, p99_climb)
        if reason:
            recommended = max(1, math.floor(cap_fraction * prev.concurrency))
            return Knee(found=True, concurrency=prev.concurrency, recommended=recommended, metric=metric,
                        reason=f"{reason}; cap = max(1, floor({cap_fraction:g} × {prev.concurrency}))")
    top = ordered[-1].concurrency
    return Knee(found=False, concurrency=None, recommended=top, metric=metric,
                reason=f"throughput still grew (or p99 held) up to concurrency {top}: measure higher levels")


def _bend(prev: StepResult, cur: StepResult, metric: str, min_gain: float, p99_climb: float) -> str:
    if cur.errors or not cur.completed:
        return f"{cur.errors} of {cur.requests} requests failed at concurrency {cur.concurrency}"
    before, after = getattr(prev, metric), getattr(cur, metric)
    gain = after / before - 1 if before > 0 else math.inf
    climb = cur.latency_p99_s / prev.latency_p99_s - 1 if prev.latency_p99_s > 0 else math.inf
    if gain < min_gain and climb > p99_climb:
        return (f"{metric} {before:.3g} → {after:.3g} ({gain:+.0%}) from concurrency {prev.concurrency} to "
                f"{cur.concurrency} while p99 latency grew {climb:+.0%}")
    return ""


def run_ladder(config: LadderConfig, progress: Progress | None = None) -> LadderReport:
    """Start the engine (``model``) or check the server (``url``), climb the levels, find the knee.

    ``progress`` gets one line per finished step.
    """
    if bool(config.model) == bool(config.url):
        raise ConfigError("pass exactly one of --model and --url", hint="--model NAME starts a managed engine")
    if not config.levels or min(config.levels) < 1:
        raise ConfigError("levels must be positive integers", hint="e.g. --levels 1,2,4,8")
    stamp = datetime.now(UTC).isoformat(timespec="seconds")
    started = time.monotonic()
    if config.url:
        fields = LadderConfig.model_fields
        engine_only = [name for name in ("slots", "slot_ctx", "threads", "llama_server")
                       if name in fields and getattr(config, name) != fields[name].default]
        if engine_only:  # a server at --url runs as it was started: they were taken and ignored (as speed refuses)
            flags = ", ".join("--" + name.replace("_", "-") for name in engine_only)
            raise ConfigError(f"{flags} configure the managed engine, and --url measures a running server",
                              hint="use --model NAME, or drop them to measure the server at --url as it runs")
        info = check_server(config.url, api_key=config.api_key)
        report = _climb(info, config, stamp, progress)
    else:
        assert config.model is not None
        with managed_engine(config.model, ctx=config.slots * config.slot_ctx, slots=config.slots,
                            threads=config.threads or default_threads(), llama_server=config.llama_server) as engine:
            info = ServerInfo(url=engine.url, model_id=engine.config.alias or "", kind="llama.cpp",
                              slots=config.slots, slot_ctx=config.slot_ctx)
            report = _climb(info, config, stamp, progress)
        report.url = None
    report.duration_s = time.monotonic() - started
    return report


def _climb(info: ServerInfo, config: LadderConfig, stamp: str, progress: Progress | None) -> LadderReport:
    steps, body = asyncio.run(_steps(info, config, progress))
    report = LadderReport(model=info.model_id or (config.model or ""), url=info.url, server_kind=info.kind,
                          slots=info.slots, started_at=stamp, config=config, steps=steps,
                          ignore_eos_used="ignore_eos" in body)
    report.knee = find_knee(steps, min_gain=config.min_gain, p99_climb=config.p99_climb,
                            cap_fraction=config.cap_fraction)
    return report


async def _steps(info: ServerInfo, config: LadderConfig,
                 progress: Progress | None) -> tuple[list[StepResult], dict[str, Any]]:
    headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
    top = max(config.levels)
    limits = httpx.Limits(max_connections=top, max_keepalive_connections=top, keepalive_expiry=2.0)
    async with httpx.AsyncClient(base_url=info.url, headers=headers, timeout=config.timeout_s, limits=limits) as http:
        body = await _warm_up(http, info, config)
        steps: list[StepResult] = []
        for level in sorted(set(config.levels)):
            count = max(level, config.requests_per_level or max(8, 2 * level))
            step = await _step(http, body, level, count, config.step_time_s)
            steps.append(step)
            if progress:
                progress(f"concurrency {level}: {step.completed}/{step.requests} ok, {step.tok_per_s:.1f} tok/s, "
                         f"latency p99 {step.latency_p99_s:.2f} s")
            if not step.completed:
                break  # every request failed: climbing higher measures nothing
    return steps, body


async def _warm_up(http: httpx.AsyncClient, info: ServerInfo, config: LadderConfig) -> dict[str, Any]:
    """One uncounted request; drops ``ignore_eos``/``stream_options`` if the server refuses them.

    Returns the request template the steps use.
    """
    body: dict[str, Any] = {"max_tokens": config.max_tokens, "temperature": 0, "seed": 42, "stream": True,
                            "stream_options": {"include_usage": True}}
    if info.model_id:
        body["model"] = info.model_id
    if config.ignore_eos:
        body["ignore_eos"] = True
    result = await _one(http, body, 0)
    for extension in ("ignore_eos", "stream_options"):  # a strict server may refuse either (400/422)
        if isinstance(result, int) and result in (400, 422) and extension in body:
            del body[extension]
            result = await _one(http, body, 0)
    if isinstance(result, int):
        hint = "pass --api-key" if result in (401, 403) else "check that the server serves /v1/chat/completions"
        raise TransportError(f"the warm-up chat completion at {info.url} answered HTTP {result}", hint=hint)
    if isinstance(result, str):
        raise TransportError(f"the warm-up chat completion at {info.url} failed: {result}",
                             hint="check that the server is up and serves /v1/chat/completions")
    return body


async def _one(http: httpx.AsyncClient, template: dict[str, Any], index: int) -> tuple[float, float, int] | int | str:
    """(ttft_s, latency_s, tokens) for a success, the HTTP status for an error answer, a text for a failure."""
    topic = TOPICS[index % len(TOPICS)]
    body = {**template, "messages": [{"role": "user", "content": f"({index}) Write a few sentences about {topic}."}]}
    started = time.perf_counter()
    first: float | None = None
    chunks, usage_tokens = 0, None
    try:
        async with http.stream("POST", "/v1/chat/completions", json=body) as answer:
            if answer.status_code != 200:
                await answer.aread()
                return answer.status_code
            async for event in asse_events(answer.aiter_lines()):
                if chunk_text(event):
                    chunks += 1
                    if first is None:
                        first = time.perf_counter() - started
                usage = event.get("usage")
                if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
                    usage_tokens = usage["completion_tokens"]
    except httpx.HTTPError as exc:
        return f"{type(exc).__name__}: {exc}"
    latency = time.perf_counter() - started
    return (first if first is not None else latency, latency, usage_tokens if usage_tokens is not None else chunks)


async def _step(http: httpx.AsyncClient, template: dict[str, Any], level: int, count: int,
                step_time_s: float) -> StepResult:
    results: list[tuple[float, float, int] | int | str] = []
    indexes = iter(range(count))
    started = time.perf_counter()
    deadline = started + step_time_s

    async def worker() -> None:
        for index in indexes:
            if time.perf_counter() > deadline:
                return
            results.append(await _one(http, template, index))

    await asyncio.gather(*(worker() for _ in range(level)))
    wall = time.perf_counter() - started
    ok = [r for r in results if isinstance(r, tuple)]
    codes: dict[str, int] = {}
    for r in results:
        if not isinstance(r, tuple):
            key = str(r) if isinstance(r, int) else r.split(":", 1)[0]
            codes[key] = codes.get(key, 0) + 1
    tokens = sum(r[2] for r in ok)
    ttft, latency = [r[0] for r in ok], [r[1] for r in ok]
    return StepResult(concurrency=level, requests=len(results), completed=len(ok), errors=len(results) - len(ok),
                      error_codes=codes, wall_s=wall, completion_tokens=tokens, req_per_s=len(ok) / wall,
                      tok_per_s=tokens / wall, ttft_p50_s=percentile(ttft, 0.5), ttft_p99_s=percentile(ttft, 0.99),
                      latency_p50_s=percentile(latency, 0.5), latency_p99_s=percentile(latency, 0.99),
                      stopped_by_time=len(results) < count)
