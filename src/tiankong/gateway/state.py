"""``GatewayState``: what the gateway's routes need — the engines (a pool; a single engine is a pool of one, and
the degradation fallback is the pool's remote fallback entry), the ``[server]`` settings whole (who may call,
how much they may take), the ``[degradation]`` and ``[batches]`` sections."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from ..config import BatchesSettings, CascadeSettings, DegradationSettings, RouteSettings, ServerSettings
from ..engine.pool import EnginePool, EngineProcess, fallback_entry
from .admission import Lane
from .cache_isolation import share_cache
from .keys import ApiKey, as_hash, bearer_token, find_key
from .router import ModelRouter

MAX_BODY_BYTES = ServerSettings.model_fields["max_body_bytes"].default
_DEFAULT_BATCHES = object()


class GatewayState:
    """The engines, the settings and the callers of one gateway.

    ``tiankong serve`` passes ``server=config.server`` (and the pool, degradation, batches and cascade sections).
    Tests and benchmarks may instead name single ``[server]`` keys (``queue_size=8``, ``request_timeout_s=…``):
    they are validated into a ``ServerSettings`` like the config file's; ``api_keys`` / ``api_key_hashes`` add
    ready-made keys (``ApiKey``, ``sha256:`` hashes) to the server's own.
    """

    def __init__(self, upstream_url: str = "", model_name: str = "", *, server: ServerSettings | None = None,
                 pool: EnginePool | None = None, aliases: list[str] | None = None, slots: int = 2,
                 degradation: DegradationSettings | None = None,
                 batches: BatchesSettings | None | Any = _DEFAULT_BATCHES, cascade: CascadeSettings | None = None,
                 route: RouteSettings | None = None,
                 api_keys: list[ApiKey] | None = None, api_key_hashes: list[str] | None = None,
                 **server_keys: Any) -> None:
        base = server or ServerSettings()
        self.server = ServerSettings.model_validate({**base.model_dump(), **server_keys}) if server_keys else base
        self.upstream_url = upstream_url  # a llama-server tiankong does not run (when no pool is given)
        self.degradation = degradation
        self.cascade = cascade if cascade is not None and cascade.enabled else None  # draft then replace
        self.route_threshold = route.threshold if route is not None else None  # [route]: route's default
        self.batches: BatchesSettings | None = BatchesSettings() if batches is _DEFAULT_BATCHES else batches
        if pool is None:
            pool = EnginePool.of_url(upstream_url, model_name, list(aliases or []), slots=slots)
        self.model_name = model_name or pool.entries[0].name
        if pool.fallback is None:
            pool.fallback = fallback_entry(degradation, self.model_name)
        self.pool = pool
        server_hashes = [as_hash(key) for key in self.server.api_keys] + list(api_key_hashes or [])
        self.keys = [ApiKey(h, h[7:15], None) for h in server_hashes] + \
            [ApiKey(as_hash(k.key), k.name, k.rpm) for k in self.server.keys] + list(api_keys or [])
        self.shares_prompt_cache = share_cache(self.server.share_prompt_cache, len(self.keys))
        batching = self.batches
        self.router = ModelRouter(pool, max_in_flight=self.server.max_in_flight, queue_size=self.server.queue_size,
                                  group_batching=self.server.adapter_batching,
                                  batch_slots=batching.slots if batching else None,
                                  batch_yields=batching.yield_to_interactive if batching else False,
                                  batch_preempt=batching.preempt if batching else False)
        self.batch_callers: dict[str, ApiKey] = {}  # per-run tokens of the Batch API's own lines

    @classmethod
    def for_engine(cls, engine: EngineProcess, model_name: str, **settings: Any) -> GatewayState:
        """State for one supervised engine (a pool of one)."""
        return cls(upstream_url=engine.url, model_name=model_name, pool=EnginePool.of_engine(engine, model_name),
                   **settings)

    @property
    def default_temperature(self) -> float:
        """Of a generation that names none (``server.sampling``)."""
        return 0.0 if self.server.sampling == "deterministic" else 1.0

    @property
    def engine(self) -> Lane:
        """The first engine (the only one without a pool)."""
        return self.router.first

    @property
    def fallback(self) -> Lane | None:
        """The degradation fallback's lane (the pool's fallback entry), if one is configured."""
        return self.router.fallback

    def engines(self) -> list[Lane]:
        return self.router.engines()

    def served(self) -> list[tuple[Lane, list[str]]]:
        """Each engine with the model names it serves."""
        return self.router.served()

    def fallback_model(self) -> str:
        return self.pool.fallback.name if self.pool.fallback is not None else self.model_name

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
        return key.rpm if key.rpm is not None else self.server.key_rpm


ANONYMOUS = ApiKey("", "", None)
