"""Issue 38: every managed build ends with a smoke test, AMX is off by default, a failed rung gives way to the next,
an engine that dies by a signal at start-up is diagnosed and not restarted for ever.

The ladder is driven through the real installer (real cmake, real smoke test, real CLI) over a stand-in
llama.cpp source tree (``$TIANKONG_ENGINE_SOURCE``) whose CMake project "builds" a chosen binary per rung: a fake
server that dies by SIGSEGV once asked to answer (what an AMX build does on an AMX CPU with GCC 12), or the real
llama-server of this machine's managed build.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import sys
from pathlib import Path

import httpx
import pytest

from conftest import FAKE_SERVER, assert_one_line_error, run_cli, serve_app, wait_until
from tiankong.engine import EngineBinary, EngineConfig, EngineProcess, EngineState
from tiankong.engine.rungs import AMX_OFF, amx_rung, ladder
from tiankong.engine.smoke import crash_diagnosis, smoke_test
from tiankong.errors import EngineStartError
from tiankong.gateway import GatewayState

FAKE_CMAKE = """
cmake_minimum_required(VERSION 3.16)
project(fake_llama NONE)
option(GGML_NATIVE "native" ON)
if (GGML_NATIVE)
  set(PICK $ENV{FAKE_NATIVE})
else ()
  set(PICK $ENV{FAKE_PORTABLE})
endif ()
foreach (target llama-server llama-bench ggml-rpc-server)
  add_custom_target(${target}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/bin
    COMMAND ${CMAKE_COMMAND} -E copy ${PICK} ${CMAKE_BINARY_DIR}/bin/${target})
endforeach ()
"""


def crashing_server(tmp_path: Path, mode: str = "segv-answer") -> Path:
    script = tmp_path / f"fake-{mode}.sh"
    script.write_text(f"#!/bin/sh\nFAKE_MODE={mode} exec {sys.executable} {FAKE_SERVER} \"$@\"\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def ladder_env(tmp_path: Path, native: Path, portable: Path) -> dict[str, str]:
    source = tmp_path / "llama.cpp"
    source.mkdir()
    (source / "CMakeLists.txt").write_text(FAKE_CMAKE)
    env = {"TIANKONG_ENGINE_SOURCE": str(source), "TIANKONG_CACHE_DIR": str(tmp_path / "cache"),
           "FAKE_NATIVE": str(native), "FAKE_PORTABLE": str(portable)}
    return {k: v for k, v in {**os.environ, **env}.items() if k != "TIANKONG_LLAMA_SERVER"}


def test_the_default_ladder_turns_amx_off_and_only_the_amx_rung_keeps_it() -> None:
    features = ["avx", "avx2", "fma", "f16c", "bmi2", "avx512f", "amx_tile", "amx_int8", "amx_bf16"]
    native, portable = ladder(features, machine="x86_64")
    assert "-DGGML_NATIVE=ON" in native.flags and f"-DCMAKE_C_FLAGS={AMX_OFF}" in native.flags
    assert f"-DCMAKE_CXX_FLAGS={AMX_OFF}" in native.flags and not native.amx
    assert "-DGGML_NATIVE=OFF" in portable.flags and "-DGGML_AVX2=ON" in portable.flags
    assert not any("AMX" in flag and "=ON" in flag for flag in portable.flags)
    assert not any("-mno-amx" in flag for flag in portable.flags)  # GCC < 11 refuses them; nothing asks for AMX
    assert not any("-mno-amx" in flag for flag in amx_rung().flags) and amx_rung().amx
    # a CPU without AVX2 gets a portable rung that does not ask for it; an ARM CPU gets no x86 flags at all
    assert "-DGGML_AVX2=OFF" in ladder(["avx"], machine="x86_64")[1].flags
    assert not any("amx" in flag.lower() or "AVX" in flag for rung in ladder([], "aarch64") for flag in rung.flags)


def test_a_rung_whose_engine_segfaults_gives_way_to_the_next(tmp_path: Path, engine_binary: EngineBinary) -> None:
    env = ladder_env(tmp_path, crashing_server(tmp_path), engine_binary.path)
    proc = run_cli("engine", "install", env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "rung native failed its smoke test" in proc.stdout and "SIGSEGV" in proc.stdout, proc.stdout
    assert "kept rung portable" in proc.stdout
    info = run_cli("engine", "info", "--json", env=env)
    data = json.loads(info.stdout)
    assert data["rung"] == "portable" and data["amx"] is False and data["smoke"] == "ok"
    assert data["smoke_test"]["status"] == "ok"
    manifest = json.loads((Path(data["build_dir"]) / "build.json").read_text())
    assert [(a["rung"], a["smoke"], a["signal"]) for a in manifest["attempts"]] == [
        ("native", "failed", "SIGSEGV"), ("portable", "ok", "")]


def test_a_rung_that_does_not_build_gives_way_to_the_next(tmp_path: Path, engine_binary: EngineBinary) -> None:
    """A rung whose build fails (flags an older compiler refuses, say) is recorded and the next is tried; before,
    the first failed build ended the install."""
    env = ladder_env(tmp_path, tmp_path / "no-such-binary", engine_binary.path)  # the native rung cannot build
    proc = run_cli("engine", "install", env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "rung native did not build" in proc.stdout and "kept rung portable" in proc.stdout, proc.stdout
    data = json.loads(run_cli("engine", "info", "--json", env=env).stdout)
    manifest = json.loads((Path(data["build_dir"]) / "build.json").read_text())
    assert [(a["rung"], a["smoke"]) for a in manifest["attempts"]] == [("native", "not built"), ("portable", "ok")]


def test_install_fails_with_one_line_when_every_rung_crashes(tmp_path: Path) -> None:
    crash = crashing_server(tmp_path)
    env = ladder_env(tmp_path, crash, crash)
    proc = run_cli("engine", "install", env=env, timeout=600)
    assert_one_line_error(proc, "no build of llama-server passed its smoke test", "SIGSEGV", "portable")
    assert not list((tmp_path / "cache" / "engine").glob("*/build.json"))  # nothing recorded as good
    assert run_cli("engine", "info", env=env).returncode != 0


def test_smoke_test_passes_on_the_real_build_and_names_a_signal_death(tmp_path: Path,
                                                                       engine_binary: EngineBinary) -> None:
    good = smoke_test(engine_binary.path)
    assert good.status == "ok" and good.returncode in (0, -signal.SIGTERM) and good.system_info
    assert "AMX_INT8 = 1" not in good.system_info
    bad = smoke_test(crashing_server(tmp_path))
    assert bad.status == "failed" and bad.signal == "SIGSEGV" and "completion" in bad.detail


def test_the_managed_build_has_amx_off_and_a_passed_smoke_test(engine_binary: EngineBinary) -> None:
    if engine_binary.source != "managed":
        pytest.skip("TIANKONG_LLAMA_SERVER points at a build made elsewhere")
    assert engine_binary.rung in ("native", "portable") and engine_binary.amx is False
    assert "-mno-amx-int8" in " ".join(engine_binary.cmake_flags) or "x86" not in os.uname().machine
    assert engine_binary.smoke.get("status") == "ok"
    system_info = str(engine_binary.smoke.get("system_info"))
    assert "CPU :" in system_info and "AMX_INT8 = 1" not in system_info  # llama-server's own view of the build


def test_a_start_up_crash_by_signal_is_diagnosed_with_the_fix(tmp_path: Path) -> None:
    engine = EngineProcess(EngineConfig(model=Path("/dev/null")), crashing_server(tmp_path, "segv-start"),
                           startup_timeout_s=60)
    with pytest.raises(EngineStartError) as err:
        engine.start()
    message = err.value.one_line()
    assert "SIGSEGV" in message and "tiankong engine install --rebuild" in message
    assert "CPU features involved" in message and "load_tensors" in err.value.log_tail
    amx_cpu = "amx_int8" in Path("/proc/cpuinfo").read_text()
    assert ("AMX" in crash_diagnosis(-signal.SIGSEGV, ["-DGGML_NATIVE=ON"])) == amx_cpu  # named only where it applies


def test_the_second_identical_start_up_crash_ends_the_restarts(tmp_path: Path) -> None:
    counter = tmp_path / "starts"
    os.environ["FAKE_COUNTER"] = str(counter)  # the fake server counts its starts here
    try:
        lines: list[str] = []
        engine = EngineProcess(EngineConfig(model=Path("/dev/null")),
                               crashing_server(tmp_path, "segv-after-first"), startup_timeout_s=60,
                               log=lines.append)
        engine.start()
        assert engine.pid is not None
        with serve_app(GatewayState.for_engine(engine, "fake")) as url:
            assert httpx.get(f"{url}/health").status_code == 200
            os.kill(engine.pid, signal.SIGKILL)  # it crashes while serving; each restart then dies by SIGSEGV
            assert wait_until(lambda: bool(engine.crash_loop), timeout_s=60)
            assert "SIGSEGV" in engine.crash_loop and "not restarting" in engine.crash_loop
            assert wait_until(lambda: engine.state == EngineState.FAILED, timeout_s=10)
            health = httpx.get(f"{url}/health")
            assert health.status_code == 503 and "SIGSEGV" in health.json()["crash_loop"]
        starts = len(counter.read_text().splitlines())
        assert starts == 3  # the first, then two identical start-up crashes, then no more
        with pytest.raises(EngineStartError, match="not restarting"):
            engine.start()  # an explicit start says why instead of crashing a third time
        assert len(counter.read_text().splitlines()) == starts
        assert any("not restarting" in line for line in lines)
        engine.stop()
    finally:
        os.environ.pop("FAKE_COUNTER", None)


def test_amx_on_request_is_refused_on_a_cpu_without_amx() -> None:
    if "amx_int8" in Path("/proc/cpuinfo").read_text():
        pytest.skip("this CPU has AMX: --amx would start a real second build (measured in docs/benchmarks.md)")
    assert_one_line_error(run_cli("engine", "install", "--amx"), "this CPU has no AMX", "without --amx")
