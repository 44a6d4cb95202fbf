"""Model catalog (PyPI-packaged GGUF files), local registry, GGUF metadata and verification."""

from .catalog import CATALOG, DEFAULT_MODEL, TEST_MODEL, CatalogEntry
from .gguf_meta import GGUFInfo, read_gguf
from .pull import pull_model
from .registry import (
    ModelRecord,
    add_model,
    broken_models,
    list_models,
    model_path,
    reinstall_hint,
    remove_model,
    resolve,
    resolve_installed,
)
from .verify import VerifyReport, verify_model

__all__ = [
    "CATALOG", "DEFAULT_MODEL", "TEST_MODEL", "CatalogEntry", "GGUFInfo", "ModelRecord", "VerifyReport",
    "add_model", "broken_models", "list_models", "model_path", "pull_model", "read_gguf", "reinstall_hint",
    "remove_model", "resolve", "resolve_installed", "verify_model",
]
