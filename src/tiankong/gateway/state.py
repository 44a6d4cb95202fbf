"""``GatewayState``: what the gateway's routes need — the engines (a pool; a single engine is a pool of one),
who may call, how much they may take."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request

from ..client.assemble import MIN_TOKENS
from ..config import BatchesSettings, DegradationSettings, key_from_env
from ..engine.pool import EnginePool, EngineProcess
from .admission import Admission, EngineHandle
from .cache_isolation import share_cache
from .keys import ApiKey, bearer_token, find_key
from .router import ModelRouter

MAX_BODY_BYTES = 8 * 1024 * 1024


def _ready() -> str:
    return "ready"


@dataclass
class GatewayState:
    """What the routes need: the engines (a pool; a single engine is a pool of one), who may call, how much
    they may take."""

    upstream_url: str  # a llama-server tiankong does not run (when no pool is given)
    model_name: str
    aliases: list[str] = field(default_factory=list)
    api_key_hashes: list[str] = field(default_factory=list)
    api_keys: list[ApiKey] = field(default_factory=list)  # keys with a name and their own rpm
    key_rpm: int | None = None  # requests per minute for keys without their own rpm (None: unlimited)
    request_timeout_s: float = 600.0
    slots: int = 2  # of the engine at upstream_url
    max_in_flight: int | None = None  # per engine; default: its slots
    queue_size: int | None = None  # per engine; default: 2 x its slots
    adapter_batching: bool = True  # let waiters with the running LoRA set in first (admission.py)
    assemble_min_tokens: int = MIN_TOKENS  # longer non-streamed generations are read as streams (assemble.py)
    keepalive_s: float = 10.0
    stream_idle_timeout_s: float = 120.0
    engine_retry_wait_s: float = 30.0
    max_body_bytes: int = MAX_BODY_BYTES
    body_timeout_s: float = 30.0  # a request body must arrive within this long
    log_prompts: bool = False  # one line per request with its prompt fields (logger "tiankong.prompts")
    share_prompt_cache: bool | None = None  # None: shared only with fewer than two keys (cache_isolation.py)
    default_temperature: float | None = 0.0  # of a generation that names none (server.sampling); None: the engine's
    degradation: DegradationSettings | None = None
    pool: EnginePool | None = None  # the engines (engine/pool.py); None: a pool of one at upstream_url
    batches: BatchesSettings | None = field(default_factory=BatchesSettings)  # None: no Batch API
    router: ModelRouter = field(init=False)
    fallback: EngineHandle | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.keys = [ApiKey(h, h[7:15], None) for h in self.api_key_hashes] + list(self.api_keys)
        self.shares_prompt_cache = share_cache(self.share_prompt_cache, len(self.keys))
        if self.pool is None:
            self.pool = EnginePool.of_url(self.upstream_url, self.model_name, self.aliases, slots=self.slots)
        self.router = ModelRouter(self.pool, max_in_flight=self.max_in_flight, queue_size=self.queue_size,
                                  group_batching=self.adapter_batching,
                                  batch_slots=self.batches.slots if self.batches else None,
                                  batch_yields=self.batches.yield_to_interactive if self.batches else False,
                                  batch_preempt=self.batches.preempt if self.batches else False)
        self.batch_callers: dict[str, ApiKey] = {}  # per-run tokens of the Batch API's own lines
        settings = self.degradation
        if settings is not None and settings.fallback_url:
            url, limit = settings.fallback_url.rstrip("/"), settings.fallback_max_in_flight
            self.fallback = EngineHandle(name="fallback", url=lambda: url, state=_ready,
                                         admission=Admission(limit, 2 * limit),
                                         api_key=key_from_env(settings.fallback_api_key_env, "degradation.fallback"),
                                         remote=True)

    @classmethod
    def for_engine(cls, engine: EngineProcess, model_name: str, **settings: Any) -> GatewayState:
        """State for one supervised engine (a pool of one)."""
        return cls(upstream_url=engine.url, model_name=model_name, pool=EnginePool.of_engine(engine, model_name),
                   **settings)

    @property
    def engine(self) -> EngineHandle:
        """The first engine (the only one without a pool)."""
        return self.router.first

    def engines(self) -> list[EngineHandle]:
        main = self.router.all()
        return main if self.fallback is None else [*main, self.fallback]

    def served(self) -> list[tuple[EngineHandle, list[str]]]:
        """Each engine with the model names it serves."""
        return self.router.served()

    def fallback_model(self) -> str:
        settings = self.degradation
        return (settings.fallback_model if settings else None) or self.model_name

    def key_of(self, request: Request) -> ApiKey | None:
        """The caller's key; ANONYMOUS when no keys are configured; None when the key is missing or wrong."""
        headers = request.headers
        token = bearer_token(headers.get("authorization", ""), headers.get("x-api-key", ""))
        if self.batch_callers and (caller := self.batch_callers.get(token)) is not None:
            return caller
        if not self.keys:
            return ANONYMOUS
        return find_key(self.keys, token)

    def authorized(self, request: Request) -> bool:
        return self.key_of(request) is not None

    def rpm_for(self, key: ApiKey) -> int | None:
        if key is ANONYMOUS:
            return None
        return key.rpm if key.rpm is not None else self.key_rpm


ANONYMOUS = ApiKey("", "", None)
