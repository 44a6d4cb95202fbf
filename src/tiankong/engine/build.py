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

import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .. import paths
from ..errors import EngineBuildError, EngineNotFound
from ..progress import run_with_percent
from .cpu import cpu_features
from .rungs import Rung, amx_rung, ladder

SOURCE_PACKAGE = "llama-cpp-python"
SOURCE_VERSION = "0.3.36"
TARGETS = ("llama-server", "llama-bench", "ggml-rpc-server")
ENV_VAR = "TIANKONG_LLAMA_SERVER"
#: a llama.cpp source tree to build instead of the one in the pinned sdist (offline builds, a patched source)
SOURCE_ENV_VAR = "TIANKONG_ENGINE_SOURCE"
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
    rung: str = ""
    amx: bool = False
    smoke: dict[str, object] = field(default_factory=dict)

    def sibling(self, name: str) -> Path | None:
        """Another binary from the same build (``llama-bench``, ``ggml-rpc-server``), if present."""
        candidate = self.path.parent / name
        return candidate if candidate.exists() else None

    def to_json(self) -> dict[str, object]:
        data = asdict(self)
        # DESIGN.md's contract: `smoke` is "ok" or the failure (it was the result object); the object is `smoke_test`
        status, detail = self.smoke.get("status"), self.smoke.get("detail")
        data["smoke"] = "ok" if status == "ok" else f"{status}: {detail}" if status else "not run"
        data["smoke_test"] = dict(self.smoke)
        data["path"] = str(self.path)
        data["build_dir"] = str(self.build_dir) if self.build_dir else None
        for name in TARGETS[1:]:
            found = self.sibling(name)
            data[name.replace("-", "_")] = str(found) if found else None
        return data


def build_key(features: list[str] | None = None) -> str:
    """Hash of what makes a build reusable: source version, the ladder's flags, machine, CPU features."""
    features = cpu_features() if features is None else sorted(features)
    material = json.dumps(
        {
            "source": os.environ.get(SOURCE_ENV_VAR) or f"{SOURCE_PACKAGE}=={SOURCE_VERSION}",
            "rungs": [[rung.name, *rung.flags] for rung in (*ladder(features), amx_rung())],
            "targets": TARGETS,
            "machine": platform.machine(),
            "cpu": features,
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
    # absolute: Path("./llama-server") is "llama-server", which a subprocess looks up on $PATH, not here
    path = path.expanduser().absolute()
    if not path.is_file() or not os.access(path, os.X_OK):
        where = f"${ENV_VAR}" if source == "env" else "--llama-server (llama_server=)"
        raise EngineNotFound(f"{where} points to {path}, which is not an executable file", hint="fix the path")
    # a rebuild cannot help a binary the user named: it takes precedence over the managed build
    fix = f"fix or unset ${ENV_VAR}" if source == "env" else "fix --llama-server"
    version, commit = read_version(path, fix=f"{fix} (`tiankong engine install` builds one)")
    return EngineBinary(path=path, source=source, version=version, commit=commit)


def read_version(binary: Path, fix: str = "rebuild with `tiankong engine install --force`") -> tuple[str, str]:
    """``(build number, commit)`` as printed by ``llama-server --version``; ``fix`` is what the error says to do."""
    try:
        proc = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EngineNotFound(
            f"{binary} does not run: {exc}", hint=fix
        ) from None
    text = proc.stdout + proc.stderr
    match = re.search(r"version:\s*(\S+)\s*\((?:build\s+\d+,\s*)?(?:commit\s+)?([0-9a-f]+)\)", text)
    if proc.returncode != 0 or not match:
        raise EngineNotFound(
            f"{binary} --version failed (exit {proc.returncode})",
            hint=f"this is not a working llama-server; {fix}",
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
            rung=str(data.get("rung", "")),
            amx=bool(data.get("amx", False)),
            smoke=dict(data.get("smoke") or {}),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def check_toolchain() -> None:
    missing = [tool for tool in ("cmake", "c++", "cc", "make") if shutil.which(tool) is None]
    if missing:
        raise EngineBuildError(
            f"cannot build llama-server: missing {', '.join(missing)}",
            hint="install a C/C++ toolchain and cmake (Debian/Ubuntu: apt-get install build-essential cmake), "
            f"or point {ENV_VAR} at an existing llama-server",
        )


def fetch_source(work: Path, log: Log) -> Path:
    """The llama.cpp source tree to build: ``$TIANKONG_ENGINE_SOURCE`` or the pinned sdist's vendored copy."""
    override = os.environ.get(SOURCE_ENV_VAR)
    if override:
        if not (Path(override) / "CMakeLists.txt").is_file():
            raise EngineBuildError(f"${SOURCE_ENV_VAR}={override} has no CMakeLists.txt",
                                   hint="point it at a llama.cpp source tree, or unset it")
        log(f"building the llama.cpp source at ${SOURCE_ENV_VAR}={override}")
        return Path(override)
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


def compile_rung(source: Path, work: Path, log: Log, jobs: int, rung: Rung) -> Path:
    """Configure and build one rung in ``work``; the binaries and a ``build.json`` (no smoke result yet)."""
    build = work / "build"
    started = time.monotonic()
    log(f"rung {rung.name}: configuring ({' '.join(rung.flags)}) …")
    _run(["cmake", "-S", str(source), "-B", str(build), *rung.flags], "cmake configure")
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
        "cmake_flags": list(rung.flags), "rung": rung.name, "amx": rung.amx, "cpu_features": cpu_features(),
        "sha256": digests,
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
            hint="a missing compiler or cmake is the usual cause",
            log_tail=_tail(proc.stdout + proc.stderr),
        )


def _tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])
