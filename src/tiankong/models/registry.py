"""The local model registry: ``<data dir>/models/<family>/<size>/<quant>/model.gguf`` + ``manifest.json``.

A model is *installed* when both files exist; the manifest is written last, so a half-copied model
is never listed as installed. Names resolve by exact ``family-size:quant``, by ``family-size`` when
only one quant exists, by unique prefix, or by a path to a ``.gguf`` file.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import paths
from ..errors import ConfigError, InvalidModelFile, ModelNotFound, ModelNotInstalled
from .catalog import CATALOG, CatalogEntry, find_entry
from .gguf_meta import check_magic, read_gguf

MANIFEST = "manifest.json"
MODEL_FILE = "model.gguf"
_NAME_PART = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
MAX_NAME_PART = 64  # a folder name each: far under any file system's 255


@dataclass
class ModelRecord:
    """A model known to tiankong: from the catalog, the registry, or both."""

    name: str
    family: str
    size: str
    quant: str
    installed: bool
    path: Path
    bytes: int
    sha256: str
    source: str
    catalog: CatalogEntry | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "installed": self.installed, "path": str(self.path) if self.installed else None,
            "bytes": self.bytes, "sha256": self.sha256, "source": self.source,
        }


def model_dir(family: str, size: str, quant: str) -> Path:
    return paths.models_dir() / family / size / quant


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(chunk), b""):
            digest.update(block)
    return digest.hexdigest()


def read_manifest(directory: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((directory / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not (directory / MODEL_FILE).is_file():
        return None
    return data


def write_manifest(directory: Path, data: dict[str, Any]) -> None:
    tmp = directory / f".{MANIFEST}.tmp"
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True))
    os.replace(tmp, directory / MANIFEST)


def _record_from_manifest(directory: Path, data: dict[str, Any]) -> ModelRecord:
    return ModelRecord(
        name=data["name"], family=data["family"], size=data["size"], quant=data["quant"], installed=True,
        path=directory / MODEL_FILE, bytes=int(data["bytes"]), sha256=data["sha256"],
        source=data.get("source", "local"), catalog=find_entry(data["name"]),
    )


def installed_models() -> list[ModelRecord]:
    root = paths.models_dir()
    records = []
    for manifest in sorted(root.glob(f"*/*/*/{MANIFEST}")) if root.is_dir() else []:
        data = read_manifest(manifest.parent)
        if data is not None and "name" in data:
            records.append(_record_from_manifest(manifest.parent, data))
    return records


def list_models() -> list[ModelRecord]:
    """Catalog entries (installed or not) followed by other installed models."""
    installed = {record.name: record for record in installed_models()}
    records = []
    for entry in CATALOG:
        found = installed.pop(entry.name, None)
        records.append(found or ModelRecord(
            name=entry.name, family=entry.family, size=entry.size, quant=entry.quant, installed=False,
            path=model_dir(entry.family, entry.size, entry.quant) / MODEL_FILE, bytes=entry.bytes,
            sha256=entry.sha256, source="catalog", catalog=entry,
        ))
    return records + list(installed.values())


def resolve(name: str) -> ModelRecord:
    """A model by name, unique prefix or path (``ModelNotFound`` lists close matches)."""
    if not name.strip():  # every name starts with "": it was "ambiguous — use one of" every model
        raise ConfigError("the model name is empty", hint="name a model (`tiankong models list`) or a .gguf path")
    if name.endswith(".gguf") or os.sep in name:
        return _record_for_path(Path(name).expanduser())
    records = list_models()
    for record in records:
        if record.name == name:
            return record
    matches = [r for r in records if r.name.split(":")[0] == name] or [r for r in records if r.name.startswith(name)]
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        installed = [m for m in matches if m.installed]
        if len(installed) == 1:
            return installed[0]
        current = [m for m in matches if not (m.catalog and m.catalog.superseded)]
        if len(current) == 1:  # a short name of a model with a superseded quant: the current one
            return current[0]
        raise ConfigError(
            f"model name {name!r} is ambiguous", hint=f"use one of: {', '.join(m.name for m in matches)}"
        )
    if (folder := _dangling(name)) is not None:
        raise InvalidModelFile(f"{name} was added with --link, and its file {os.readlink(folder / MODEL_FILE)} is gone",
                               hint=f"add the file again (`tiankong models add FILE --force`) or remove the entry "
                                    f"(`tiankong models rm {name}`)")
    raise ModelNotFound(name, close_matches(name, records))


def _dangling(name: str) -> Path | None:
    """The folder of the model ``name`` whose file is a link to a file that is gone (``installed_models`` skips it)."""
    root = paths.models_dir()
    for manifest in sorted(root.glob(f"*/*/*/{MANIFEST}")) if root.is_dir() else []:
        link = manifest.parent / MODEL_FILE
        if link.is_symlink() and not link.exists():
            try:
                if json.loads(manifest.read_text()).get("name") == name:
                    return manifest.parent
            except (OSError, ValueError, AttributeError):
                continue
    return None


def close_matches(name: str, records: list[ModelRecord], limit: int = 3) -> list[str]:
    """Names that look like ``name``, compared by full name, name without quant, and family."""
    def score(record: ModelRecord) -> float:
        forms = (record.name, record.name.split(":")[0], record.family, f"{record.family}-{record.size}")
        return max(difflib.SequenceMatcher(None, name.lower(), form).ratio() for form in forms)

    # at equal scores a superseded quant comes after the current one
    ranked = sorted(((score(r), not (r.catalog and r.catalog.superseded), r.name) for r in records), reverse=True)
    return [n for s, _, n in ranked if s >= 0.6][:limit]


def resolve_installed(name: str) -> ModelRecord:
    record = resolve(name)
    if not record.installed:
        raise ModelNotInstalled(record.name)
    return record


def model_path(name: str) -> Path:
    """Path of an installed model's GGUF file."""
    return resolve_installed(name).path


def _record_for_path(path: Path) -> ModelRecord:
    """A model given as a file: it must be one, and a GGUF one (llama-server's own refusal of a text file came
    after a start-up, as "exited with code 1 during start-up")."""
    if path.is_dir():
        raise InvalidModelFile(f"{path} is a directory, not a model file", hint="give the .gguf file in it")
    if not path.is_file():
        raise ModelNotFound(str(path), path=True)
    check_magic(path)
    stat = path.stat()
    return ModelRecord(
        name=str(path), family="local", size=path.stem, quant="", installed=True, path=path,
        bytes=stat.st_size, sha256="", source="path",
    )


def _slug(value: str) -> str:
    """A name part from a file's metadata: lower case, other characters as '-', at most ``MAX_NAME_PART``."""
    slug = re.sub(r"[^a-z0-9._-]+", "-", value.lower()).strip("-.")[:MAX_NAME_PART].strip("-.")
    return slug or "model"


def add_model(
    file: str | Path, *, family: str | None = None, size: str | None = None, quant: str | None = None,
    link: bool = False, force: bool = False,
) -> ModelRecord:
    """Import a local GGUF file into the registry (copy, or symlink with ``link``); an installed model of the same
    name is replaced only with ``force``."""
    source = Path(file).expanduser().resolve()
    if not source.is_file():
        raise InvalidModelFile(f"{source} does not exist or is not a file", hint="check the path")
    info = read_gguf(source)
    for label, given in (("family", family), ("size", size), ("quant", quant)):
        # what the user typed is used as typed or refused ('..', '/', 模型 became "model"; 300 letters a traceback)
        if given is not None and not (_NAME_PART.match(given) and len(given) <= MAX_NAME_PART):
            raise ConfigError(f"invalid --{label} {given[:80]!r}", hint=f"use lowercase letters, digits, '.', '_' or "
                              f"'-', starting with a letter or digit, at most {MAX_NAME_PART} characters")
    family = _slug(family or info.basename or info.architecture)
    size = _slug(size or info.size_label or f"{info.parameters / 1e6:.0f}m")
    quant = _slug(quant or info.file_type)
    target = model_dir(family, size, quant)
    # the installed file itself (a copy, or what a link points at with --link refused only when it is not a link:
    # a --link'ed model is refreshed from its file with --force)
    if (target / MODEL_FILE).exists() and not (target / MODEL_FILE).is_symlink() \
            and (target / MODEL_FILE).resolve() == source:
        raise ConfigError(f"{source} is the installed file of {family}-{size}:{quant} itself",
                          hint="it is installed already; to import another copy give another --family/--size/--quant")
    if (target / MODEL_FILE).exists() and not force:
        raise ConfigError(f"model {family}-{size}:{quant} is already installed at {target}",
                          hint="pass --force to replace it, or --family/--size/--quant for another name")
    target.mkdir(parents=True, exist_ok=True)
    dest = target / MODEL_FILE
    tmp = target / f".{MODEL_FILE}.partial"
    tmp.unlink(missing_ok=True)
    if link:
        tmp.symlink_to(source)
    else:
        shutil.copyfile(source, tmp)
    os.replace(tmp, dest)
    name = f"{family}-{size}:{quant}"
    write_manifest(target, {
        "name": name, "family": family, "size": size, "quant": quant, "bytes": info.file_bytes,
        "sha256": sha256_file(dest), "source": f"{'link' if link else 'copy'}:{source}",
        "gguf": info.to_json(), "installed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    })
    return resolve(name)


def remove_model(name: str) -> ModelRecord:
    """Remove the installed model ``name`` — its full name, or its name without the quant when one quant is
    installed; never a prefix match, which ``resolve`` allows for reading (``rm q`` removed the one model starting
    with q). A model added with ``--link`` whose file is gone is removed by its name too."""
    if (dangling := _dangling(name)) is not None:
        gone = _record_from_manifest(dangling, json.loads((dangling / MANIFEST).read_text()))
        _remove_folder(dangling)
        return gone
    record = resolve_installed(name)
    if record.source == "path":
        raise ConfigError(f"{name} is a file outside the registry", hint="delete the file yourself")
    if name not in (record.name, record.name.split(":")[0]):
        raise ConfigError(f"{name!r} is not an installed model's name (it is the start of {record.name})",
                          hint=f"to remove that model: tiankong models rm {record.name}")
    if name != record.name and len(quants := [r.name for r in installed_models() if r.name.split(":")[0] == name]) > 1:
        raise ConfigError(f"{name!r} names {len(quants)} installed quants", hint=f"remove one: {', '.join(quants)}")
    _remove_folder(record.path.parent)
    return record


def reinstall_hint(name: str) -> str:
    """How to get a model back whose file failed verification: a catalog model is pulled again; one added from a
    file is added again (``pull`` knows only the catalog); a path is the user's own file."""
    if name.endswith(".gguf") or os.sep in name:
        return "the file is damaged: download or convert it again"
    if find_entry(name) is not None:
        return f"reinstall with `tiankong models pull --force {name}`"
    return f"add its file again with `tiankong models add FILE --force` (as {name})"


def _remove_folder(folder: Path) -> None:
    """``<models>/<family>/<size>/<quant>``, then its parents once nothing else is there."""
    shutil.rmtree(folder)
    for parent in (folder.parent, folder.parent.parent):  # the size and family folders, once nothing else is there
        try:
            parent.rmdir()
        except OSError:  # not empty (another quant or size), or already gone
            break
