"""The smoke test every managed build ends with, and the diagnosis of an engine that dies by a signal.

A build that compiles can still be unable to answer: ggml's AMX path compiled by GCC ≤ 12 segfaults on the
first matrix multiply, inside model loading (llama.cpp #20824). So a build is only recorded as good once its
``llama-server`` has loaded the smallest installed model, answered one completion and one ``/embeddings``
call, and exited cleanly when asked to stop. This module starts that process itself rather than through
:class:`~tiankong.engine.process.EngineProcess`: it must see a signal death as data, with no supervisor
restarting it, and it must run before any build is known to be good.
"""

from __future__ import annotations

import json
import signal
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

from ..models.registry import installed_models
from .cpu import cpu_features
from .rungs import AMX_CPU_FLAGS
from .spawn import SPAWNER, die_with_parent

START_TIMEOUT_S = 120.0
REQUEST_TIMEOUT_S = 60.0
FATAL_SIGNALS = {signal.SIGSEGV, signal.SIGILL, signal.SIGBUS, signal.SIGFPE, signal.SIGABRT}
#: CPU features that a crash by signal most often involves (the ISA extensions a native build uses)
CRASH_FEATURES = (*AMX_CPU_FLAGS, "avx512f", "avx512_vnni", "avx512_bf16", "avx_vnni", "avx2", "sve", "i8mm")


@dataclass
class SmokeResult:
    """What the smoke test saw: ``status`` is ok, failed or skipped (no model installed to try)."""

    status: str
    detail: str
    model: str = ""
    signal: str = ""
    returncode: int | None = None
    system_info: str = ""
    seconds: float = 0.0
    log_tail: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def signal_name(returncode: int | None) -> str:
    """``SIGSEGV`` for a process killed by signal 11 (return code -11), else an empty string."""
    if returncode is None or returncode >= 0:
        return ""
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def crash_diagnosis(returncode: int | None, cmake_flags: list[str] | None = None) -> str:
    """One sentence naming the signal, the CPU features involved and the build flags, or '' for a plain exit."""
    name = signal_name(returncode)
    if not name:
        return ""
    features = [f for f in CRASH_FEATURES if f in cpu_features()]
    amx = [f for f in features if f in AMX_CPU_FLAGS]
    built = " ".join(cmake_flags or []) or "unknown flags"
    why = {
        "SIGSEGV": "a segmentation fault in the engine itself",
        "SIGILL": "an instruction this CPU does not have (a build made for another CPU?)",
        "SIGBUS": "a bus error (a truncated or changed model file, or a full disk?)",
    }.get(name, "a fatal signal")
    text = f"llama-server was killed by {name}: {why}; CPU features involved: {' '.join(features) or 'none known'}"
    if amx and "-mno-amx-int8" not in built:
        text += " (this CPU has AMX and the build did not turn it off: ggml's AMX path crashes with GCC ≤ 12)"
    return f"{text}; built with {built}"


def managed_flags(binary: Path) -> list[str]:
    """The CMake flags recorded next to a managed build's binary (empty for any other binary)."""
    try:
        flags = json.loads((binary.parent.parent / "build.json").read_text()).get("cmake_flags", [])
    except (OSError, ValueError, AttributeError):
        return []
    return [str(flag) for flag in flags] if isinstance(flags, list) else []


def smallest_model() -> tuple[str, Path] | None:
    """The smallest installed chat model (name, path), or None when none is installed (a retrieval part cannot
    answer the completion the smoke test asks)."""
    records = sorted((r for r in installed_models() if r.catalog is None or r.catalog.kind == "chat"),
                     key=lambda record: record.bytes)
    return (records[0].name, records[0].path) if records else None


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def smoke_test(binary: Path, model: tuple[str, Path] | None = None, timeout_s: float = START_TIMEOUT_S) -> SmokeResult:
    """Start ``binary`` on the smallest installed model, ask one completion and one embedding, stop it."""
    model = model or smallest_model()
    if model is None:
        return SmokeResult("skipped", "no model is installed to try the engine with "
                           "(run `tiankong models pull smollm2-135m-instruct`, then `tiankong doctor`)")
    name, path = model
    port = _free_port()
    argv = [str(binary), "-m", str(path), "--host", "127.0.0.1", "--port", str(port), "-c", "512", "-np", "1",
            "-t", "2", "--embeddings", "--pooling", "mean", "-lv", "4"]  # -lv 4: the system_info line
    started = time.monotonic()
    with tempfile.TemporaryFile() as log:
        # the spawner and the parent-death signal, as every supervised engine: a SIGTERM to `doctor` or `engine
        # install` mid-test left this llama-server running, owned by init (found by a read-only sweep)
        proc = SPAWNER.popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             preexec_fn=die_with_parent)
        try:
            problem = _exercise(proc, f"http://127.0.0.1:{port}", timeout_s)
        finally:
            code = _stop(proc)
        log.seek(0)
        text = log.read().decode("utf-8", "replace")
    if not problem and code not in (0, -signal.SIGTERM):
        problem = f"llama-server did not exit cleanly when stopped (exit {code})"
    result = SmokeResult(
        status="failed" if problem else "ok",
        detail=problem or "one completion and one embedding answered; exited cleanly",
        model=name, signal=signal_name(code) if code is not None and code < 0 and code != -signal.SIGTERM else "",
        returncode=code, system_info=_system_info(text), seconds=round(time.monotonic() - started, 2),
        log_tail="" if not problem else "\n".join(text.strip().splitlines()[-20:]),
    )
    return result


def _exercise(proc: subprocess.Popen[bytes], url: str, timeout_s: float) -> str:
    """'' when the engine answered both calls, else what went wrong."""
    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=REQUEST_TIMEOUT_S) as http:
        while True:
            code: int | None = proc.poll()
            if code is not None:
                return _died(code, "while loading the model")
            try:
                if http.get(f"{url}/health", timeout=2.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                return f"llama-server was not healthy within {timeout_s:.0f} s"
            time.sleep(0.2)
        for what, path, body in (
            ("completion", "/completion", {"prompt": "Hello", "n_predict": 4, "temperature": 0}),
            ("embedding", "/embeddings", {"content": "Hello"}),
        ):
            try:
                reply = http.post(f"{url}{path}", json=body)
            except httpx.HTTPError as exc:
                try:  # a reset connection is usually the engine dying: give its exit a moment to land
                    code = proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    code = None
                return _died(code, f"answering the {what}") if code is not None else f"{what} failed: {exc}"
            if reply.status_code != 200:
                return f"the {what} call answered HTTP {reply.status_code}: {reply.text[:200]}"
    return ""


def _died(code: int | None, when: str) -> str:
    name = signal_name(code)
    return f"llama-server died by {name} {when}" if name else f"llama-server exited with code {code} {when}"


def _stop(proc: subprocess.Popen[bytes]) -> int | None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def _system_info(log: str) -> str:
    for line in log.splitlines():
        if "system_info:" in line:
            return line.split("system_info:", 1)[1].strip()
    return ""
