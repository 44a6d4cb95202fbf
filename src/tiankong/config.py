"""The one configuration file (TOML), validated by Pydantic with ``extra="forbid"``.

Durations are float seconds named ``*_s``. Errors name the key path and what is wrong.
"""

from __future__ import annotations

import hashlib
import os
import re
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from .config_base import Strict as _Strict
from .errors import ConfigError
from .models.catalog import DEFAULT_MODEL
from .plan.formula import MAX_CTX, MAX_SLOTS, MIN_CTX

#: llama-server reads -t as a 32-bit int and crashes on absurd thread counts; far above any machine tiankong targets
#: (the context and slot bounds live beside the memory plan, which refuses the same values)
MAX_THREADS = 1024
KvType = Literal["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"]


class EngineKeys(_Strict):
    """The keys that shape one llama-server: the single ``[engine]`` and every local ``[[pool.models]]`` entry
    take the same ones (``tiankong.engine.settings.engine_config`` maps them to flags for both)."""

    ctx: int | None = Field(None, ge=MIN_CTX, le=MAX_CTX, description="total context (llama-server -c, split between "
                            "slots); unset: the largest per-slot context up to 8192 (and the model's own) that the "
                            "memory plan fits in half the memory available, times slots (plan/auto.py)")
    slots: int = Field(2, ge=1, le=MAX_SLOTS)
    threads: int | None = Field(None, ge=1, le=MAX_THREADS)
    kv_type: KvType = "f16"
    cache_ram_mib: int = Field(0, ge=0)
    restart_after_requests: int | None = Field(None, ge=1, description="planned restart after N requests")
    embeddings: bool = Field(False, description="serve /v1/embeddings and decider probes (per-token vectors, "
                             "pooled by tiankong); off by default: it costs speculative decoding its batch")
    pooling: Literal["none", "mean", "last", "cls"] = Field(
        "none", description="embeddings: 'none' keeps per-token vectors (tiankong mean-pools them for "
        "/v1/embeddings; decider probes need them), or let llama-server pool")
    extra_args: list[str] = Field(default_factory=list)
    # speed plays (docs/speed.md): speculative decoding, vision projector, RPC workers
    draft_model: str | None = Field(None, description="installed model name or .gguf path, same tokenizer as model")
    spec: Literal["auto"] | None = Field(None, description="'auto': measure at start-up, enable only if >= 1.1x")
    spec_type: str | None = Field(None, description="fixed --spec-type (draft-simple, ngram-simple, ...)")
    spec_draft_n_max: int | None = Field(None, ge=0)
    spec_auto_n_max: list[int] = Field(default_factory=lambda: [4, 8], description="auto: draft lengths to try")
    spec_auto_ngram: list[str] = Field(default_factory=list, description="auto: n-gram modes to try")
    mmproj: str | None = Field(None, description="multimodal projector GGUF for a vision model")
    rpc: list[str] = Field(default_factory=list, description="ggml-rpc-server workers, host:port")
    lora: list[str] = Field(default_factory=list,
                            description="LoRA adapters (registry names or .gguf paths), chosen per request")


class EngineSettings(EngineKeys):
    model: str = DEFAULT_MODEL
    startup_timeout_s: float = Field(180.0, gt=0)
    max_restarts: int = Field(5, ge=1, description="crash restarts allowed within restart_window_s")
    restart_window_s: float = Field(300.0, gt=0)
    after_restart_budget: Literal["retry", "exit"] = Field(
        "retry", description="when max_restarts is spent: keep retrying with a backoff up to 60 s (said in "
        "/health), or exit non-zero so a supervisor (systemd, Docker) restarts tiankong")
    wedge_check_s: float = Field(10.0, ge=0, description="probe /slots this often; 0 turns wedge detection off")
    wedge_probe_timeout_s: float = Field(5.0, gt=0)
    wedge_failures: int = Field(3, ge=1, description="consecutive unanswered probes before a restart")
    llama_server: str | None = None


class KeySettings(_Strict):
    """One API key with a name (for metrics) and its own requests-per-minute limit."""

    key: str = Field(min_length=8, description="'sha256:<hex>' (recommended) or the plain key")
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.@-]+$")
    rpm: int | None = Field(None, ge=1, description="requests per minute; default: server.key_rpm")

    @field_validator("key")
    @classmethod
    def _real_key(cls, key: str) -> str:
        return check_api_key(key, "key")  # the same rule as api_keys: a short or malformed key is refused


class ServerSettings(_Strict):
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    api_keys: list[str] = Field(default_factory=list, description="plain keys (≥ 8 characters) or 'sha256:<hex>' "
                                "hashes")
    keys: list[KeySettings] = Field(default_factory=list, description="named keys with their own rpm")
    key_rpm: int | None = Field(None, ge=1, description="requests per minute per key (keys without their own rpm)")
    request_timeout_s: float = Field(600.0, gt=0, description="per-request deadline, queue wait included")
    max_in_flight: int | None = Field(None, ge=1, description="requests sent to the engine at once; default: slots")
    queue_size: int | None = Field(None, ge=0, description="requests waiting for a slot; default: 2 x slots")
    adapter_batching: bool = Field(True, description="queued requests with the running LoRA set go first")
    assemble_min_tokens: int = Field(256, ge=0, description="non-streamed generations with a larger (or no) "
                                     "token budget are read as streams, so a client leaving stops them")
    keepalive_s: float = Field(10.0, gt=0, description="SSE comment after this long without data")
    stream_idle_timeout_s: float = Field(120.0, gt=0, description="close a stream idle (either side) this long")
    engine_retry_wait_s: float = Field(30.0, ge=0, description="wait this long for a restarted engine to retry")
    max_body_bytes: int = Field(8 * 1024 * 1024, ge=1024)
    header_timeout_s: float = Field(10.0, gt=0, description="close a connection whose request head is not complete "
                                    "this long after its first byte (slow-header clients)")
    body_timeout_s: float = Field(30.0, gt=0, description="a request body must arrive within this long (408)")
    log_prompts: bool = False
    sampling: Literal["deterministic", "openai"] = Field(
        "deterministic", description="a chat or completion that names no temperature: 'deterministic' decodes "
        "greedily (temperature 0, like tiankong.Client); 'openai' samples at OpenAI's default temperature 1")
    share_prompt_cache: bool | None = Field(
        None, description="let requests reuse prompts other requests left in the engine's cache; unset: only "
        "when fewer than two API keys can call (several keys: off, so no key learns another's prompts from "
        "cached_tokens, timings or latency; docs/security.md)")

    @field_validator("api_keys")
    @classmethod
    def _real_keys(cls, keys: list[str]) -> list[str]:
        for index, key in enumerate(keys):
            check_api_key(key, f"api_keys[{index}]")
        return keys

    @model_validator(mode="after")
    def _one_entry_per_key(self) -> ServerSettings:
        """A key listed twice (plain or hashed): which entry's name and rpm applied was never said."""
        seen: dict[str, str] = {}
        for where, key in [*((f"api_keys[{i}]", k) for i, k in enumerate(self.api_keys)),
                           *((f"keys[{i}] ({k.name})", k.key) for i, k in enumerate(self.keys))]:
            digest = key.lower() if key.startswith("sha256:") else "sha256:" + hashlib.sha256(key.encode()).hexdigest()
            if digest in seen:
                raise ValueError(f"{where} is the same key as {seen[digest]}: list each key once")
            seen[digest] = where
        return self


MIN_KEY_CHARS = 8


def check_api_key(key: str, where: str = "the API key") -> str:
    """A plain key of at least ``MIN_KEY_CHARS`` characters (no spaces), or ``sha256:<64 hex digits>``."""
    if key.startswith("sha256:"):
        digest = key[7:]
        if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest.lower()):
            raise ValueError(f"{where} is not sha256:<64 hex digits>")
        return key
    if len(key.strip()) < MIN_KEY_CHARS or key != key.strip() or any(c.isspace() for c in key):
        raise ValueError(f"{where} must be at least {MIN_KEY_CHARS} characters without spaces (an empty or short key "
                         "is guessed in seconds)")
    return key


def _levels(values: list[float]) -> list[float]:
    if any(v < 0 for v in values):
        raise ValueError("thresholds are counts, seconds or MiB: none is negative")
    if len(values) > 3 or any(b < a for a, b in zip(values, values[1:], strict=False)):
        raise ValueError("give 1 to 3 ascending thresholds: [L1, L2, L3] (fewer: the higher levels never trigger)")
    return values


class DegradationSettings(_Strict):
    """Levels L0-L3 under load; each trigger is a list of thresholds [L1, L2, L3] (any trigger raises the level)."""

    enabled: bool = False
    queue_depth: list[int] = Field(default_factory=list, description="requests waiting for a slot")
    p99_latency_s: list[float] = Field(default_factory=list, description="end-to-end p99 over window_s")
    engine_rss_mib: list[int] = Field(default_factory=list, description="largest engine resident memory")
    window_s: float = Field(30.0, gt=0, description="p99 latency over this many recent seconds")
    check_interval_s: float = Field(1.0, ge=0, description="re-evaluate at most this often (0: every request)")
    hold_s: float = Field(30.0, ge=0, description="signals must stay calm this long before stepping down a level")
    recover_ratio: float = Field(0.8, gt=0, le=1, description="calm = below this fraction of the level's thresholds")
    max_prompt_chars: int = Field(16000, ge=1, description="L1: prompt text (all messages) longer than this ...")
    over_limit: Literal["reject", "truncate"] = Field("reject", description="... is refused (413) or truncated")
    l2_max_in_flight: int = Field(1, ge=1, description="L2: requests sent to each engine at once")
    fallback_url: str | None = Field(None, pattern=r"^http://", description="L3: an OpenAI-compatible http:// URL")
    fallback_model: str | None = Field(None, description="L3: the model name to send to the fallback")
    fallback_max_in_flight: int = Field(4, ge=1)
    fallback_api_key_env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
                                             description="L3: environment variable holding the fallback's API key")

    _check_queue = field_validator("queue_depth", "p99_latency_s", "engine_rss_mib")(_levels)


class PoolModelSettings(EngineKeys):
    """One model of the pool: local engines (``model``, with every engine key of ``[engine]``; supervision —
    start-up timeout, restart budget, wedge watch, binary — comes from ``[engine]``) or a remote
    OpenAI-compatible upstream (``url``)."""

    name: str = Field(min_length=1, description="the name clients send as model")
    aliases: list[str] = Field(default_factory=list)
    model: str | None = Field(None, description="an installed model (local engines, started on demand)")
    url: str | None = Field(None, pattern=r"^http://", description="or: an OpenAI-compatible http:// upstream")
    replicas: int = Field(1, ge=1, le=16, description="local engines for this model")
    max_in_flight: int = Field(4, ge=1, description="remote upstream: requests sent at once")
    api_key_env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
                                    description="remote upstream: environment variable holding its API key")
    idle_ttl_s: float | None = Field(None, gt=0, description="stop the local engines after this long unused")

    @model_validator(mode="after")
    def _one_source(self) -> PoolModelSettings:
        if (self.model is None) == (self.url is None):
            raise ValueError("give exactly one of model (local engines) or url (remote upstream)")
        if self.api_key_env and self.url is None:
            raise ValueError("api_key_env is for a remote upstream (url); local engines need no key")
        if self.lora and self.url is not None:
            raise ValueError("lora loads adapters into local engines (model); a remote upstream has its own")
        if self.url is not None:
            engine_keys = sorted(k for k in self.model_fields_set & set(EngineKeys.model_fields) if k != "lora")
            if engine_keys:
                raise ValueError(f"{', '.join(engine_keys)} shape local engines (model); a remote upstream (url) "
                                 "runs its own: leave them out")
        return self


def key_from_env(variable: str | None, what: str) -> str | None:
    """The API key held by environment variable ``variable`` (None when no variable is configured)."""
    if not variable:
        return None
    value = os.environ.get(variable, "").strip()
    if not value:
        raise ConfigError(f"{what}: environment variable {variable} is not set or empty",
                          hint=f"export {variable}=<the upstream's API key> before starting the gateway")
    if any(ch in value for ch in "\r\n\0"):
        raise ConfigError(f"{what}: environment variable {variable} holds a line break",
                          hint="an API key is a single line")
    return value


class PoolSettings(_Strict):
    """Several models routed by the request's model; empty: the single [engine]."""

    max_loaded: int | None = Field(None, ge=1, description="models with local engines running at once")
    models: list[PoolModelSettings] = Field(default_factory=list)


class BatchesSettings(_Strict):
    """The OpenAI Batch API (``/v1/files``, ``/v1/batches``): batches run on slots nobody interactive wants."""

    enabled: bool = True
    dir: str | None = Field(None, description="where files and batches are kept (default: <data dir>/batches)")
    max_file_bytes: int = Field(200 * 1024 * 1024, ge=1024, description="largest upload")
    max_requests: int = Field(50_000, ge=1, description="most request lines in one batch input")
    slots: int | None = Field(None, ge=1, description="slots of each engine batch lines may hold at once "
                              "(default: every slot no interactive request is waiting for; with preempt, one "
                              "line at a time — measured best for interactive latency and batch speed on a CPU)")
    yield_to_interactive: bool = Field(False, description="start no batch line while an interactive request is "
                                       "being served (fewer engine steps shared; less batch throughput)")
    preempt: bool = Field(True, description="batch lines run only while no interactive request is in flight or "
                          "waiting; a plain chat/completion line stops the moment one arrives and goes on from "
                          "where it stopped afterwards (interactive latency as on a quiet engine)")
    concurrency: int | None = Field(None, ge=1, description="lines of a batch in flight (default: the engines' "
                                    "slots)")
    engine_wait_s: float = Field(3600.0, ge=0, description="an engine down this long fails the running batch")
    turn_s: float = Field(5.0, gt=0, description="a batch that has run this long while another waits stops and "
                          "goes on after it (round-robin, so one key's large batch does not hold back another's)")
    completion_windows: list[str] = Field(default_factory=lambda: ["24h"], min_length=1, description="the "
                                          "completion_window values a batch may ask for, matched exactly "
                                          "(<N>h or <N>m)")
    file_ttl_s: float = Field(30 * 86400.0, gt=0, description="files (uploads and batch outputs) expire this long "
                              "after they are made (expires_at) and are then removed")
    # per API key (each key counts its own; a keyless loopback gateway is one key)
    key_max_stored_bytes: int = Field(1024 * 1024 * 1024, ge=1024, description="bytes of files one key keeps")
    key_max_files: int = Field(100, ge=1, description="files one key keeps")
    key_max_open_batches: int = Field(4, ge=1, description="unfinished batches of one key")
    key_max_pending_requests: int = Field(100_000, ge=1, description="request lines of one key's unfinished "
                                          "batches")

    @field_validator("completion_windows")
    @classmethod
    def _windows(cls, windows: list[str]) -> list[str]:
        for window in windows:
            if not re.fullmatch(r"[1-9][0-9]{0,3}[mh]", window):
                raise ValueError(f"completion window {window!r} is not <N>h or <N>m")
        return windows


class CascadeSettings(_Strict):
    """Draft then replace on the gateway (docs/cascade.md): a client that asks for it (``"tiankong": {"draft":
    true}``) gets the draft model's stream at once, then the quality model's answer; one that does not gets the
    quality model's answer alone. Both are names of ``[[pool.models]]`` (the quality model may be a remote one)."""

    draft_model: str | None = Field(None, min_length=1, description="the small, fast model (a pool model name)")
    quality_model: str | None = Field(None, min_length=1, description="the model whose answer is final (a pool "
                                      "model name; also what a chat naming no model gets)")
    quality_starts: Literal["draft_token", "draft_end"] = Field(
        "draft_token", description="when the quality request is sent: at the draft's first token (the two "
        "overlap: for engines with cores of their own, a GPU or a remote quality model) or when the draft has "
        "ended (nothing overlaps: for two engines sharing the same few CPU cores)")

    @model_validator(mode="after")
    def _both(self) -> CascadeSettings:
        if (self.draft_model is None) != (self.quality_model is None):
            raise ValueError("give both draft_model and quality_model (or neither)")
        if self.draft_model is not None and self.draft_model == self.quality_model:
            raise ValueError("draft_model and quality_model must be different models")
        return self

    @property
    def enabled(self) -> bool:
        return self.draft_model is not None


class RouteSettings(_Strict):
    """``route``'s escalation threshold when a request gives none (docs/cascade.md, "Using the threshold")."""

    threshold: float | None = Field(None, ge=0.0, le=1.0, description="escalate below this confidence when the "
                                    "caller names no threshold and the route's decider has none; unset: 0.6. "
                                    "`tiankong cascade eval --write` sets it")


class TiankongConfig(_Strict):
    server: ServerSettings = Field(default_factory=lambda: ServerSettings())
    engine: EngineSettings = Field(default_factory=lambda: EngineSettings())
    degradation: DegradationSettings = Field(default_factory=lambda: DegradationSettings())
    pool: PoolSettings = Field(default_factory=lambda: PoolSettings())
    batches: BatchesSettings = Field(default_factory=lambda: BatchesSettings())
    cascade: CascadeSettings = Field(default_factory=lambda: CascadeSettings())
    route: RouteSettings = Field(default_factory=lambda: RouteSettings())


def _format_errors(exc: ValidationError, source: str) -> str:
    problems = []
    for err in exc.errors():
        where = ".".join(str(part) for part in err["loc"]) or "(top level)"
        problems.append(f"{where}: {str(err['msg']).removeprefix('Value error, ')}")
    return f"{source}: " + "; ".join(problems)


def load_config(path: str | Path | None, *, check_read: bool = True) -> TiankongConfig:
    """Read and validate a config file; ``None`` gives the defaults. ``check_read``: refuse keys nothing would read
    (:func:`check_keys_read`) — a caller that sets command-line overrides first (``serve --embeddings``) passes
    false and checks after them."""
    if path is None:
        return TiankongConfig()
    from .jsonsafe import read_limited

    file = Path(path)
    text = read_limited(file, "config")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{file} is not valid TOML: {exc}", hint="fix the syntax at the position shown") from None
    try:
        config = TiankongConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_errors(exc, str(file)), hint="see docs/config.md for every key") from None
    if check_read:
        check_keys_read(config, file)
    return config


def check_keys_read(config: TiankongConfig, file: str | Path) -> None:
    """Keys set to another value than the default that the engine would not read (they were accepted and did
    nothing; a file listing every key at its default, as docs/config.md shows, still loads)."""
    fields = EngineSettings.model_fields
    keys = {key for key in config.engine.model_fields_set if key in fields
            and getattr(config.engine, key) != fields[key].get_default(call_default_factory=True)}
    if "pooling" in keys and not config.engine.embeddings:
        raise ConfigError(f"{file}: engine.pooling is read only with embeddings on",
                          hint="add engine.embeddings = true, or leave pooling out")
    auto = sorted(keys & {"spec_auto_n_max", "spec_auto_ngram"})
    if auto and config.engine.spec != "auto":
        raise ConfigError(f"{file}: engine.{auto[0]} is read only with spec = \"auto\"",
                          hint="add engine.spec = \"auto\", or leave it out")
