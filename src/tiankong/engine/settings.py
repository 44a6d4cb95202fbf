"""Engine keys of the config file (``[engine]`` and each local ``[[pool.models]]``) → ``EngineConfig``: one
mapping for every engine, so a pool model gets the keys the single engine gets — and every other place that
starts an engine (batch, evals, bench, the embedded client, model checks) states its engine as the same
``EngineKeys`` and goes through :func:`engine_config` and :func:`tiankong.engine.launch`."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..config import EngineKeys
from ..errors import ConfigError
from ..models.registry import resolve_installed
from .flags import EngineConfig, SpecAuto


def model_file(name: str) -> Path:
    """An installed model name, or a path to a ``.gguf`` file."""
    path = Path(name).expanduser()
    if path.suffix == ".gguf" and path.is_file():
        return path
    return Path(resolve_installed(name).path)


def engine_keys(**values: Any) -> EngineKeys:
    """``EngineKeys`` of a tool's engine (batch, evals, bench, the embedded client); a bad value is a one-line
    ``ConfigError`` naming the key, as in the config file."""
    try:
        return EngineKeys(**values)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'engine'}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"engine settings: {problems}", hint="see docs/config.md [engine] for each key") from None


def engine_config(keys: EngineKeys, model: str | Path, *, alias: str | None = None, api_key: str | None = None,
                  **flags: Any) -> EngineConfig:
    """The ``EngineConfig`` of one engine running ``model`` (an installed name or a .gguf path).

    ``flags``: ``EngineConfig`` fields no config key sets (``port``, ``seed``, ``batch``, ``ubatch``,
    ``metrics``, ``extra_args``…), for the tools that pin them; an unknown one is a ``TypeError``."""
    path = model_file(str(model))
    if keys.ctx is None:
        from ..plan.auto import auto_ctx

        ctx = auto_ctx(path, keys.slots, keys.kv_type).ctx
    else:
        ctx = keys.ctx
    config = EngineConfig(model=path, ctx=ctx, slots=keys.slots, kv_type=keys.kv_type,
                          cache_ram_mib=keys.cache_ram_mib, alias=alias, extra_args=list(keys.extra_args),
                          embeddings=keys.embeddings, pooling=keys.pooling, api_key=api_key,
                          **speed_kwargs(keys, model))
    if keys.threads:
        config.threads = keys.threads
    return dataclasses.replace(config, **flags) if flags else config


def speed_kwargs(settings: EngineKeys, model: str | Path | None = None) -> dict[str, Any]:
    """``EngineConfig`` keyword arguments for ``draft_model``, ``spec*``, ``mmproj``, ``rpc`` and ``lora``
    (``model``: the base the adapters must fit; default ``settings.model``)."""
    kwargs: dict[str, Any] = {"spec_type": settings.spec_type, "spec_draft_n_max": settings.spec_draft_n_max,
                              "rpc": list(settings.rpc)}
    if settings.draft_model:
        kwargs["draft_model"] = model_file(settings.draft_model)
    if settings.lora:
        from ..lora.registry import adapter_file

        base = model_file(str(model or getattr(settings, "model", "")))
        kwargs["lora"] = [adapter_file(name, base) for name in settings.lora]
    if settings.mmproj:
        kwargs["mmproj"] = Path(settings.mmproj).expanduser()
    if settings.spec == "auto":
        kwargs["spec"] = "auto"
        kwargs["spec_auto"] = SpecAuto(n_max_values=tuple(settings.spec_auto_n_max),
                                       ngram_types=tuple(settings.spec_auto_ngram))
    return kwargs
