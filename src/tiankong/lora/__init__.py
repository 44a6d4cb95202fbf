"""LoRA adapters: a registry of GGUF LoRA files checked against their base model, per-request selection by
name, and (with the ``[lora]`` extra) a small CPU fine-tune that converts and registers its result."""

from .meta import AdapterInfo, InvalidAdapter, check_compatible, read_adapter, read_base
from .registry import (
    AdapterNotFound,
    AdapterRecord,
    adapter_file,
    add_adapter,
    list_adapters,
    lora_dir,
    remove_adapter,
    resolve_adapter,
)
from .selection import LoadedAdapter, parse_loaded, requested, rewrite_body, to_engine
from .synthetic import write_random_lora

__all__ = [
    "AdapterInfo", "AdapterNotFound", "AdapterRecord", "InvalidAdapter", "LoadedAdapter", "adapter_file",
    "add_adapter", "check_compatible", "list_adapters", "lora_dir", "parse_loaded", "read_adapter", "read_base",
    "remove_adapter", "requested", "resolve_adapter", "rewrite_body", "to_engine", "write_random_lora",
]
