"""Find or build llama-server.

Order: ``TIANKONG_LLAMA_SERVER`` / an explicit path; a previous managed build in the user cache;
otherwise :func:`install_engine` builds it from the llama.cpp source vendored in the PyPI sdist
``llama-cpp-python==0.3.36``.

A managed build lives in ``<cache>/engine/<key>/`` where the key hashes the source version, the cmake
flags and the CPU features (a ``-march=native`` build from another CPU could die with SIGILL). It is
built in a temporary directory, checked by running ``--version``, recorded in ``build.json`` with the
sha256 of every binary, and only then renamed into place: a killed build never becomes visible, and a
binary that no longer matches its recorded hash is never trusted.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .. import paths
from ..errors import EngineBuildError, EngineNotFound
from ..progress import run_with_percent
from .cpu import cpu_features

SOURCE_PACKAGE = "llama-cpp-python"
SOURCE_VERSION = "0.3.36"
TARGETS = ("llama-server", "llama-bench", "ggml-rpc-server")
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DGGML_NATIVE=ON",
    "-DGGML_RPC=ON",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_BUILD_UI=OFF",
)
ENV_VAR = "TIANKONG_LLAMA_SERVER"
Log = Callable[[str], None]


@dataclass
class EngineBinary:
    """A llama-server binary and how it was obtained."""

    path: Path
    source: str  # "env", "explicit" or "managed"
    version: str = ""
    commit: str = ""
    build_dir: Path | None = None
    cpu_features: list[str] = field(default_factory=list)
    cmake_flags: list[str] = field(default_factory=list)

    def sibling(self, name: str) -> Path | None:
        """Another binary from the same build (``llama-bench``, ``ggml-rpc-server``), if present."""
        candidate = self.path.parent / name
        return candidate if candidate.exists() else None

    def to_json(self) -> dict[str, object]:
        data = asdict(self)
        data["path"] = str(self.path)
        data["build_dir"] = str(self.build_dir) if self.build_dir else None
        for name in TARGETS[1:]:
            found = self.sibling(name)
            data[name.replace("-", "_")] = str(found) if found else None
        return data


def build_key(features: list[str] | None = None) -> str:
    """Hash of what makes a build reusable: source version, flags, machine, CPU features."""
    material = json.dumps(
        {
            "source": f"{SOURCE_PACKAGE}=={SOURCE_VERSION}",
            "flags": CMAKE_FLAGS,
            "targets": TARGETS,
            "machine": platform.machine(),
            "cpu": cpu_features() if features is None else sorted(features),
        },
        sort_keys=True,
    )
    return f"{SOURCE_VERSION}-{hashlib.sha256(material.encode()).hexdigest()[:16]}"


def managed_dir() -> Path:
    return paths.engine_cache_dir() / build_key()


def locate_engine(explicit: str | Path | None = None) -> EngineBinary:
    """The llama-server to use, or ``EngineNotFound`` saying how to get one."""
    if explicit:
        return _checked(Path(explicit), "explicit")
    env = os.environ.get(ENV_VAR)
    if env:
        return _checked(Path(env), "env")
    found = load_managed(managed_dir())
    if found is not None:
        return found
    raise EngineNotFound(
        "no llama-server found",
        hint=f"run `tiankong engine install` (builds it, 6-9 min on 2 cores) or set {ENV_VAR}=/path/to/llama-server",
    )


def _checked(path: Path, source: str) -> EngineBinary:
    if not path.is_file() or not os.access(path, os.X_OK):
        where = f"${ENV_VAR}" if source == "env" else "--llama-server"
        raise EngineNotFound(f"{where} points to {path}, which is not an executable file", hint="fix the path")
    version, commit = read_version(path)
    return EngineBinary(path=path, source=source, version=version, commit=commit)


def read_version(binary: Path) -> tuple[str, str]:
    """``(build number, commit)`` as printed by ``llama-server --version``."""
    try:
        proc = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EngineNotFound(
            f"{binary} does not run: {exc}", hint="rebuild with `tiankong engine install --force`"
        ) from None
    text = proc.stdout + proc.stderr
    match = re.search(r"version:\s*(\S+)\s*\((?:build\s+\d+,\s*)?(?:commit\s+)?([0-9a-f]+)\)", text)
    if proc.returncode != 0 or not match:
        raise EngineNotFound(
            f"{binary} --version failed (exit {proc.returncode})",
            hint="this is not a working llama-server; rebuild with `tiankong engine install --force`",
        )
    return match.group(1), match.group(2)


def load_managed(directory: Path) -> EngineBinary | None:
    """A completed managed build whose binaries still match their recorded sha256, else None."""
    manifest = directory / "build.json"
    if not manifest.is_file():
        return None
    try:
        data = json.loads(manifest.read_text())
        for name, digest in data["sha256"].items():
            if _sha256(directory / "bin" / name) != digest:
                return None
        return EngineBinary(
            path=directory / "bin" / "llama-server",
            source="managed",
            version=data["version"],
            commit=data["commit"],
            build_dir=directory,
            cpu_features=data["cpu_features"],
            cmake_flags=data["cmake_flags"],
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def install_engine(force: bool = False, log: Log = print, jobs: int | None = None) -> EngineBinary:
    """Build (or reuse) the managed llama-server. Atomic: nothing is visible until it works."""
    target = managed_dir()
    if not force:
        existing = load_managed(target)
        if existing is not None:
            log(f"engine already built: {existing.path}")
            return existing
    _check_toolchain()
    target.parent.mkdir(parents=True, exist_ok=True)
    with _install_lock(target.parent / ".install.lock"):
        for stale in target.parent.glob("*.tmp-*"):  # left by a killed build; we hold the lock
            shutil.rmtree(stale, ignore_errors=True)
        with tempfile.TemporaryDirectory(prefix=f"{target.name}.tmp-", dir=target.parent) as tmp:
            work = Path(tmp)
            source = _fetch_source(work, log)
            staged = _build(source, work, log, jobs or os.cpu_count() or 2)
            if target.exists():
                shutil.rmtree(target)
            os.replace(staged, target)
    built = load_managed(target)
    if built is None:  # pragma: no cover - we just wrote it
        raise EngineBuildError(f"build at {target} did not verify after install")
    log(f"engine ready: {built.path} (llama.cpp {built.version}, {built.commit})")
    return built


@contextlib.contextmanager
def _install_lock(path: Path) -> Iterator[None]:
    """One build at a time per cache (a second `engine install` waits for the first)."""
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _check_toolchain() -> None:
    missing = [tool for tool in ("cmake", "c++", "cc", "make") if shutil.which(tool) is None]
    if missing:
        raise EngineBuildError(
            f"cannot build llama-server: missing {', '.join(missing)}",
            hint="install a C/C++ toolchain and cmake (Debian/Ubuntu: apt-get install build-essential cmake), "
            f"or point {ENV_VAR} at an existing llama-server",
        )


def _fetch_source(work: Path, log: Log) -> Path:
    sdists = paths.downloads_dir() / "sdist"
    sdists.mkdir(parents=True, exist_ok=True)
    archive = sdists / f"llama_cpp_python-{SOURCE_VERSION}.tar.gz"
    if not _valid_tar(archive):
        archive.unlink(missing_ok=True)
        log(f"downloading the {SOURCE_PACKAGE}=={SOURCE_VERSION} sdist (llama.cpp source) …")
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", SOURCE_PACKAGE,
               f"{SOURCE_PACKAGE}=={SOURCE_VERSION}", "-d", str(sdists)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if not _valid_tar(archive):
            raise EngineBuildError(
                f"could not download {SOURCE_PACKAGE}=={SOURCE_VERSION}",
                hint="check that pip can reach the package index",
                log_tail=_tail(proc.stdout + proc.stderr),
            )
    log("unpacking llama.cpp source …")
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if "/vendor/llama.cpp/" in m.name + "/" and _safe_member(m)]
        if hasattr(tarfile, "data_filter"):  # Python ≥ 3.11.4
            tar.extractall(work / "src", members=members, filter="data")
        else:  # pragma: no cover - older 3.11 patch releases; members were checked above
            tar.extractall(work / "src", members=members)
    source = work / "src" / f"llama_cpp_python-{SOURCE_VERSION}" / "vendor" / "llama.cpp"
    if not (source / "CMakeLists.txt").is_file():
        raise EngineBuildError(f"the sdist has no vendor/llama.cpp (looked in {source})")
    return source


def _safe_member(member: tarfile.TarInfo) -> bool:
    """No absolute paths, no '..', no links pointing outside, no devices."""
    name = Path(member.name)
    if name.is_absolute() or ".." in name.parts or member.isdev():
        return False
    return not ((member.issym() or member.islnk()) and (member.linkname.startswith("/") or ".." in member.linkname))


def _valid_tar(path: Path) -> bool:
    if not path.is_file():
        return False
    try:
        with tarfile.open(path) as tar:
            for _ in tar:
                pass
        return True
    except (tarfile.TarError, OSError, EOFError):
        return False


def _build(source: Path, work: Path, log: Log, jobs: int) -> Path:
    build = work / "build"
    started = time.monotonic()
    log(f"configuring ({' '.join(CMAKE_FLAGS)}) …")
    _run(["cmake", "-S", str(source), "-B", str(build), *CMAKE_FLAGS], "cmake configure")
    log(f"building {', '.join(TARGETS)} with {jobs} jobs (6-9 min on 2 cores) …")
    _run(["cmake", "--build", str(build), "--config", "Release", "-j", str(jobs), "--target", *TARGETS],
         "cmake build", log)
    staged = work / "staged"
    (staged / "bin").mkdir(parents=True)
    digests = {}
    for name in TARGETS:
        built = build / "bin" / name
        if not built.is_file():
            raise EngineBuildError(f"the build finished but produced no {name}")
        shutil.copy2(built, staged / "bin" / name)
        digests[name] = _sha256(staged / "bin" / name)
    version, commit = read_version(staged / "bin" / "llama-server")
    manifest = {
        "version": version, "commit": commit, "source": f"{SOURCE_PACKAGE}=={SOURCE_VERSION}",
        "cmake_flags": list(CMAKE_FLAGS), "cpu_features": cpu_features(), "sha256": digests,
        "build_seconds": round(time.monotonic() - started, 1),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (staged / "build.json").write_text(json.dumps(manifest, indent=2))
    return staged


def _run(cmd: list[str], what: str, log: Log | None = None) -> None:
    proc = run_with_percent(cmd, "building", log) if log is not None else \
        subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise EngineBuildError(
            f"{what} failed (exit {proc.returncode})",
            hint="see the log tail; a missing compiler or cmake is the usual cause",
            log_tail=_tail(proc.stdout + proc.stderr),
        )


def _tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])
