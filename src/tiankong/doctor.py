"""``doctor``: what is installed, what this machine has, and what to fix."""

from __future__ import annotations

import os
import platform
import shutil
import sys
from dataclasses import dataclass
from typing import Any

from . import paths
from .config import load_config
from .engine.build import ENV_VAR, EngineBinary, locate_engine, managed_dir
from .engine.cpu import cpu_features, cpu_model
from .engine.install import record_smoke
from .engine.smoke import crash_diagnosis, smoke_test
from .errors import TiankongError
from .models import DEFAULT_MODEL, TEST_MODEL, list_models, resolve_installed


@dataclass
class Finding:
    topic: str
    ok: bool
    detail: str
    fix: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "ok": self.ok, "detail": self.detail, "fix": self.fix}


def _mem_available_bytes() -> int:
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def diagnose() -> list[Finding]:
    findings = [Finding("python", sys.version_info >= (3, 11), f"{platform.python_version()} at {sys.executable}",
                        "use Python 3.11 or newer")]
    try:
        engine = locate_engine()
        findings.append(Finding("engine", True, f"{engine.path} (llama.cpp {engine.version}, {engine.source})"))
        findings.append(_smoke_finding(engine))
    except TiankongError as exc:
        fix = f"fix or unset {ENV_VAR}" if os.environ.get(ENV_VAR) else \
            f"run `tiankong engine install` or set {ENV_VAR}"  # the variable wins over a build: its value is wrong
        findings.append(Finding("engine", False, exc.message, fix))
    tools = [tool for tool in ("cmake", "c++", "make") if shutil.which(tool) is None]
    findings.append(Finding("build tools", not tools, "cmake, c++, make present" if not tools else
                            f"missing {', '.join(tools)}", "apt-get install build-essential cmake"))
    features = cpu_features()
    findings.append(Finding("cpu", True, f"{cpu_model()}; {os.cpu_count()} CPUs; {' '.join(features) or 'unknown'}"))
    mem = _mem_available_bytes()
    findings.append(Finding("memory", mem == 0 or mem > 1 << 30, f"{mem / 2**30:.1f} GiB available",
                            "free memory or use a smaller model / context"))
    findings.extend(_model_findings())
    for label, directory in (("data dir", paths.data_dir()), ("cache dir", paths.cache_dir())):
        free = shutil.disk_usage(_existing_parent(directory)).free
        findings.append(Finding(label, free > 2 << 30, f"{directory} ({free / 2**30:.0f} GiB free)",
                                "free disk space: models and the engine build need about 3 GiB"))
    findings.append(Finding("engine cache key", True, str(managed_dir())))
    return findings


def _model_findings() -> list[Finding]:
    """The models this user's commands would load must be installed: TIANKONG_MODEL (else the built-in default)
    and the models the config file gives ``serve``. The test model only ``make test`` needs: reported, never a
    fix (a user of another model was told to fix the default model's absence, and doctor exited 1)."""
    installed = {record.name: record for record in list_models() if record.installed}
    wanted = {paths.default_model() or DEFAULT_MODEL: "the commands' model" + (
        " (TIANKONG_MODEL)" if paths.default_model() else "")}
    findings: list[Finding] = []
    config = paths.config_file()
    if config.is_file():
        try:
            settings = load_config(config)
        except TiankongError as exc:
            findings.append(Finding("config", False, exc.message, exc.hint or "see docs/config.md"))
        else:
            findings.append(Finding("config", True, str(config)))
            for name in [settings.engine.model, *(m.model for m in settings.pool.models if m.model)]:
                wanted.setdefault(name, f"serve's model ({config.name})")
    for name, why in wanted.items():
        try:  # as the commands read it: a name without its ":quant", a unique prefix, a .gguf path (~ too)
            record = resolve_installed(name)
        except TiankongError as exc:
            findings.append(Finding(f"model {name}", False, f"{exc.message}; {why}",
                                    exc.hint or f"run `tiankong models pull {name}`"))
        else:
            findings.append(Finding(f"model {name}", True, f"{record.path}; {why}"))
    if TEST_MODEL not in wanted:
        findings.append(Finding(f"model {TEST_MODEL}", True, str(installed[TEST_MODEL].path)
                                if TEST_MODEL in installed else "not installed (only `make test` uses it)"))
    return findings


def _smoke_finding(engine: EngineBinary) -> Finding:
    """Run the smoke test on the engine in use; report its rung, AMX, flags and the result."""
    result = record_smoke(engine) if engine.source == "managed" else smoke_test(engine.path)
    build = (f"rung {engine.rung or '?'}, AMX {'on' if engine.amx else 'off'}, flags {' '.join(engine.cmake_flags)}"
             if engine.source == "managed" else f"{engine.source} binary")
    died = f" ({result.signal}: {crash_diagnosis(result.returncode, engine.cmake_flags)})" if result.signal else ""
    return Finding("engine smoke test", result.status != "failed",
                   f"{result.status}: {result.detail}{died}; {build}",
                   "rebuild it: `tiankong engine install --rebuild`" if engine.source == "managed"
                   else f"point {ENV_VAR} at a build that works, or unset it to use the managed build")


def _existing_parent(path: Any) -> Any:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path
