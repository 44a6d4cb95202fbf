"""Where tiankong keeps things: models in the data dir, engine builds and downloads in the cache dir.

Both honour an override (``TIANKONG_DATA_DIR``, ``TIANKONG_CACHE_DIR``) and otherwise follow the
platform convention (``XDG_DATA_HOME`` / ``XDG_CACHE_HOME`` on Linux).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import platformdirs

from .errors import ConfigError


def data_dir() -> Path:
    override = os.environ.get("TIANKONG_DATA_DIR")
    return Path(override) if override else Path(platformdirs.user_data_dir("tiankong"))


def config_file() -> Path:
    """The config file ``tiankong serve`` reads when no ``--config`` is given: ``TIANKONG_CONFIG`` (which must
    name a file), else ``config.toml`` in the platform's config dir (``XDG_CONFIG_HOME``; used only if it exists)."""
    override = os.environ.get("TIANKONG_CONFIG")
    return Path(override) if override else Path(platformdirs.user_config_dir("tiankong")) / "config.toml"


def default_model(given: str | None = None) -> str | None:
    """``given``, else ``TIANKONG_MODEL`` (None: the caller's own default)."""
    return given or os.environ.get("TIANKONG_MODEL") or None


def cache_dir() -> Path:
    override = os.environ.get("TIANKONG_CACHE_DIR")
    return Path(override) if override else Path(platformdirs.user_cache_dir("tiankong"))


def models_dir() -> Path:
    return data_dir() / "models"


def engine_cache_dir() -> Path:
    return cache_dir() / "engine"


def downloads_dir() -> Path:
    return cache_dir() / "downloads"


def logs_dir() -> Path:
    return cache_dir() / "logs"


def check_output(path: str | Path, what: str = "--output") -> None:
    """An output file can be written at ``path`` (checked before any work: a run must not fail at its end with an
    OS error) — ``ConfigError`` naming the path and what to do otherwise. Its folder is made if missing."""
    from .errors import ConfigError

    target = Path(path)
    if target.is_dir():
        raise ConfigError(f"{what} {target} is a folder", hint=f"give {what} a file path, e.g. {target / 'out.jsonl'}")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot make the folder of {what} {target}: {exc.strerror or exc}",
                          hint=f"choose a writable {what} path") from None
    try:  # a file made and removed beside it: what the writers do (permissions, read-only or odd file systems)
        fd, probe = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".probe", dir=target.parent)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ConfigError(f"cannot write {what} {target}: {exc.strerror or exc}",
                          hint=f"choose a writable {what} path") from None
    if target.exists() and not os.access(target, os.W_OK):
        raise ConfigError(f"cannot write {what} {target}: permission denied", hint=f"choose a writable {what} path")


def check_distinct(outputs: dict[str, str | Path | None], inputs: dict[str, str | Path | None]) -> None:
    """No output is an input or another output (``what → path``; None: not given) — ``ConfigError`` naming both.
    A report written over the run file it reads, or a Markdown table over the data, destroyed them without a word."""
    from .errors import ConfigError

    def same(a: Path, b: Path) -> bool:
        try:
            return a.resolve() == b.resolve() or (a.exists() and b.exists() and os.path.samefile(a, b))
        except OSError:
            return False

    seen: list[tuple[str, Path]] = [(what, Path(p)) for what, p in inputs.items() if p is not None]
    for what, given in outputs.items():
        if given is None:
            continue
        for other, path in seen:
            if same(Path(given), path):
                raise ConfigError(f"{what} {given} is also {other}: writing it would destroy that",
                                  hint=f"give {what} another path")
        seen.append((what, Path(given)))


def check_folder(path: str | Path, what: str = "--out") -> Path:
    """An output folder can be made and written at ``path`` (checked before any work, as :func:`check_output`),
    without making it (a refused run leaves nothing behind): a file there, or a folder above it that cannot be
    written, is a ``ConfigError`` naming ``what``."""
    from .errors import ConfigError

    folder = Path(path).expanduser()
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"{what} {folder} is a file, not a folder", hint=f"give {what} a folder path")
    existing = folder
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(f"{what} {folder} cannot be made: {existing} is a file", hint=f"choose another {what}")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"cannot write in {what} {existing}: permission denied",
                          hint=f"choose a writable {what} folder")
    return folder


@contextlib.contextmanager
def waiting_lock(path: Path, waiting: Callable[[], None]) -> Iterator[None]:
    """An exclusive lock on the file ``path`` (made if missing) for the block; when another process holds it,
    ``waiting()`` says so once and the lock is waited for (a second build or pull waited without a word)."""
    with path.open("w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            waiting()
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def installation_secret(path: Path) -> bytes:
    """This installation's random secret kept in ``path`` (made once, 0600, whole: written aside and linked in, so
    a second process never reads a half-written one)."""
    try:
        text = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".secret-")
        try:
            with os.fdopen(fd, "w", encoding="ascii") as out:  # mkstemp makes it 0600
                out.write(os.urandom(32).hex())
                out.flush()
                os.fsync(out.fileno())
            with contextlib.suppress(FileExistsError):  # another process linked its own first: take that one
                os.link(tmp, path)
        finally:
            os.unlink(tmp)
        return installation_secret(path)
    path.chmod(0o600)
    try:
        secret = bytes.fromhex(text)
    except ValueError:
        secret = b""
    if len(secret) < 16:
        raise ConfigError(f"{path} does not hold a secret", hint="remove it (what was made with it cannot be "
                          "matched again)")
    return secret
