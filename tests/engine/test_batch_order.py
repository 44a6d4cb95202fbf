"""``batch run --keep-order`` (``run(job, keep_order=True)``): OUT in input order when a run finishes, also after a
resume (a kill, or ``--retry-failed``), each id still exactly once; without it OUT is in completion order and a
resumed run appends after the lines already there (docs/batch.md). Real engine: SmolLM2 with 2 slots, more items
in flight than slots, so lines finish out of input order."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import TIANKONG
from tiankong.batch import make_job, run
from tiankong.batch.inputs import id_key
from tiankong.batch.store import OutputPaths, put_in_order
from tiankong.engine import EngineProcess
from tiankong.errors import ConfigError

TICKETS = ["My invoice is wrong, I was charged twice and nobody answers my e-mails about it.", "The app crashes.",
           "How do I change my account email?", "我的发票金额不对。",
           "Export produces an empty file when the table has more than ten thousand rows, every time since the update.",
           "Refund please."]
LABELS = "billing,bug,account"


def tickets(n: int, *, text_every: int = 1) -> list[dict[str, Any]]:
    """``n`` records; with ``text_every=2`` every other one lacks its text (it fails until the input is fixed)."""
    return [{"id": f"t{i:03d}", **({"text": f"{TICKETS[i % len(TICKETS)]} (#{i})"} if i % text_every == 0 else {})}
            for i in range(n)]


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


def ids_of(path: Path) -> list[str]:
    raw = path.read_bytes()
    assert raw.endswith(b"\n")
    return [json.loads(line)["id"] for line in raw.splitlines()]


def batch(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([TIANKONG, "batch", "run", "--task", "classify", "--labels", LABELS, *args],
                          capture_output=True, text=True, timeout=600)


# --- the store's step, on files ------------------------------------------------------------------------


def test_put_in_order_moves_whole_lines_once(tmp_path: Path) -> None:
    out, scratch = tmp_path / "out.jsonl", tmp_path / "out.jsonl.ordering"
    lines = [{"id": 3, "r": "ccc"}, {"id": "b", "r": "é"}, {"id": 1, "r": ""}, {"id": "gone", "r": "x"},
             {"id": 2, "r": "bb"}]
    write_jsonl(out, lines)
    before = {line.decode() for line in out.read_bytes().splitlines()}
    order = [id_key(v, None) for v in (1, 2, 3, 4, "b")]  # 4: not done (failed); "gone": not in the input
    assert put_in_order(out, order, scratch)
    assert [line["id"] for line in map(json.loads, out.read_bytes().splitlines())] == [1, 2, 3, "b", "gone"]
    assert {line.decode() for line in out.read_bytes().splitlines()} == before and not scratch.exists()
    inode = out.stat().st_ino
    assert not put_in_order(out, order, scratch) and out.stat().st_ino == inode  # in order already: untouched
    with out.open("ab") as handle:
        handle.write(b'{"id": 0, "r": "torn')
    with pytest.raises(ConfigError, match="line 6"):
        put_in_order(out, order, scratch)
    assert not scratch.exists()


# --- real engine ---------------------------------------------------------------------------------------


def test_keep_order_after_retry_failed_and_the_unordered_default(tmp_path: Path, smol_engine: EngineProcess) -> None:
    """Half the records fail (no text) and are run again with --retry-failed once the input is fixed: without
    --keep-order they are appended after the lines already there (completion order); with it OUT ends in input
    order. The same first run's files, copied, go both ways."""
    n = 16
    src = write_jsonl(tmp_path / "in.jsonl", tickets(n, text_every=2))
    plain, ordered = tmp_path / "plain.jsonl", tmp_path / "ordered.jsonl"
    first = batch("--input", str(src), "--output", str(plain), "--url", smol_engine.url, "--concurrency", "4",
                  "--json")
    assert first.returncode == 3, first.stderr  # the records without text failed
    assert json.loads(first.stdout)["done"] == n // 2
    head = plain.read_bytes()
    for suffix in ("", ".errors.jsonl", ".job.json"):  # a job's files copied together (OUT alone is refused)
        shutil.copyfile(f"{plain}{suffix}", f"{ordered}{suffix}")
    write_jsonl(src, tickets(n))  # the input fixed
    expected = [f"t{i:03d}" for i in range(n)]

    again = batch("--input", str(src), "--output", str(plain), "--url", smol_engine.url, "--concurrency", "4",
                  "--retry-failed", "--json")
    assert again.returncode == 0, again.stderr
    assert plain.read_bytes().startswith(head)  # appended after the lines already there
    ids = ids_of(plain)
    assert sorted(ids) == expected and ids != expected  # every id once, not in input order
    assert set(ids[: n // 2]) == set(expected[::2]) and not json.loads(again.stdout)["keep_order"]

    kept = batch("--input", str(src), "--output", str(ordered), "--url", smol_engine.url, "--concurrency", "4",
                 "--retry-failed", "--keep-order", "--json")
    assert kept.returncode == 0, kept.stderr
    report = json.loads(kept.stdout)
    assert report["keep_order"] and report["reordered"] and report["complete"] and report["processed"] == n // 2
    assert ids_of(ordered) == expected
    assert not OutputPaths(ordered).ordering.exists() and not OutputPaths(ordered).errors.exists()


def test_keep_order_over_a_kill_and_a_resume(tmp_path: Path, smol_engine: EngineProcess) -> None:
    """A --keep-order run killed half-way leaves its lines in completion order (a leftover OUT.ordering as a kill
    in the rewrite would leave); the same command again completes and puts every id in input order, once."""
    n = 24
    src, out = write_jsonl(tmp_path / "in.jsonl", tickets(n)), tmp_path / "out.jsonl"
    args = ("--input", str(src), "--output", str(out), "--url", smol_engine.url, "--concurrency", "4",
            "--keep-order")
    proc = subprocess.Popen([TIANKONG, "batch", "run", "--task", "classify", "--labels", LABELS, *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(3000):
            if out.exists() and out.read_bytes().count(b"\n") >= 4:
                break
            assert proc.poll() is None, proc.communicate()[1]
            time.sleep(0.1)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
    written = ids_of(out) if out.read_bytes().endswith(b"\n") else None
    assert written is None or len(written) < n
    OutputPaths(out).ordering.write_bytes(b'{"id": "t000", "half a copy')  # a kill in the rewrite
    resumed = batch(*args, "--json")
    assert resumed.returncode == 0, resumed.stderr
    report = json.loads(resumed.stdout)
    assert report["complete"] and report["skipped_done"] > 0
    assert ids_of(out) == [f"t{i:03d}" for i in range(n)]
    assert not OutputPaths(out).ordering.exists()


def test_library_keep_order_in_one_run(tmp_path: Path, smol_engine: EngineProcess) -> None:
    """``run(job, keep_order=True)`` with 6 items in flight on 2 slots: input order, each id once."""
    n = 12
    src, out = write_jsonl(tmp_path / "in.jsonl", tickets(n)), tmp_path / "out.jsonl"
    job = make_job(input=str(src), output=str(out), task="classify", labels=LABELS.split(","), url=[smol_engine.url],
                   concurrency=6)
    report = run(job, keep_order=True)
    assert report.complete and report.keep_order and ids_of(out) == [f"t{i:03d}" for i in range(n)]
