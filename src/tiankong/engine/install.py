"""``tiankong engine install``: build llama-server up the ladder, keep the first rung that passes the smoke test.

The flow (one build at a time per cache, nothing visible until it worked):

1. a cached build under this machine's key is reused; one whose smoke test never ran is tested first;
2. otherwise each rung of :func:`~tiankong.engine.rungs.ladder` is compiled and smoke-tested in turn; a rung
   that fails (a crash by signal, no answer) is recorded with why, and the next is tried; when every rung fails
   the install fails with one line and the last log tail;
3. ``amx=True`` also builds ``native-amx``, smoke-tests it and measures both with ``llama-bench`` on the
   installed model; the faster one that passes is kept and both figures go into ``build.json``.

Builds cached under an older key that were made with AMX are removed with a one-line notice.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from ..errors import EngineBuildError
from ..paths import waiting_lock
from .build import EngineBinary, check_toolchain, compile_rung, fetch_source, load_managed, managed_dir
from .cpu import cpu_features
from .rungs import Rung, amx_rung, has_amx, ladder
from .smoke import SmokeResult, smallest_model, smoke_test

Log = Callable[[str], None]


def install_engine(force: bool = False, log: Log = print, jobs: int | None = None, amx: bool = False) -> EngineBinary:
    """Build (or reuse) the managed llama-server; see the module docstring for the ladder."""
    target = managed_dir()
    if amx and not has_amx(cpu_features()):
        raise EngineBuildError("this CPU has no AMX (amx_tile/amx_int8/amx_bf16 are not in its flags)",
                               hint="run `tiankong engine install` without --amx")
    if not force and not amx:
        existing = load_managed(target)
        if existing is not None and existing.smoke.get("status") == "ok":
            log(f"engine already built: {existing.path} (rung {existing.rung or '?'}, smoke test ok)")
            return existing
        if existing is not None:
            result = record_smoke(existing)
            if result.status != "failed":
                log(f"engine already built: {existing.path}; smoke test {result.status}: {result.detail}")
                return load_managed(target) or existing
            log(f"the cached build failed its smoke test ({result.detail}); rebuilding")
    check_toolchain()
    target.parent.mkdir(parents=True, exist_ok=True)
    with _install_lock(target.parent / ".install.lock", log):
        if not force and not amx and (done := load_managed(target)) is not None and done.smoke.get("status") == "ok":
            log(f"engine built by the install that ran meanwhile: {done.path}")  # not rebuilt over it
            return done
        _remove_stale(target, log)
        with tempfile.TemporaryDirectory(prefix=f"{target.name}.tmp-", dir=target.parent) as tmp:
            work = Path(tmp)
            source = fetch_source(work, log)
            workers = jobs or os.cpu_count() or 2
            kept, attempts = _climb(source, work, log, workers)
            if amx:
                kept = _try_amx(source, work, log, workers, kept, attempts)
            manifest_path = kept / "build.json"
            manifest = json.loads(manifest_path.read_text())
            manifest["attempts"] = attempts
            manifest_path.write_text(json.dumps(manifest, indent=2))
            if target.exists():
                shutil.rmtree(target)
            os.replace(kept, target)
    built = load_managed(target)
    if built is None:  # pragma: no cover - we just wrote it
        raise EngineBuildError(f"build at {target} did not verify after install")
    log(f"engine ready: {built.path} (llama.cpp {built.version}, rung {built.rung}, "
        f"smoke test {built.smoke.get('status')})")
    return built


def _climb(source: Path, work: Path, log: Log, jobs: int) -> tuple[Path, list[dict[str, object]]]:
    attempts: list[dict[str, object]] = []
    last: SmokeResult | None = None
    tail = ""
    for rung in ladder(cpu_features()):
        try:
            staged = compile_rung(source, work / rung.name, log, jobs, rung)
        except EngineBuildError as exc:  # this rung's flags do not build here (an older compiler, say): next
            tail = exc.log_tail or tail
            attempts.append({"rung": rung.name, "smoke": "not built", "detail": exc.one_line()[:300], "signal": ""})
            log(f"rung {rung.name} did not build: {exc.one_line()[:300]}; trying the next rung")
            continue
        last = _smoke_staged(staged, rung, log)
        attempts.append({"rung": rung.name, "smoke": last.status, "detail": last.detail, "signal": last.signal})
        if last.status != "failed":
            log(f"kept rung {rung.name}: smoke test {last.status} ({last.detail})")
            return staged, attempts
        log(f"rung {rung.name} failed its smoke test: {last.detail}; trying the next rung")
    tried = "; ".join(f"{a['rung']}: {a['detail']}" for a in attempts)
    raise EngineBuildError(
        f"no build of llama-server passed its smoke test ({tried})",
        hint="report the CPU (`tiankong doctor`) and set TIANKONG_LLAMA_SERVER to a working build",
        log_tail=last.log_tail if last else tail,
    )


def _smoke_staged(staged: Path, rung: Rung, log: Log) -> SmokeResult:
    log(f"rung {rung.name}: smoke test (one completion, one embedding) …")
    result = smoke_test(staged / "bin" / "llama-server")
    manifest_path = staged / "build.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["smoke"] = result.to_json()
    manifest_path.write_text(json.dumps(manifest, indent=2))
    return result


def _try_amx(source: Path, work: Path, log: Log, jobs: int, kept: Path,
             attempts: list[dict[str, object]]) -> Path:
    rung = amx_rung()
    staged = compile_rung(source, work / rung.name, log, jobs, rung)
    result = _smoke_staged(staged, rung, log)
    attempts.append({"rung": rung.name, "smoke": result.status, "detail": result.detail, "signal": result.signal})
    if not result.ok:
        log(f"AMX build failed its smoke test ({result.detail}); keeping {kept.parent.name}")
        return kept
    model = smallest_model()
    assert model is not None  # the smoke test passed, so a model is installed
    figures = {"model": model[0]}
    for name, build in (("no_amx", kept), ("amx", staged)):
        figures[name] = llama_bench(build / "bin" / "llama-bench", model[1])  # type: ignore[assignment]
    log(f"llama-bench on {model[0]}: without AMX {figures['no_amx']}, with AMX {figures['amx']}")
    faster = _throughput(figures["amx"]) > _throughput(figures["no_amx"])
    choice = staged if faster else kept
    for build in (kept, staged):
        manifest = json.loads((build / "build.json").read_text())
        manifest["amx_bench"] = figures
        (build / "build.json").write_text(json.dumps(manifest, indent=2))
    log(f"kept the {'AMX' if faster else 'no-AMX'} build (faster in prompt + generation tokens/s)")
    return choice


def _throughput(figures: object) -> float:
    return sum(float(v) for v in figures.values()) if isinstance(figures, dict) else 0.0


def llama_bench(binary: Path, model: Path, prompt: int = 128, generate: int = 32) -> dict[str, float]:
    """Prompt and generation tokens/s from ``llama-bench -o json`` (mean of 3 repetitions)."""
    proc = subprocess.run([str(binary), "-m", str(model), "-p", str(prompt), "-n", str(generate), "-r", "3",
                           "-o", "json"], capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise EngineBuildError(f"llama-bench failed (exit {proc.returncode})", log_tail=proc.stderr[-2000:])
    figures: dict[str, float] = {}
    for row in json.loads(proc.stdout):
        key = "pp_tokens_s" if row.get("n_prompt") else "tg_tokens_s"
        figures[key] = round(float(row["avg_ts"]), 2)
    return figures


def record_smoke(binary: EngineBinary) -> SmokeResult:
    """Smoke-test a managed build and write the result into its ``build.json`` (``tiankong doctor`` uses it)."""
    result = smoke_test(binary.path)
    if binary.build_dir is not None:
        manifest_path = binary.build_dir / "build.json"
        manifest = json.loads(manifest_path.read_text())
        earlier = manifest.get("smoke")
        if result.status == "skipped" and isinstance(earlier, dict) and earlier.get("status") not in (None, "skipped"):
            return result  # no model here to try it with (another data dir): the build's own result stands
        manifest["smoke"] = result.to_json()
        tmp = manifest_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(manifest, indent=2))
        os.replace(tmp, manifest_path)
    return result


def _remove_stale(target: Path, log: Log) -> None:
    """Drop builds left by a killed install, and builds of older keys that were made with AMX on."""
    for stale in target.parent.glob("*.tmp-*"):  # left by a killed build; we hold the lock
        shutil.rmtree(stale, ignore_errors=True)
    for other in target.parent.iterdir():
        manifest = other / "build.json"
        if other == target or not manifest.is_file():
            continue
        try:
            data = json.loads(manifest.read_text())
        except (OSError, ValueError):
            continue
        flags = " ".join(data.get("cmake_flags", []))
        if not data.get("rung") and "GGML_NATIVE=ON" in flags and "-mno-amx-int8" not in flags:
            log(f"replacing the cached build {other.name}: it was built with AMX on, which crashes on "
                "AMX CPUs with GCC ≤ 12 (the new build turns AMX off)")
            shutil.rmtree(other, ignore_errors=True)


@contextlib.contextmanager
def _install_lock(path: Path, log: Log) -> Iterator[None]:
    """One build at a time per cache (a second `engine install` waits for the first, and says so: it waited
    without a word for the 6-9 minutes of a build)."""
    with waiting_lock(path, lambda: log("another `tiankong engine install` is building llama-server in this cache; "
                                        "waiting for it …")):
        yield


