"""Per-request adapter selection by name → llama-server's per-request ``lora`` field by adapter id.

A request names adapters as ``"adapter": "formal"`` (scale 1) or ``"lora": [{"name": "formal", "scale": 0.5}]``;
llama-server wants ``"lora": [{"id": 0, "scale": 0.5}]`` where the id is the adapter's position in its
``--lora`` list (what ``GET /lora-adapters`` reports). Adapters not listed in a request get scale 0, and a
request without ``lora`` runs the base model (the engine is started with ``--lora-init-without-apply``).

llama-server reads an entry without ``id`` as id -1 and silently ignores it, so names must never reach it:
every name is translated here, and an unknown name is a ``ConfigError`` naming the adapters that are loaded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, TransportError
from .registry import ADAPTER_FILE, AdapterNotFound

if TYPE_CHECKING:
    import httpx

LoraEntry = dict[str, Any]


@dataclass(frozen=True)
class LoadedAdapter:
    """One adapter an engine was started with: its id, file, and the name a request may use for it."""

    id: int
    path: str

    @property
    def name(self) -> str:
        """The registry name (``…/lora/<name>/adapter.gguf``), else the file stem (``formal.gguf`` → ``formal``)."""
        path = PurePath(self.path)
        return path.parent.name if path.name == ADAPTER_FILE else path.stem


def parse_loaded(data: Any) -> list[LoadedAdapter]:
    """llama-server's ``GET /lora-adapters`` answer → ``LoadedAdapter`` list (in id order)."""
    if not isinstance(data, list):
        raise TransportError(f"the engine's /lora-adapters answer is not a list: {str(data)[:200]}")
    return [LoadedAdapter(id=int(item["id"]), path=str(item.get("path", ""))) for item in data
            if isinstance(item, dict) and "id" in item]


def _scale(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"{where}: scale must be a finite number, not {value!r}", hint="e.g. 1.0, or 0.5 for half")
    return float(value)


def _entry(item: Any, index: int) -> LoraEntry:
    where = f"lora[{index}]"
    if not isinstance(item, dict) or not item.keys() <= {"name", "id", "scale"}:
        raise ConfigError(f"{where} must be an object {{name, scale}} (or llama.cpp's {{id, scale}})")
    scale = _scale(item.get("scale", 1.0), where)
    if ("name" in item) == ("id" in item):
        raise ConfigError(f"{where} needs exactly one of name or id", hint='e.g. {"name": "formal", "scale": 1}')
    if "id" in item:
        if isinstance(item["id"], bool) or not isinstance(item["id"], int) or item["id"] < 0:
            raise ConfigError(f"{where}: id must be an integer ≥ 0, not {item['id']!r}")
        return {"id": item["id"], "scale": scale}
    if not isinstance(item["name"], str) or not item["name"]:
        raise ConfigError(f"{where}: name must be a non-empty string")
    return {"name": item["name"], "scale": scale}


def requested(adapter: Any = None, lora: Any = None) -> list[LoraEntry] | None:
    """The request's ``adapter`` / ``lora`` fields, validated and normalised to a list; ``None`` when unset."""
    if adapter is not None and lora is not None:
        raise ConfigError("use adapter or lora, not both", hint='lora=[{"name": …, "scale": …}] combines several')
    if adapter is not None:
        if not isinstance(adapter, str) or not adapter:
            raise ConfigError(f"adapter must be an adapter name, not {adapter!r}", hint="see `tiankong lora list`")
        return [{"name": adapter, "scale": 1.0}]
    if lora is None:
        return None
    if not isinstance(lora, list):
        raise ConfigError("lora must be a list of {name, scale} objects")
    entries = [_entry(item, i) for i, item in enumerate(lora)]
    keys = [e.get("name", e.get("id")) for e in entries]
    if len(set(keys)) != len(keys):
        raise ConfigError("lora lists an adapter twice", hint="give each adapter once, with its scale")
    return entries


def to_engine(entries: list[LoraEntry] | None, loaded: list[LoadedAdapter]) -> list[LoraEntry] | None:
    """The ``lora`` field for an engine that loaded ``loaded``: every adapter with its scale (0 unless requested).

    Always the full list when the engine has adapters, also for a base request: llama-server reuses a slot's
    cached prompt when a request *without* ``lora`` follows an adapter request on that slot (it clears the
    cache only when the request lists scales), so a base answer could continue from adapter-computed state.
    ``None`` when the engine has no adapters and none were asked for.
    """
    if not loaded:
        if entries:
            name = entries[0].get("name", entries[0].get("id"))
            raise ConfigError(f"LoRA adapter {name!r} requested but the engine has no adapters loaded",
                              hint='start it with the adapter (engine config lora = ["NAME"])')
        return None
    by_name: dict[str, int] = {}
    for item in loaded:
        by_name.setdefault(item.name, item.id)
    scales = {item.id: 0.0 for item in loaded}
    for entry in entries or []:
        if "id" in entry and entry["id"] not in scales:
            raise ConfigError(f"lora id {entry['id']} is not loaded by the engine",
                              hint=f"loaded ids: {sorted(scales)}")
        if "name" in entry and entry["name"] not in by_name:
            raise AdapterNotFound(entry["name"], sorted(by_name), where="the engine's loaded adapters")
        scales[entry["id"] if "id" in entry else by_name[entry["name"]]] = entry["scale"]
    return [{"id": i, "scale": scale} for i, scale in sorted(scales.items())]


def rewrite_body(body: dict[str, Any], loaded: list[LoadedAdapter]) -> dict[str, Any]:
    """A request body with ``adapter`` / ``lora`` replaced by llama-server's full id form (a new dict)."""
    entries = requested(body.get("adapter"), body.get("lora"))
    out = {k: v for k, v in body.items() if k not in ("adapter", "lora")}
    field = to_engine(entries, loaded)
    if field is not None:
        out["lora"] = field
    return out


def adapter_table(status: int, data: Any) -> list[LoadedAdapter] | None:
    """The answer to ``GET /lora-adapters``: a llama-server's adapters; ``None`` for 404/405 (not a llama-server,
    e.g. a tiankong gateway, which translates names itself); ``TransportError`` otherwise (e.g. still loading)."""
    if status == 200:
        return parse_loaded(data)
    if status in (404, 405):
        return None
    raise TransportError(f"the server answered HTTP {status} to /lora-adapters", hint="retry when it is ready")


async def engine_adapters(http: httpx.AsyncClient, engine_url: str) -> list[LoadedAdapter] | None:
    """``GET /lora-adapters`` of a running server (see :func:`adapter_table`)."""
    import httpx

    try:
        response = await http.get(engine_url.rstrip("/") + "/lora-adapters")
    except httpx.HTTPError as exc:
        raise TransportError(f"cannot list the engine's LoRA adapters: {type(exc).__name__}") from None
    return adapter_table(response.status_code, response.json() if response.status_code == 200 else None)


def prepare(body: dict[str, Any], table: list[LoadedAdapter] | None) -> dict[str, Any]:
    """The body for a server with adapter ``table``: llama-server → id form; anything else (``None``) → unchanged."""
    return body if table is None else rewrite_body(body, table)


class AdapterTables:
    """The gateway's view of each engine's adapters, fetched once per engine process (URL + pid)."""

    def __init__(self) -> None:
        self._tables: dict[tuple[str, object], list[LoadedAdapter] | None] = {}

    async def rewrite(self, http: httpx.AsyncClient, engine_url: str, pid: object,
                      body: dict[str, Any], *, structured: bool = False) -> dict[str, Any]:
        """The body as the engine must get it (names → ids, explicit zero scales for base requests).

        A bad ``adapter`` / ``lora`` is a ``ConfigError`` before any engine round trip; when the engine's
        adapter list cannot be read (not ready), a request that asks for no adapter goes on unchanged.
        ``structured`` requests (``response_format``) are answered by the library client, which does the
        zero scales itself and takes no adapter yet: an adapter there is refused rather than ignored.
        """
        entries = requested(body.get("adapter"), body.get("lora"))
        if structured:
            if entries:
                raise ConfigError("LoRA adapters cannot be combined with response_format yet",
                                  hint="drop response_format (and validate the answer yourself) or the adapter")
            return body
        key = (engine_url, pid)
        if key not in self._tables:
            try:
                self._tables[key] = await engine_adapters(http, engine_url)
            except TransportError:
                if entries:
                    raise
                return body
        return prepare(body, self._tables[key])


def adapter_group(body: dict[str, Any]) -> tuple[tuple[int, float], ...]:
    """The adapters a rewritten request applies, as a hashable key: requests with equal keys batch together
    in llama-server (different adapter sets decode in separate batches, taking turns)."""
    entries = body.get("lora")
    if not isinstance(entries, list):
        return ()
    applied = [(int(e["id"]), float(e["scale"])) for e in entries
               if isinstance(e, dict) and isinstance(e.get("id"), int) and e.get("scale")]
    return tuple(sorted(applied))
