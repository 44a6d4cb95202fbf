"""The ``[engine]`` config-file keys for speculative decoding, vision, RPC workers and LoRA adapters →
``EngineConfig`` fields."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..models import resolve_installed
from .flags import SpecAuto

if TYPE_CHECKING:  # pragma: no cover
    from ..config import EngineSettings


def model_file(name: str) -> Path:
    """An installed model name, or a path to a ``.gguf`` file."""
    path = Path(name).expanduser()
    if path.suffix == ".gguf" and path.is_file():
        return path
    return Path(resolve_installed(name).path)


def speed_kwargs(settings: EngineSettings) -> dict[str, Any]:
    """``EngineConfig`` keyword arguments for ``draft_model``, ``spec*``, ``mmproj``, ``rpc`` and ``lora``."""
    kwargs: dict[str, Any] = {"spec_type": settings.spec_type, "spec_draft_n_max": settings.spec_draft_n_max,
                              "rpc": list(settings.rpc)}
    if settings.draft_model:
        kwargs["draft_model"] = model_file(settings.draft_model)
    if settings.lora:
        from ..lora import adapter_file

        base = model_file(settings.model)
        kwargs["lora"] = [adapter_file(name, base) for name in settings.lora]
    if settings.mmproj:
        kwargs["mmproj"] = Path(settings.mmproj).expanduser()
    if settings.spec == "auto":
        kwargs["spec"] = "auto"
        kwargs["spec_auto"] = SpecAuto(n_max_values=tuple(settings.spec_auto_n_max),
                                       ngram_types=tuple(settings.spec_auto_ngram))
    return kwargs
