"""The adapter registry: ``<data dir>/lora/<name>/adapter.gguf`` + ``manifest.json``.

An adapter is *registered* when both files exist; the manifest is written last, so a half-copied adapter is
never listed. The manifest records the base model it was checked against (name, architecture, n_embd,
n_layer), the file's sha256 and size, the LoRA rank, alpha and adapted modules, and – for adapters made by
``tiankong lora train`` – how they were trained.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import paths
from ..errors import ConfigError
from ..models.registry import resolve_installed, sha256_file
from .meta import InvalidAdapter, check_compatible, read_adapter, read_base

MANIFEST = "manifest.json"
ADAPTER_FILE = "adapter.gguf"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class AdapterNotFound(ConfigError):
    type = "adapter_not_found"
    http_status = 404

    def __init__(self, name: str, known: list[str], *, where: str = "the registry") -> None:
        self.name = name
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
        hint = (f"did you mean: {', '.join(close)}?" if close else
                f"known: {', '.join(known)}" if known else "add one with `tiankong lora add` or `tiankong lora train`")
        super().__init__(f"unknown LoRA adapter {name!r} in {where}", hint=hint)


@dataclass
class AdapterRecord:
    """A registered adapter."""

    name: str
    path: Path
    base: str
    architecture: str
    n_embd: int
    n_layer: int
    rank: int
    alpha: float | None
    targets: list[str]
    bytes: int
    sha256: str
    source: str
    training: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "path": str(self.path), "base": self.base, "architecture": self.architecture,
            "n_embd": self.n_embd, "n_layer": self.n_layer, "rank": self.rank, "alpha": self.alpha,
            "targets": self.targets, "bytes": self.bytes, "sha256": self.sha256, "source": self.source,
            "training": self.training,
        }


def lora_dir() -> Path:
    return paths.data_dir() / "lora"


def check_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigError(f"invalid adapter name {name!r}",
                          hint="use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit")
    return name


def _read(directory: Path) -> AdapterRecord | None:
    try:
        data = json.loads((directory / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not (directory / ADAPTER_FILE).is_file():
        return None
    try:
        return AdapterRecord(
            name=str(data["name"]), path=directory / ADAPTER_FILE, base=str(data["base"]),
            architecture=str(data["architecture"]), n_embd=int(data["n_embd"]), n_layer=int(data["n_layer"]),
            rank=int(data["rank"]), alpha=data.get("alpha"), targets=list(data.get("targets", [])),
            bytes=int(data["bytes"]), sha256=str(data["sha256"]), source=str(data.get("source", "")),
            training=dict(data.get("training") or {}),
        )
    except (KeyError, TypeError, ValueError):
        return None


def list_adapters() -> list[AdapterRecord]:
    """Registered adapters, sorted by name."""
    root = lora_dir()
    found = (_read(manifest.parent) for manifest in sorted(root.glob(f"*/{MANIFEST}"))) if root.is_dir() else ()
    return [record for record in found if record is not None]


def resolve_adapter(name: str) -> AdapterRecord:
    """A registered adapter by exact name (``AdapterNotFound`` lists close names)."""
    record = _read(lora_dir() / check_name(name))
    if record is None:
        raise AdapterNotFound(name, [r.name for r in list_adapters()])
    return record


def adapter_file(name: str, base: Path | None = None) -> Path:
    """A registered adapter's file, or a path to a GGUF LoRA file; checked against the ``base`` model file."""
    path = Path(name).expanduser()
    if path.suffix == ".gguf" or os.sep in name:
        if not path.is_file():
            raise InvalidAdapter(f"adapter file {path} does not exist", hint="check the path")
    else:
        path = resolve_adapter(name).path
    info = read_adapter(path)
    if base is not None:
        check_compatible(info, read_base(base), base.name if base.name != "model.gguf" else str(base.parent))
    return path


def add_adapter(file: str | Path, *, name: str, base: str, force: bool = False,
                training: dict[str, Any] | None = None, source: str | None = None) -> AdapterRecord:
    """Check ``file`` is a GGUF LoRA for the installed model ``base``, copy it in and register it as ``name``."""
    check_name(name)
    src = Path(file).expanduser().resolve()
    if not src.is_file():
        raise InvalidAdapter(f"{src} does not exist or is not a file", hint="check the path")
    info = read_adapter(src)
    model = resolve_installed(base)
    shape = read_base(model.path)
    check_compatible(info, shape, model.name)
    target = lora_dir() / name
    if (target / MANIFEST).exists() and not force:
        raise ConfigError(f"adapter {name!r} is already registered",
                          hint=f"choose another name, or `tiankong lora rm {name}` first (or pass --force)")
    target.mkdir(parents=True, exist_ok=True)
    (target / MANIFEST).unlink(missing_ok=True)
    tmp = target / f".{ADAPTER_FILE}.partial"
    shutil.copyfile(src, tmp)
    os.replace(tmp, target / ADAPTER_FILE)
    manifest = {
        "name": name, "base": model.name, "architecture": shape.architecture, "n_embd": shape.n_embd,
        "n_layer": shape.n_layer, "rank": info.rank, "alpha": info.alpha, "targets": info.targets,
        "bytes": (target / ADAPTER_FILE).stat().st_size, "sha256": sha256_file(target / ADAPTER_FILE),
        "source": source or f"copy:{src}", "training": training or {},
        "added_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    tmp_manifest = target / f".{MANIFEST}.tmp"
    tmp_manifest.write_text(json.dumps(manifest, indent=2, sort_keys=True))
    os.replace(tmp_manifest, target / MANIFEST)
    return resolve_adapter(name)


def remove_adapter(name: str) -> AdapterRecord:
    record = resolve_adapter(name)
    shutil.rmtree(record.path.parent)
    return record


def broken_adapters() -> list[str]:
    """The registry's folders that hold no readable adapter — a manifest damaged, the adapter file gone, an add cut
    off: ``lora list`` names them (it hid them) and ``lora rm`` removes them (it said "unknown adapter" while
    ``lora add`` said "already registered")."""
    root = lora_dir()
    if not root.is_dir():
        return []
    return sorted(d.name for d in root.iterdir() if d.is_dir() and not d.name.startswith(".") and _read(d) is None)


def remove_broken_adapter(name: str) -> Path:
    """Remove a folder :func:`broken_adapters` lists (``AdapterNotFound`` when ``name`` is not one)."""
    folder = lora_dir() / check_name(name)
    if name not in broken_adapters():
        raise AdapterNotFound(name, [r.name for r in list_adapters()])
    shutil.rmtree(folder)
    return folder
