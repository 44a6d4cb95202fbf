"""Pure helpers shared by ``Client`` and ``AsyncClient``: request bodies, response parsing, errors.

No I/O here: both clients build the same bodies and parse the same answers, so they cannot drift.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, TransportError
from ..lora.selection import LoadedAdapter, adapter_table, prepare, requested
from .images import InvalidMessages, validate_messages

if TYPE_CHECKING:
    import httpx

DEFAULT_SEED = 42
#: how the caller asks for a managed engine, in its own words (the CLI, a process of its own, says ``--model``)
MANAGE_HINT = "pass model= to manage an engine"
Message = dict[str, Any]
#: llama-server (cpp-httplib) closes idle keep-alive connections after 5 s; expire ours sooner so a
#: request is never written into a connection the server is closing.
KEEPALIVE_EXPIRY_S = 2.0


def http_limits(max_connections: int = 64) -> httpx.Limits:
    import httpx

    return httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections,
                        keepalive_expiry=KEEPALIVE_EXPIRY_S)


#: statuses a server answers when it is busy or starting: retried after its ``Retry-After`` (429 without one:
#: after a growing backoff), at most ``RETRIES`` times and ``RETRY_BUDGET_S`` of waiting per request
RETRY_STATUSES = (429, 503)
RETRIES = 8
RETRY_BUDGET_S = 180.0
#: slots assumed when a server does not say (``/props`` missing or refused)
DEFAULT_SLOTS = 2


def retry_delay(status: int, retry_after: str | None, attempt: int, waited_s: float,
                budget_s: float = RETRY_BUDGET_S) -> float | None:
    """Seconds to wait before sending a refused request again, or ``None``: not a busy answer, retries or the
    waiting budget spent. ``Retry-After`` (seconds) is honoured with a little jitter, so clients told the same
    number do not come back at the same instant; a 503 without it is not retried (the server is down, not busy)."""
    if status not in RETRY_STATUSES or attempt >= RETRIES:
        return None
    try:
        delay = float(retry_after) if retry_after is not None else None
    except ValueError:
        delay = None
    if delay is None:
        if status != 429:
            return None
        delay = min(2.0 ** attempt, 30.0)
    delay = max(0.05, delay) * (1.0 + 0.2 * random.random())
    return delay if waited_s + delay <= budget_s else None


@dataclass(frozen=True)
class ServerInfo:
    """What a client learnt about its server once: a tiankong gateway (tasks go as one ``/v1/tasks/<task>``
    call) or an engine, and its slots (the most requests of this client in flight at once)."""

    gateway: bool
    slots: int


def server_info(health_status: int, health: Any, props: Any) -> ServerInfo:
    """The ``ServerInfo`` from ``GET /health`` (a tiankong gateway answers with its engine state and its pool,
    even while unavailable; llama-server with ``{"status": …}`` or an error) and ``GET /props``
    (``total_slots``; ``None`` when refused)."""
    gateway = health_status in (200, 503) and isinstance(health, dict) and "pool" in health and "engine" in health
    slots = props.get("total_slots") if isinstance(props, dict) else None
    return ServerInfo(gateway, slots if isinstance(slots, int) and slots > 0 else DEFAULT_SLOTS)


def is_stale_connection(exc: Exception) -> bool:
    """A reused connection closed by the server before any answer: safe to send again once."""
    import httpx

    return isinstance(exc, httpx.RemoteProtocolError) and "without sending" in str(exc)


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.prompt_tokens + other.prompt_tokens, self.completion_tokens + other.completion_tokens)


@dataclass
class ChatResult:
    """One generated answer (chat or text completion)."""

    text: str
    finish_reason: str | None
    usage: Usage
    timings: dict[str, Any] = field(default_factory=dict)
    logprobs: list[dict[str, Any]] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def truncated(self) -> bool:
        return self.finish_reason == "length"


@dataclass
class StreamChunk:
    text: str
    finish_reason: str | None = None
    raw: dict[str, Any] = field(default_factory=dict)
    #: draft then replace (``stream_chat(..., draft=True)``): "draft" for the draft model's chunks, "replace" for
    #: the one chunk that ends the draft (the quality model's chunks follow, phase ""), "final" when the draft stood
    #: as the answer (the quality model failed: ``raw["tiankong"]["warning"]``)
    phase: str = ""


def base_url(url: str | None) -> str | None:
    """The explicit URL, else ``TIANKONG_URL``, normalised without a trailing slash or ``/v1``; one that is not
    an http(s) URL with a host (``localhost:8080``, a port past 65535) is a ``ConfigError`` here, not a transport
    error at the first call."""
    import httpx

    value = url or os.environ.get("TIANKONG_URL")
    if not value:
        return None
    where = "url" if url else "TIANKONG_URL"
    if not isinstance(value, str):
        raise ConfigError(f"{where} must be a string such as http://127.0.0.1:8080, got {type(value).__name__}",
                          param="url")
    value = value.rstrip("/")
    try:
        parsed = httpx.URL(value)
    except (httpx.InvalidURL, ValueError) as exc:
        raise ConfigError(f"{where} {value!r} is not a URL ({exc})", hint="e.g. http://127.0.0.1:8080",
                          param="url") from None
    port_ok = parsed.port is None or 0 < parsed.port < 65536  # port 0 too: `parsed.port or 80` let it pass
    if parsed.scheme not in ("http", "https") or not parsed.host or not port_ok:
        raise ConfigError(f"{where} {value!r} is not an http(s) URL with a host and a port up to 65535",
                          hint="e.g. http://127.0.0.1:8080",
                          param="url")
    return value[:-3] if value.endswith("/v1") else value


#: a client's engine arguments and their defaults (what an embedded engine starts with)
ENGINE_ARGS: dict[str, Any] = {"ctx": 4096, "slots": 2, "llama_server": None, "adapters": None, "embeddings": False}


def check_engine_args(url: str, **args: Any) -> None:
    """A client that talks to a server (``url``) starts no engine: an engine argument given to it (``slots=8``,
    ``embeddings=True``, ``llama_server=…``) was taken and ignored without a word (only ``adapters`` was refused)."""
    ignored = [name for name, value in args.items() if value not in (ENGINE_ARGS[name], [], ())]
    if ignored:
        raise ConfigError(f"{', '.join(f'{name}=' for name in ignored)} configure(s) an engine this client starts "
                          f"(model=… without url), and it talks to the server at {url}",
                          hint="leave them out, or start that server with them (engine config)", param=ignored[0])


def check_max_connections(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:  # 0 blocked every call for timeout_s
        raise ConfigError(f"max_connections must be a positive integer, got {value!r}", param="max_connections")
    return value


def check_client_args(model: Any, api_key: Any, timeout_s: Any, adapters: Any) -> None:
    """What a client's constructor takes, checked before it starts an engine (a bad one left it running)."""
    if model is not None and not isinstance(model, str):
        raise ConfigError(f"model must be a model name (a string), got {type(model).__name__}", param="model")
    if api_key is not None and (not isinstance(api_key, str) or not api_key.isascii() or not api_key.isprintable()):
        raise ConfigError("api_key must be printable ASCII (an HTTP header carries it)", param="api_key")
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not 0 < timeout_s < float("inf"):
        raise ConfigError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}", param="timeout_s")
    if adapters is not None and (not isinstance(adapters, (list, tuple)) or
                                 not all(isinstance(a, str) for a in adapters)):
        raise ConfigError("adapters must be a list of adapter names, e.g. adapters=['formal']", param="adapters")


def build_request(http: httpx.Client | httpx.AsyncClient, method: str, path: str,
                  body: dict[str, Any] | None) -> httpx.Request:
    """The request, or one ``ConfigError`` when the text holds what UTF-8 cannot carry (a lone surrogate such as
    ``"\\ud800"``, left by a bad decode): httpx's ``UnicodeEncodeError`` was a traceback from every method."""
    try:
        return http.build_request(method, path, json=body)
    except UnicodeEncodeError as exc:
        found = exc.object[exc.start:exc.end]
        raise ConfigError(f"the text holds {found!r}, which is not valid Unicode (a lone surrogate) and cannot be "
                          "sent", hint="read the input with errors='replace', or clean it: "
                          "text.encode('utf-8', 'replace').decode('utf-8')") from None


def closed_error() -> ConfigError:
    return ConfigError("this client is closed", hint="make a new Client (or use it inside a with block)")


#: llama-server reads a token budget as a 32-bit int: a larger one wraps (2**32 + 1 is read as 1)
MAX_TOKEN_BUDGET = 2**31 - 1
TOKEN_BUDGET_FIELDS = ("max_tokens", "max_completion_tokens", "n_predict")


def token_budget_problem(body: dict[str, Any]) -> tuple[str, str] | None:
    """``(field, message)`` when a request body's token budget is not a positive integer the engine can hold
    (llama-server reads -1 or 0 as "until the context is full" and wraps what passes 32 bits); ``None`` when fine."""
    for key in TOKEN_BUDGET_FIELDS:
        value = body.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or not
                                  1 <= value <= MAX_TOKEN_BUDGET):
            return key, f"{key} must be a positive integer up to {MAX_TOKEN_BUDGET}, got {json.dumps(value)[:40]}"
    given = {key: body[key] for key in TOKEN_BUDGET_FIELDS if body.get(key) is not None}
    if len(set(given.values())) > 1:  # the engine applies one, the gateway's stream/assemble choice read another
        first, second = list(given)[:2]
        return second, (f"{first} {given[first]} and {second} {given[second]} differ: give one token budget "
                        "(max_completion_tokens, or max_tokens)")
    return None


def as_messages(messages: str | list[Message], system: str | None = None) -> list[Message]:
    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    if not isinstance(messages, list):
        raise InvalidMessages(f"messages must be a string or a list of {{role, content}} objects, got "
                              f"{type(messages).__name__}")
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise InvalidMessages(f"messages[{index}] is not a {{role, content}} object with a string role")
    whole = ([{"role": "system", "content": system}] if system else []) + list(messages)
    validate_messages(whole)  # not empty; image content parts: data URL, image/*, decodes, size cap
    return whole


def generation_options(
    *,
    max_tokens: int | None = None,
    temperature: float = 0.0,
    seed: int | None = DEFAULT_SEED,
    stop: list[str] | None = None,
    grammar: str | None = None,
    json_schema: dict[str, Any] | None = None,
    logprobs: int | None = None,
    cache_prompt: bool | None = None,
    adapter: str | None = None,
    lora: list[dict[str, Any]] | None = None,
    extra: dict[str, Any] | None = None,
    **unknown: Any,
) -> dict[str, Any]:
    """Sampling and llama.cpp extension fields, omitting what is unset.

    ``adapter="formal"`` or ``lora=[{"name": "formal", "scale": 0.5}]`` pick LoRA adapters by name; the
    transport turns them into llama-server's id form (:func:`with_lora`) or leaves them to the gateway. A
    misspelt option is a ``ConfigError`` naming the options (it was a ``TypeError`` naming this helper).
    """
    if unknown:
        raise ConfigError(f"unknown option(s) {', '.join(sorted(unknown))}", param=sorted(unknown)[0],
                          hint="the options are max_tokens, temperature, seed, stop, grammar, json_schema, logprobs, "
                               "cache_prompt, adapter, lora; other body fields go in extra={...}")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not 0 <= temperature < 100:
        raise ConfigError(f"temperature must be a number from 0 (greedy) up, got {temperature!r}",
                          param="temperature")
    requested(adapter, lora)  # bad adapter fields fail here, before anything is sent
    body: dict[str, Any] = {"temperature": temperature}
    optional = {
        "max_tokens": max_tokens, "seed": seed, "stop": stop, "grammar": grammar, "json_schema": json_schema,
        "cache_prompt": cache_prompt, "adapter": adapter, "lora": lora,
    }
    body.update({key: value for key, value in optional.items() if value is not None})
    if logprobs is not None:
        body["logprobs"] = True
        body["top_logprobs"] = logprobs
    if extra is not None and not isinstance(extra, dict):
        raise ConfigError(f"extra must be a dict of body fields, got {type(extra).__name__}", param="extra")
    body.update(extra or {})
    if problem := token_budget_problem(body):  # what a gateway refuses, refused before an engine wraps or ignores it
        raise ConfigError(problem[1], param=problem[0])
    return body


def chat_body(messages: list[Message], model: str | None, stream: bool, options: dict[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = {"messages": messages, "stream": stream, **options}
    if model:
        body["model"] = model
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


def text_arg(value: Any, name: str) -> str:
    """A raw endpoint's text argument, checked here: llama-server answered ``None`` with an HTTP 500 and took a
    list as several prompts."""
    if not isinstance(value, str):
        raise ConfigError(f"{name} must be a string, got {type(value).__name__}", param=name)
    return value


def tokens_arg(value: Any) -> list[int]:
    """``detokenize``'s argument: llama-server answered anything but a list of token ids with an HTTP 500."""
    if not isinstance(value, (list, tuple)) or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0
                                                        for t in value):
        raise ConfigError(f"tokens must be a list of token ids (non-negative integers), got {str(value)[:40]!r}",
                          hint="pass what tokenize() returned", param="tokens")
    return list(value)


def completion_body(prompt: str, model: str | None, stream: bool, options: dict[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = {"prompt": text_arg(prompt, "prompt"), "stream": stream, **options}
    if model:
        body["model"] = model
    return body


#: Generation routes whose bodies carry per-request LoRA scales.
LORA_PATHS = frozenset({"/v1/chat/completions", "/v1/completions", "/chat/completions", "/completions", "/completion"})
#: A client's adapter table before the server was asked.
UNKNOWN: Any = object()


def read_adapter_table(status: int, data: Any, body: dict[str, Any]) -> Any:
    """The table from a ``GET /lora-adapters`` answer, or ``UNKNOWN`` (ask again next time) when the server is
    not ready and this request names no adapter; ``TransportError`` when it does."""
    try:
        return adapter_table(status, data)
    except TransportError:
        if wants_adapters(body):
            raise
        return UNKNOWN


def with_lora(path: str, body: dict[str, Any] | None, table: list[LoadedAdapter] | None) -> dict[str, Any] | None:
    """The body as the server must get it: for a llama-server with adapters, names → ids and every adapter's
    scale listed (0 for a base request, see ``lora.selection.to_engine``); for a gateway (``None``), unchanged."""
    if body is None or path not in LORA_PATHS:
        return body
    return prepare(body, table)


def wants_adapters(body: dict[str, Any]) -> bool:
    return body.get("adapter") is not None or body.get("lora") is not None


def _usage(data: dict[str, Any]) -> Usage:
    usage = data.get("usage") or {}
    return Usage(int(usage.get("prompt_tokens", 0) or 0), int(usage.get("completion_tokens", 0) or 0))


def parse_chat(data: dict[str, Any]) -> ChatResult:
    """An OpenAI ``chat.completion`` (or ``text_completion``) object → ``ChatResult``."""
    try:
        choice = data["choices"][0]
    except (KeyError, IndexError, TypeError):
        raise TransportError(f"server answered without choices: {json.dumps(data)[:200]}") from None
    message = choice.get("message")
    text = message.get("content") or "" if isinstance(message, dict) else choice.get("text", "")
    logprobs = (choice.get("logprobs") or {}).get("content") or []
    return ChatResult(
        text=text or "", finish_reason=choice.get("finish_reason"), usage=_usage(data),
        timings=data.get("timings") or {}, logprobs=logprobs, raw=data,
    )


def draft_option(body: dict[str, Any], draft: bool) -> dict[str, Any]:
    """Ask a tiankong gateway for the draft model's stream first (docs/cascade.md)."""
    return {**body, "tiankong": {"draft": True}} if draft else body


class DraftPhases:
    """Marks a draft-then-replace stream's chunks: ``"draft"`` until the replace (or final) chunk."""

    def __init__(self, draft: bool) -> None:
        self.phase = "draft" if draft else ""

    def mark(self, chunk: StreamChunk) -> StreamChunk:
        if chunk.phase:
            self.phase = ""
        else:
            chunk.phase = self.phase
        return chunk


def chunk_from_event(event: dict[str, Any]) -> StreamChunk | None:
    marker = {"tiankong.replace": "replace", "tiankong.final": "final"}.get(str(event.get("object")))
    if marker is not None:
        return StreamChunk(text="", raw=event, phase=marker)
    choices = event.get("choices") or []
    if not choices:
        return None
    choice = choices[0]
    delta = choice.get("delta") or {}
    text = delta.get("content") if isinstance(delta, dict) else None
    return StreamChunk(text=text or choice.get("text") or "", finish_reason=choice.get("finish_reason"), raw=event)
