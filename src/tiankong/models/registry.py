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
    """The manifest of an installed model, or None when the folder holds no whole installed model (see
    :func:`manifest_problem`)."""
    try:
        data = json.loads((directory / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return data if manifest_problem(directory, data) is None else None


def manifest_problem(directory: Path, data: Any) -> str | None:
    """What is wrong with a model folder whose manifest reads as ``data`` (None: a whole installed model). A key
    missing or of another type stopped every command that lists models with an internal error; a model file cut
    short (a full disk, a copy stopped) counted as installed, so `pull` skipped it and `doctor` blamed the engine."""
    if not isinstance(data, dict):
        return "its manifest.json is not an object"
    for key in ("name", "family", "size", "quant", "sha256"):
        if not isinstance(data.get(key), str) or not data[key]:
            return f"its manifest.json has no {key}"
    size = data.get("bytes")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        return "its manifest.json has no byte count"
    file = directory / MODEL_FILE
    if not file.is_file():
        return "its model file is gone" if file.is_symlink() else "it has no model file"
    if not file.is_symlink() and file.stat().st_size != size:  # a --link'ed file is the user's (refreshed by --force)
        return f"its model file has {file.stat().st_size} bytes, its manifest says {size}"
    return None


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
    if (broken := _broken(name)) is not None:
        folder, problem = broken
        link = folder / MODEL_FILE
        what = f"was added with --link, and its file {os.readlink(link)} is gone" \
            if link.is_symlink() and not link.exists() else f"is damaged: {problem}"
        raise InvalidModelFile(f"{name} {what}",
                               hint=f"{reinstall_hint(name)}, or remove the entry (`tiankong models rm {name}`)")
    raise ModelNotFound(name, close_matches(name, records))


def broken_models() -> list[tuple[str, Path, str]]:
    """``(name, folder, what is wrong)`` of every registry folder that is not a whole installed model (which
    ``installed_models`` skips): a link whose file is gone, a damaged manifest, a model file cut short, a copy
    stopped before its manifest was written. The name is the folder's (``family-size:quant``)."""
    root = paths.models_dir()
    found = []
    for folder in sorted(root.glob("*/*/*")) if root.is_dir() else []:
        if not folder.is_dir() or not ((folder / MANIFEST).exists() or (folder / MODEL_FILE).is_symlink()
                                       or (folder / MODEL_FILE).exists()):
            continue
        try:
            data: Any = json.loads((folder / MANIFEST).read_text())
        except (OSError, ValueError):
            data = None
        problem = manifest_problem(folder, data) if data is not None else "it has no readable manifest.json"
        if problem is not None:
            found.append((f"{folder.parent.parent.name}-{folder.parent.name}:{folder.name}", folder, problem))
    return found


def broken_record(name: str) -> ModelRecord | None:
    """The broken model ``name`` as far as its folder says (``installed`` false; what its manifest holds, or
    nothing), for `models verify` to check and `models rm` to remove."""
    found = _broken(name)
    if found is None:
        return None
    folder = found[0]
    try:
        data = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        data = {}
    data = data if isinstance(data, dict) else {}
    size, sha = data.get("bytes"), data.get("sha256")
    return ModelRecord(name=name, family=folder.parent.parent.name, size=folder.parent.name, quant=folder.name,
                       installed=False, path=folder / MODEL_FILE,
                       bytes=size if isinstance(size, int) and not isinstance(size, bool) else 0,
                       sha256=sha if isinstance(sha, str) else "", source="broken", catalog=find_entry(name))


def _broken(name: str) -> tuple[Path, str] | None:
    """The folder of the broken model ``name`` (by its folder's name or its manifest's) and what is wrong."""
    for folder_name, folder, problem in broken_models():
        try:
            named = json.loads((folder / MANIFEST).read_text()).get("name")
        except (OSError, ValueError, AttributeError):
            named = None
        if name in (folder_name, named):
            return folder, problem
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
    if (target / MODEL_FILE).exists() and not force and read_manifest(target) is not None:  # a broken one: replaced
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
    with q). A broken model (``broken_models``: a link whose file is gone, a damaged manifest, a file cut short)
    is removed by its name too."""
    if (gone := broken_record(name)) is not None:
        _remove_folder(gone.path.parent)
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
