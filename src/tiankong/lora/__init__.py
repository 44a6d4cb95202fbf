"""LoRA adapters: a registry of GGUF LoRA files checked against their base model, per-request selection by
name, and (with the ``[lora]`` extra) a small CPU fine-tune that converts and registers its result."""

from typing import TYPE_CHECKING, Any

from .meta import AdapterInfo, InvalidAdapter, check_compatible, read_adapter, read_base
from .registry import (
    AdapterNotFound,
    AdapterRecord,
    adapter_file,
    add_adapter,
    broken_adapters,
    list_adapters,
    lora_dir,
    remove_adapter,
    remove_broken_adapter,
    resolve_adapter,
)
from .selection import LoadedAdapter, parse_loaded, requested, rewrite_body, to_engine

if TYPE_CHECKING:
    from .synthetic import write_random_lora

__all__ = [
    "AdapterInfo", "AdapterNotFound", "AdapterRecord", "InvalidAdapter", "LoadedAdapter", "adapter_file",
    "add_adapter", "broken_adapters", "check_compatible", "list_adapters", "lora_dir", "parse_loaded", "read_adapter",
    "read_base", "remove_adapter", "remove_broken_adapter", "requested", "resolve_adapter", "rewrite_body",
    "to_engine", "write_random_lora",
]


def __getattr__(name: str) -> Any:
    """``write_random_lora`` needs numpy: loaded on first use, not by every import of the client."""
    if name == "write_random_lora":
        from .synthetic import write_random_lora

        return write_random_lora
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
