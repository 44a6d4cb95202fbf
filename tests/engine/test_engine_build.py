"""Engine acquisition: the cache is keyed by CPU features and never trusts a damaged build."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from conftest import FAKE_SERVER, assert_one_line_error, run_cli
from tiankong.engine.build import build_key, load_managed, locate_engine
from tiankong.engine.cpu import cpu_features
from tiankong.errors import EngineNotFound


def make_build(directory: Path, binary: Path) -> Path:
    (directory / "bin").mkdir(parents=True)
    digests = {}
    for name in ("llama-server", "llama-bench", "ggml-rpc-server"):
        shutil.copy2(binary, directory / "bin" / name)
        digests[name] = hashlib.sha256((directory / "bin" / name).read_bytes()).hexdigest()
    manifest = {"version": "1", "commit": "abc", "cmake_flags": [], "cpu_features": cpu_features(), "sha256": digests}
    (directory / "build.json").write_text(json.dumps(manifest))
    return directory


def test_complete_build_is_trusted(tmp_path: Path) -> None:
    found = load_managed(make_build(tmp_path / "k", FAKE_SERVER))
    assert found is not None and found.path.name == "llama-server" and found.source == "managed"


def test_build_without_manifest_is_not_trusted(tmp_path: Path) -> None:
    build = make_build(tmp_path / "k", FAKE_SERVER)
    (build / "build.json").unlink()  # a build killed before it finished never wrote this
    assert load_managed(build) is None


def test_corrupted_binary_is_not_trusted(tmp_path: Path) -> None:
    build = make_build(tmp_path / "k", FAKE_SERVER)
    server = build / "bin" / "llama-server"
    data = bytearray(server.read_bytes())
    data[len(data) // 2] ^= 0xFF
    server.write_bytes(bytes(data))
    assert load_managed(build) is None


def test_half_written_binary_and_garbage_manifest_are_not_trusted(tmp_path: Path) -> None:
    build = make_build(tmp_path / "k", FAKE_SERVER)
    (build / "bin" / "llama-bench").write_bytes(b"")
    assert load_managed(build) is None
    other = make_build(tmp_path / "j", FAKE_SERVER)
    (other / "build.json").write_text("{not json")
    assert load_managed(other) is None


def test_cache_key_depends_on_cpu_features() -> None:
    here = cpu_features()
    assert build_key(here) == build_key()
    assert build_key([*here, "avx512_fake"]) != build_key(here)
    assert build_key([f for f in here if f != "avx2"] or ["none"]) != build_key(here)


def test_env_path_that_is_not_executable_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIANKONG_LLAMA_SERVER", str(tmp_path / "missing"))
    with pytest.raises(EngineNotFound, match="not an executable"):
        locate_engine()


def test_missing_engine_without_build_tools_says_what_to_install(tmp_path: Path) -> None:
    env = {"TIANKONG_CACHE_DIR": str(tmp_path / "cache"), "TIANKONG_LLAMA_SERVER": "", "PATH": str(tmp_path)}
    info = run_cli("engine", "info", env=env)
    assert_one_line_error(info, "no llama-server found", "tiankong engine install")
    install = run_cli("engine", "install", env=env)
    assert_one_line_error(install, "cmake", "apt-get install")


def test_engine_info_json_has_path_and_version() -> None:
    proc = run_cli("engine", "info", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert Path(data["path"]).is_file() and data["version"] and data["commit"]
    assert isinstance(data["cpu_features"], list)
