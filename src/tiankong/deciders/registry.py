"""Decider artifacts: one versioned JSON file each, registered by name under the data dir.

``<data dir>/deciders/<name>/v<N>.json``; ``load_decider("spam")`` takes the newest version, ``"spam@2"`` a
given one, and a path to a ``.json`` file loads that file — for the local user only: inside
``names_only()`` (the gateway, for every request body and batch line) a decider is a registry name, and every
unknown or invalid name, path included, is one and the same :class:`NoSuchDecider` (no file is read, and the
answer says nothing about which files exist). Deciders shipped with tiankong (``guard``) live in
the package and are listed with ``source: "builtin"``; a registered decider of the same name takes precedence.
An artifact records what it needs to be trusted: the method and its parameters, the labels, the base model's
name and sha256 (checked against the engine before use), the examples' hash and count, and the CV report.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .. import paths
from ..errors import ConfigError

FORMAT = "tiankong-decider/1"
BUILTIN_DIR = Path(__file__).parent / "builtin"
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")


class DeciderNotFound(ConfigError):
    """No decider of that name (the message lists the closest names)."""

    def __init__(self, name: str, known: list[str]) -> None:
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.4)
        hint = (f"did you mean {', '.join(close)}? " if close else "") + \
            "see `tiankong deciders list`, or make one with `tiankong tune classify --data FILE --name NAME`"
        super().__init__(f"unknown decider {name!r}", hint=hint)
        self.name = name
        self.suggestions = close


class NoSuchDecider(ConfigError):
    """A decider named over HTTP that is not a registered name: one message for every such name (never echoed)."""

    def __init__(self) -> None:
        super().__init__("no such decider", hint="name a registered decider (lower-case letters, digits, '.', '_' "
                         "or '-', optionally @VERSION), as `tiankong deciders list` shows on the gateway's host; "
                         "file paths are not read over HTTP")
        self.param = "decider"


_NAMES_ONLY: ContextVar[bool] = ContextVar("tiankong_decider_names_only", default=False)


@contextmanager
def names_only() -> Iterator[None]:
    """Within this block ``load_decider`` takes registry names only (what a remote caller may name)."""
    token = _NAMES_ONLY.set(True)
    try:
        yield
    finally:
        _NAMES_ONLY.reset(token)


class InvalidDecider(ConfigError):
    """A decider file that is not a tiankong decider of a supported format."""


@dataclass
class Decider:
    """A fitted label decision: method + state, labels, base model, examples' hash, CV report."""

    name: str
    method: str
    labels: list[str]
    state: dict[str, Any]
    words: list[str] = field(default_factory=list)
    base_model: dict[str, str] | None = None
    examples: dict[str, Any] = field(default_factory=dict)
    cv: dict[str, Any] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)
    task: str = "classify"
    version: int = 0
    created: str = ""
    source: str = "registry"

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}" if self.version else self.name

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "name": self.name, "version": self.version, "task": self.task,
                "method": self.method, "labels": self.labels, "words": self.words, "params": self.params,
                "base_model": self.base_model, "examples": self.examples, "cv": self.cv,
                "created": self.created, "state": self.state}

    def summary(self) -> dict[str, Any]:
        chosen = self.cv.get("chosen", {}) if isinstance(self.cv, dict) else {}
        return {"name": self.name, "version": self.version, "labels": self.labels, "method": self.method,
                "task": self.task, "cv_accuracy": chosen.get("accuracy"), "cv_macro_f1": chosen.get("macro_f1"),
                "cv_ece": chosen.get("ece"), "examples": self.examples.get("n"),
                "base_model": (self.base_model or {}).get("name"), "created": self.created, "source": self.source}

    @classmethod
    def from_json(cls, data: Any, source: str = "registry") -> Decider:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise InvalidDecider(f"not a {FORMAT} file", hint="make deciders with `tiankong tune`")
        try:
            return cls(name=str(data["name"]), method=str(data["method"]), labels=[str(x) for x in data["labels"]],
                       state=dict(data["state"]), words=[str(x) for x in data.get("words") or []],
                       base_model=data.get("base_model"), examples=dict(data.get("examples") or {}),
                       cv=dict(data.get("cv") or {}), params=dict(data.get("params") or {}),
                       task=str(data.get("task", "classify")), version=int(data.get("version", 0)),
                       created=str(data.get("created", "")), source=source)
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidDecider(f"the decider file is incomplete ({exc})", hint="tune it again") from None


def deciders_dir() -> Path:
    return paths.data_dir() / "deciders"


def check_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigError(f"invalid decider name {name!r}",
                          hint="use lower-case letters, digits, '.', '_' or '-' (at most 64), e.g. spam-v1")
    return name


def _versions(name: str) -> list[int]:
    folder = deciders_dir() / name
    found = [int(p.stem[1:]) for p in folder.glob("v*.json") if p.stem[1:].isdigit()] if folder.is_dir() else []
    return sorted(found)


def check_replaces(name: str, task: str, labels: list[str]) -> None:
    """A registered decider under a built-in's name replaces it for every caller (`tiankong guard`, `rerank`):
    it must decide the same thing (a classify decider named guard broke the default guard, named rerank the default
    rerank)."""
    if name not in builtin_names():
        return
    shipped = _read(BUILTIN_DIR / f"{name}.json", "builtin")
    if task != shipped.task or set(labels) != set(shipped.labels):
        raise ConfigError(f"{name!r} is the built-in {shipped.task} decider over {shipped.labels}, and a decider "
                          f"of that name replaces it for every caller: this one is a {task} decider over {labels}",
                          hint="choose another --name")


def save_decider(decider: Decider) -> Path:
    """Register ``decider`` as the next version of its name; returns the file written."""
    check_name(decider.name)
    check_replaces(decider.name, decider.task, decider.labels)
    folder = deciders_dir() / decider.name
    folder.mkdir(parents=True, exist_ok=True)
    decider.created = decider.created or datetime.now(UTC).isoformat(timespec="seconds")
    # written aside under a name of its own, then linked in as the next free version: two tunes of one name at
    # once took the same number, and the second's file replaced the first's (a link fails on a taken name)
    version = (_versions(decider.name) or [0])[-1] + 1
    fd, partial = tempfile.mkstemp(dir=folder, prefix=".v", suffix=".json.partial")
    os.fchmod(fd, 0o644)  # mkstemp's 0600 would keep a gateway run as another user from reading it, as before
    try:
        while True:
            decider.version = version
            with open(fd, "w", encoding="utf-8", closefd=False) as out:
                out.seek(0)
                out.truncate()
                out.write(json.dumps(decider.to_json(), ensure_ascii=False))
            target = folder / f"v{version}.json"
            try:
                os.link(partial, target)  # never a half-written decider under its name
                return target
            except FileExistsError:
                version += 1
    finally:
        os.close(fd)
        os.unlink(partial)


_LOADED: dict[tuple[str, int, int], Decider] = {}


def _read(path: Path, source: str) -> Decider:
    """Parse a decider file once per (path, size, mtime): batch items and requests reuse the parsed one."""
    try:
        stat = path.stat()
        key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
        if key not in _LOADED:
            _LOADED[key] = Decider.from_json(json.loads(path.read_text(encoding="utf-8")), source)
    except (OSError, ValueError) as exc:
        raise InvalidDecider(f"cannot read decider {path}: {exc}") from None
    return _LOADED[key]


def _builtin_at(name: str, version: int) -> Decider | None:
    """The shipped decider ``name`` when it is at ``version`` (``guard@1``, the name its answers and `deciders list`
    print), for a name the registry holds no such version of."""
    if name not in builtin_names():
        return None
    shipped = _read(BUILTIN_DIR / f"{name}.json", "builtin")
    return shipped if shipped.version == version else None


def builtin_names() -> list[str]:
    return sorted(p.stem for p in BUILTIN_DIR.glob("*.json"))


def known_names() -> list[str]:
    # a folder whose name no decider can have (made by hand) is not one: `deciders list` stopped on it
    registered = sorted(p.name for p in deciders_dir().iterdir() if _NAME.fullmatch(p.name) and _versions(p.name)) \
        if deciders_dir().is_dir() else []
    return sorted(set(registered) | set(builtin_names()))


def load_decider(ref: str) -> Decider:
    """A decider by name (newest version), ``name@N``, or the path of a decider file (not inside
    ``names_only()``, where anything but a registered name is :class:`NoSuchDecider`)."""
    if _NAMES_ONLY.get():
        return _load_named(ref)
    if not isinstance(ref, str) or not ref.strip():
        raise ConfigError("the decider name is empty", hint="see `tiankong deciders list`")
    if ref.endswith(".json") and Path(ref).is_file():
        return _read(Path(ref), "file")
    name, _, version = ref.partition("@")
    versions = _versions(name) if _NAME.match(name) else []
    if version:
        if version.isdigit() and int(version) not in versions and (shipped := _builtin_at(name, int(version))):
            return shipped
        if not version.isdigit() or int(version) not in versions:
            raise DeciderNotFound(ref, [f"{name}@{v}" for v in versions] or known_names())
        return _read(deciders_dir() / name / f"v{version}.json", "registry")
    if versions:
        return _read(deciders_dir() / name / f"v{versions[-1]}.json", "registry")
    if name in builtin_names():
        return _read(BUILTIN_DIR / f"{name}.json", "builtin")
    raise DeciderNotFound(ref, known_names())


def _load_named(ref: object) -> Decider:
    name, _, version = ref.partition("@") if isinstance(ref, str) else ("", "", "")
    if not _NAME.fullmatch(name) or (version and not (version.isdigit() and len(version) <= 9)):
        raise NoSuchDecider()
    try:
        if version:
            if int(version) not in _versions(name):
                if shipped := _builtin_at(name, int(version)):
                    return shipped
                raise NoSuchDecider()
            return _read(deciders_dir() / name / f"v{int(version)}.json", "registry")
        if versions := _versions(name):
            return _read(deciders_dir() / name / f"v{versions[-1]}.json", "registry")
        if name in builtin_names():
            return _read(BUILTIN_DIR / f"{name}.json", "builtin")
    except InvalidDecider:  # a broken registry file: said to the local user, not to a remote caller
        raise NoSuchDecider() from None
    raise NoSuchDecider()


def list_deciders(broken: Callable[[str, InvalidDecider], None] | None = None) -> list[Decider]:
    """Every decider; one whose file cannot be read is left out and handed to ``broken`` (else raised): one
    corrupt file stopped the whole listing."""
    found = []
    for name in known_names():
        try:
            found.append(load_decider(name))
        except InvalidDecider as exc:
            if broken is None:
                raise
            broken(name, exc)
    return found


def remove_decider(name: str) -> list[Path]:
    """Delete every registered version of ``name`` (built-in deciders cannot be removed), and the parts only those
    versions read: a ``setfit`` decider's fine-tuned model, a ``lora`` decider's adapter — each only when the
    registry holds it under exactly the name and sha256 the decider recorded (never a model or adapter the user
    registered under a similar name), and kept while another decider's file names it or cannot be read. Returns
    every path removed: the version files, then the parts' files."""
    if "@" in name:  # the suggestion was the bare name, which removes every version
        raise ConfigError(f"rm removes every version of a decider; removing one version ({name}) is not supported",
                          hint=f"`tiankong deciders rm {name.partition('@')[0]}` removes them all")
    versions = _versions(name) if _NAME.match(name) else []
    if not versions:
        if name in builtin_names():
            raise ConfigError(f"{name!r} is built in and cannot be removed",
                              hint="register your own decider of that name to replace it")
        raise DeciderNotFound(name, known_names())
    removed = [deciders_dir() / name / f"v{v}.json" for v in versions]
    parts = set().union(*(_parts(path) or set() for path in removed))
    for path in removed:
        path.unlink()
    (deciders_dir() / name).rmdir() if not any((deciders_dir() / name).iterdir()) else None
    others = [_parts(deciders_dir() / other / f"v{v}.json") for other in known_names() for v in _versions(other)]
    if any(found is None for found in others):  # a decider we cannot read might need them: keep every part
        return removed
    still = {(key, part) for found in others if found for key, part, _ in found}
    return removed + [gone for key, part, sha in sorted(parts) if (key, part) not in still
                      and (gone := _remove_part(key, part, sha)) is not None]


#: what a decider's state names as its own part (with the sha256 it recorded), and the prefix its name has
_PART_KEYS = {"part": ("part_sha256", "setfit-"), "adapter": ("adapter_sha256", "decider-")}


def _parts(path: Path) -> set[tuple[str, str, str]] | None:
    """(state key, registry name, recorded sha256) of the parts a decider file names; None when it cannot be read."""
    try:
        state = json.loads(path.read_text(encoding="utf-8")).get("state")
        state = state if isinstance(state, dict) else {}
    except (OSError, ValueError, AttributeError):
        return None
    return {(key, value, str(state.get(sha_key) or "")) for key, (sha_key, prefix) in _PART_KEYS.items()
            if isinstance(value := state.get(key), str) and value.startswith(prefix)}


def _remove_part(key: str, name: str, sha256: str) -> Path | None:
    """Remove a decider's part from its registry when it is exactly the file the decider recorded; None otherwise
    (gone already, another file under that name, or no sha256 recorded)."""
    try:
        if key == "part":
            from ..models.registry import remove_model, resolve

            model = resolve(name)
            if not sha256 or model.name != name or not model.installed or model.sha256 != sha256:
                return None
            return remove_model(name).path
        from ..lora.registry import remove_adapter, resolve_adapter

        adapter = resolve_adapter(name)
        if not sha256 or adapter.name != name or adapter.sha256 != sha256:
            return None
        return remove_adapter(name).path
    except ConfigError:  # not installed (ModelNotFound, AdapterNotFound): nothing to remove
        return None
