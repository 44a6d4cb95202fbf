"""Engine keys of the config file (``[engine]`` and each local ``[[pool.models]]``) → ``EngineConfig``: one
mapping for every engine, so a pool model gets the keys the single engine gets."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..models import resolve_installed
from .flags import EngineConfig, SpecAuto

if TYPE_CHECKING:  # pragma: no cover
    from ..config import EngineKeys


def model_file(name: str) -> Path:
    """An installed model name, or a path to a ``.gguf`` file."""
    path = Path(name).expanduser()
    if path.suffix == ".gguf" and path.is_file():
        return path
    return Path(resolve_installed(name).path)


def engine_config(keys: EngineKeys, model: str, *, alias: str, api_key: str | None = None) -> EngineConfig:
    """The ``EngineConfig`` of one engine running ``model`` (an installed name or a .gguf path)."""
    path = model_file(model)
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
    return config


def speed_kwargs(settings: EngineKeys, model: str | None = None) -> dict[str, Any]:
    """``EngineConfig`` keyword arguments for ``draft_model``, ``spec*``, ``mmproj``, ``rpc`` and ``lora``
    (``model``: the base the adapters must fit; default ``settings.model``)."""
    kwargs: dict[str, Any] = {"spec_type": settings.spec_type, "spec_draft_n_max": settings.spec_draft_n_max,
                              "rpc": list(settings.rpc)}
    if settings.draft_model:
        kwargs["draft_model"] = model_file(settings.draft_model)
    if settings.lora:
        from ..lora import adapter_file

        base = model_file(model or str(getattr(settings, "model", "")))
        kwargs["lora"] = [adapter_file(name, base) for name in settings.lora]
    if settings.mmproj:
        kwargs["mmproj"] = Path(settings.mmproj).expanduser()
    if settings.spec == "auto":
        kwargs["spec"] = "auto"
        kwargs["spec_auto"] = SpecAuto(n_max_values=tuple(settings.spec_auto_n_max),
                                       ngram_types=tuple(settings.spec_auto_ngram))
    return kwargs
