"""What both benchmarks share: the server check, a managed engine, percentiles, streaming reads.

A benchmark talks to either a managed engine (``--model``: tiankong starts llama-server with pinned
threads, context and slots, and stops it afterwards) or any running server (``--url``). A URL is checked
first (``GET /v1/models`` must answer 200 with an OpenAI ``{"data": [...]}`` list), so a typo or a web page
gives one clear error instead of a ladder full of failed requests.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
from pydantic import BaseModel, Field

from ..client._shared import base_url
from ..engine.build import locate_engine
from ..engine.launcher import NO_RESTARTS, launch
from ..engine.process import EngineProcess
from ..engine.settings import engine_config, engine_keys
from ..errors import ConfigError, TransportError
from ..models import resolve_installed


class RunFacts(BaseModel):
    """What every bench report records about its run: when, how long, and how busy the machine was."""

    started_at: str
    duration_s: float = 0.0
    cpu_count: int = Field(default_factory=lambda: os.cpu_count() or 1)
    load_avg_1m: float = Field(default_factory=lambda: os.getloadavg()[0])


class SpeedRow(BaseModel):
    """One row of ``tiankong bench speed`` (llama-server or llama-bench; here so both modules share it)."""

    source: str  # "llama-server" or "llama-bench"
    threads: int | None
    ctx: int | None
    prompt_tokens: int
    gen_tokens: int
    runs: int
    pp_tok_s: float | None = None
    pp_tok_s_min: float | None = None
    pp_tok_s_max: float | None = None
    tg_tok_s: float | None = None
    tg_tok_s_min: float | None = None
    tg_tok_s_max: float | None = None
    ttft_s: float | None = None
    ttft_min_s: float | None = None
    ttft_max_s: float | None = None


@dataclass
class ServerInfo:
    """A checked OpenAI-compatible server."""

    url: str
    model_id: str
    kind: str  # "llama.cpp" (answers /props), else "openai"
    slots: int | None = None
    slot_ctx: int | None = None  # context per slot (llama.cpp /props n_ctx)


def check_server(url: str, *, api_key: str | None = None, timeout_s: float = 10.0) -> ServerInfo:
    """Make sure ``url`` is an OpenAI-compatible server; raise a one-line error naming the fix if not."""
    root = base_url(url)
    if not root or not root.startswith(("http://", "https://")):
        raise ConfigError(f"{url!r} is not an http(s) URL", hint="pass the server root, e.g. http://127.0.0.1:8080")
    headers = _headers(api_key)
    try:
        answer = httpx.get(f"{root}/v1/models", headers=headers, timeout=timeout_s)
    except httpx.HTTPError as exc:
        raise TransportError(f"cannot reach {root}: {type(exc).__name__}",
                             hint="start the server or check the host and port") from None
    model_id = _model_id(answer, root)
    info = ServerInfo(url=root, model_id=model_id, kind="openai")
    with contextlib.suppress(httpx.HTTPError, ValueError):
        props = httpx.get(f"{root}/props", headers=headers, timeout=timeout_s)
        data = props.json() if props.status_code == 200 else None
        if isinstance(data, dict) and "total_slots" in data:
            info.kind = "llama.cpp"
            info.slots = int(data["total_slots"])
            settings = data.get("default_generation_settings") or {}
            info.slot_ctx = int(settings["n_ctx"]) if isinstance(settings.get("n_ctx"), int) else None
    return info


def _model_id(answer: httpx.Response, root: str) -> str:
    kind = answer.headers.get("content-type", "?").split(";")[0]
    fix = "point --url at the root of an OpenAI-compatible server (llama-server, `tiankong serve`)"
    if answer.status_code in (401, 403):
        raise ConfigError(f"{root} refused GET /v1/models with HTTP {answer.status_code}", hint="pass --api-key")
    if answer.status_code != 200:
        raise ConfigError(f"{root} is not an OpenAI-compatible server: GET /v1/models answered HTTP "
                          f"{answer.status_code} ({kind})", hint=fix)
    try:
        data = answer.json()
    except ValueError:
        data = None
    models = data.get("data") if isinstance(data, dict) else None
    if not isinstance(models, list):
        raise ConfigError(f"{root} is not an OpenAI-compatible server: GET /v1/models did not answer a JSON "
                          f"model list ({kind})", hint=fix)
    ids = [m.get("id") for m in models if isinstance(m, dict) and isinstance(m.get("id"), str)]
    return str(ids[0]) if ids else ""


def _headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


@contextlib.contextmanager
def managed_engine(model: str, *, ctx: int, slots: int, threads: int,
                   llama_server: str | None = None) -> Iterator[EngineProcess]:
    """Start an installed model on llama-server (pinned ctx/slots/threads) and always stop it."""
    record = resolve_installed(model)
    if ctx % slots:
        raise ConfigError(f"ctx {ctx} is not divisible by slots {slots}", hint="pick ctx = slots × per-slot ctx")
    config = engine_config(engine_keys(ctx=ctx, slots=slots, threads=threads), record.path, alias=record.name)
    engine = launch(config, locate_engine(llama_server), policy=NO_RESTARTS, start=False)
    try:
        engine.start()
        yield engine
    finally:
        engine.stop()


def parse_ints(text: str | Sequence[int], name: str) -> list[int]:
    """``"1,2,4"`` → ``[1, 2, 4]``: positive, unique, sorted; a clear error otherwise."""
    raw = text.split(",") if isinstance(text, str) else [str(x) for x in text]
    try:
        values = sorted({int(part.strip()) for part in raw if part.strip()})
    except ValueError:
        raise ConfigError(f"{name} must be comma-separated integers, not {text!r}", hint="e.g. 1,2,4") from None
    if not values or values[0] < 1:
        raise ConfigError(f"{name} must be positive integers, not {text!r}", hint="e.g. 1,2,4")
    return values


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..1); NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q * len(ordered)))
    return float(ordered[min(len(ordered), rank) - 1])


def median(values: Sequence[float]) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    mid = len(ordered) // 2
    return float(ordered[mid]) if len(ordered) % 2 else float((ordered[mid - 1] + ordered[mid]) / 2)


def sse_events(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    """JSON objects from ``data:`` lines of a server-sent event stream (``[DONE]`` ends it)."""
    for line in lines:
        event = _event(line)
        if event is _DONE:
            return
        if isinstance(event, dict):
            yield event


async def asse_events(lines: AsyncIterator[str]) -> AsyncIterator[dict[str, Any]]:
    async for line in lines:
        event = _event(line)
        if event is _DONE:
            return
        if isinstance(event, dict):
            yield event


_DONE = object()


def _event(line: str) -> object:
    if not line.startswith("data:"):
        return None
    payload = line[5:].strip()
    if payload == "[DONE]":
        return _DONE
    try:
        return json.loads(payload)
    except ValueError:
        return None


def chunk_text(event: dict[str, Any]) -> str:
    """The generated text of one streamed chunk (chat ``delta`` or completion ``text``)."""
    choices = event.get("choices") or []
    if not choices or not isinstance(choices[0], dict):
        return ""
    choice = choices[0]
    delta = choice.get("delta")
    if isinstance(delta, dict):
        return str(delta.get("content") or delta.get("reasoning_content") or "")
    return str(choice.get("text") or "")
