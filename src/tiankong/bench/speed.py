"""``bench speed``: prompt-processing and generation tokens/s and time to first token, through llama-server.

For every (threads, ctx) a managed engine is started (1 slot, the given ``-t`` and ``-c``); with ``url`` the
running server is used as it is. Each request is a streamed ``/v1/completions`` call whose prompt is a list
of exactly ``prompt_tokens`` token ids (a tokenised filler text, shifted by the repeat number so no two
prompts are equal), ``cache_prompt: false``, ``ignore_eos`` and ``max_tokens = gen_tokens``, temperature 0.
The numbers come from llama-server's own ``timings`` (``prompt_per_second``, ``predicted_per_second``) and
the client's clock for TTFT (request sent → first streamed text). Each cell reports the median (and the
range) of ``repeats`` runs; repeats are interleaved across prompt lengths so machine noise hits all alike.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field

from ..engine.flags import default_threads
from ..errors import ConfigError, ServerError, TransportError
from .common import RunFacts, ServerInfo, check_server, chunk_text, managed_engine, median, sse_events
from .common import SpeedRow as SpeedRow

FILLER = ("The river runs past the old mill, where the miller counts sacks of grain each morning. "
          "Children walk to school along the bank, and the baker sells bread at the bridge. ")


class SpeedConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str | None = None
    url: str | None = None
    prompt_lengths: list[int] = Field(default_factory=lambda: [128, 512])
    threads: list[int] | None = None
    ctx: list[int] | None = None
    repeats: int = Field(3, ge=1)
    gen_tokens: int = Field(32, ge=1)
    llama_bench: bool = False
    llama_server: str | None = None
    api_key: str | None = None
    timeout_s: float = Field(600.0, gt=0)


class SpeedReport(RunFacts):
    kind: str = "speed"
    model: str
    url: str | None
    config: SpeedConfig
    rows: list[SpeedRow] = Field(default_factory=list)
    files: list[str] = Field(default_factory=list)


def run_speed(config: SpeedConfig, progress: Callable[[str], None] | None = None) -> SpeedReport:
    """Measure; rows come by source, threads, ctx and prompt length. ``progress`` gets a line per row."""
    _validate(config)
    started = time.monotonic()
    stamp = datetime.now(UTC).isoformat(timespec="seconds")
    if config.url:
        if config.threads or config.ctx or config.llama_bench:
            raise ConfigError("--threads, --ctx and --llama-bench need a managed engine",
                              hint="use --model NAME, or drop them to measure the server at --url as it runs")
        info = check_server(config.url, api_key=config.api_key)
        if info.slot_ctx:
            _validate(config.model_copy(update={"ctx": [info.slot_ctx]}))
        report = SpeedReport(model=info.model_id, url=info.url, started_at=stamp, config=config)
        report.rows = _measure(info, config, None, info.slot_ctx, progress)
    else:
        assert config.model is not None
        report = SpeedReport(model=config.model, url=None, started_at=stamp, config=config)
        report.rows = _managed(config, progress)
    report.duration_s = time.monotonic() - started
    return report


def _validate(config: SpeedConfig) -> None:
    if bool(config.model) == bool(config.url):
        raise ConfigError("pass exactly one of --model and --url", hint="--model NAME starts a managed engine")
    if not config.prompt_lengths or min(config.prompt_lengths) < 1:
        raise ConfigError("prompt lengths must be positive integers", hint="e.g. --prompt-lengths 128,512")
    for ctx in config.ctx or []:
        need = max(config.prompt_lengths) + config.gen_tokens
        if need > ctx:
            raise ConfigError(f"prompt length {max(config.prompt_lengths)} + {config.gen_tokens} generated tokens "
                              f"does not fit ctx {ctx} (per slot)",
                              hint="raise --ctx or use shorter --prompt-lengths")


def _managed(config: SpeedConfig, progress: Callable[[str], None] | None) -> list[SpeedRow]:
    from .llamabench import llama_bench_rows

    assert config.model is not None
    threads_list = config.threads or [default_threads()]
    ctx_list = config.ctx or [max(2048, max(config.prompt_lengths) + config.gen_tokens)]
    rows: list[SpeedRow] = []
    for threads in threads_list:
        for ctx in ctx_list:
            with managed_engine(config.model, ctx=ctx, slots=1, threads=threads,
                                llama_server=config.llama_server) as engine:
                info = ServerInfo(url=engine.url, model_id=engine.config.alias or "", kind="llama.cpp", slots=1,
                                  slot_ctx=ctx)
                rows += _measure(info, config, threads, ctx, progress)
    if config.llama_bench:
        rows += llama_bench_rows(config.model, config.prompt_lengths, config.gen_tokens, threads_list,
                                 config.repeats, config.llama_server)
    return rows


def _measure(info: ServerInfo, config: SpeedConfig, threads: int | None, ctx: int | None,
             progress: Callable[[str], None] | None = None) -> list[SpeedRow]:
    headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
    lengths = sorted(set(config.prompt_lengths))
    with httpx.Client(base_url=info.url, headers=headers, timeout=config.timeout_s) as http:
        tokens = _filler_tokens(http, max(lengths) + config.repeats)
        _request(http, info, tokens[:min(16, len(tokens))], 2)  # warm-up: page cache, first allocation
        samples: dict[int, list[dict[str, float]]] = {length: [] for length in lengths}
        for repeat in range(config.repeats):
            for length in lengths:
                samples[length].append(_request(http, info, tokens[repeat:repeat + length], config.gen_tokens))
    rows = [_row(threads, ctx, length, config.gen_tokens, samples[length]) for length in lengths]
    for row in rows:
        if progress is not None:
            progress(f"threads {threads or '-'}, ctx {ctx or '-'}, prompt {row.prompt_tokens}: {row.pp_tok_s:.1f} "
                     f"prompt tok/s, {row.tg_tok_s:.1f} gen tok/s, TTFT {(row.ttft_s or 0) * 1000:.0f} ms")
    return rows


def _filler_tokens(http: httpx.Client, count: int) -> list[int]:
    try:
        answer = http.post("/tokenize", json={"content": FILLER})
        tokens = answer.json().get("tokens") if answer.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        tokens = None
    if not isinstance(tokens, list) or not tokens:
        raise ConfigError(f"{http.base_url} has no llama.cpp /tokenize endpoint",
                          hint="bench speed needs llama-server itself: pass its URL, or use --model NAME")
    return (tokens * (count // len(tokens) + 1))[:count]


def _request(http: httpx.Client, info: ServerInfo, prompt: list[int], gen_tokens: int) -> dict[str, float]:
    body: dict[str, Any] = {"prompt": prompt, "max_tokens": gen_tokens, "stream": True, "ignore_eos": True,
                            "temperature": 0, "seed": 42, "cache_prompt": False,
                            "stream_options": {"include_usage": True}}
    if info.model_id:
        body["model"] = info.model_id
    started = time.perf_counter()
    first: float | None = None
    timings: dict[str, Any] = {}
    try:
        with http.stream("POST", "/v1/completions", json=body) as answer:
            if answer.status_code != 200:
                raise ServerError(answer.status_code, answer.read().decode("utf-8", "replace")[:200])
            for event in sse_events(answer.iter_lines()):
                if first is None and chunk_text(event):
                    first = time.perf_counter() - started
                if isinstance(event.get("timings"), dict):
                    timings = event["timings"]
    except httpx.HTTPError as exc:
        raise TransportError(f"request to {info.url} failed: {type(exc).__name__}: {exc}") from None
    if "prompt_per_second" not in timings or "predicted_per_second" not in timings:
        raise ConfigError(f"{info.url} does not report llama-server timings",
                          hint="bench speed needs llama-server itself: pass its URL, or use --model NAME")
    return {"pp": float(timings["prompt_per_second"]), "tg": float(timings["predicted_per_second"]),
            "ttft": first if first is not None else time.perf_counter() - started}


def _row(threads: int | None, ctx: int | None, length: int, gen: int, samples: list[dict[str, float]]) -> SpeedRow:
    def stats(key: str) -> tuple[float, float, float]:
        values = [s[key] for s in samples]
        return median(values), min(values), max(values)

    pp, tg, ttft = stats("pp"), stats("tg"), stats("ttft")
    return SpeedRow(source="llama-server", threads=threads, ctx=ctx, prompt_tokens=length, gen_tokens=gen,
                    runs=len(samples), pp_tok_s=pp[0], pp_tok_s_min=pp[1], pp_tok_s_max=pp[2], tg_tok_s=tg[0],
                    tg_tok_s_min=tg[1], tg_tok_s_max=tg[2], ttft_s=ttft[0], ttft_min_s=ttft[1], ttft_max_s=ttft[2])
