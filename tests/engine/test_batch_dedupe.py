"""Dedupe and normalize as batch job kinds (issue 42): a ``dedupe`` job is one whole-data-set step whose output is
``tiankong dedupe``'s, written once; killed with SIGKILL mid-step (its engine answers half journaled) and re-run,
it answers the journaled calls from the journal and ends in the same clusters, each record once; a finished job
is not run again. A ``normalize`` job runs record by record through the runner (exactly once, resumable) and never
invents a field. Real embedding part engine (all-minilm-l6-v2), no mocks."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import TIANKONG, assert_one_line_error, run_cli
from tiankong.batch import make_job, run
from tiankong.batch.journal import CallJournal, journaled
from tiankong.batch.store import OutputPaths
from tiankong.dedupe import DedupeOptions, dedupe_file
from tiankong.engine.parts import stop_parts
from tiankong.errors import ConfigError
from tiankong.structured.flow import Call, Flow

ROWS = [
    {"id": "a1", "text": "Refund request: my order #1234 arrived broken, please send a replacement."},
    {"id": "a2", "text": "REFUND REQUEST -- My order #1234 arrived   broken; please send a replacement!!"},
    {"id": "b1", "text": "The quarterly report shows revenue grew by twelve percent while costs stayed flat across "
                         "all regions."},
    {"id": "b2", "text": "Across all regions costs stayed flat while the quarterly report shows revenue grew by "
                         "twelve percent."},
    {"id": "d1", "text": "The cat sat quietly on the warm windowsill watching birds."},
]


@pytest.fixture(scope="module", autouse=True)
def parts_stopped() -> Iterator[None]:
    yield
    stop_parts()


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _clusters(path: Path) -> list[tuple[Any, Any, bool]]:
    return [(x["id"], x["cluster"], x["kept"]) for x in map(json.loads, path.read_text(encoding="utf-8").splitlines())]


def test_a_dedupe_job_writes_what_tiankong_dedupe_writes_and_is_not_run_twice(tmp_path: Path) -> None:
    src = _write(tmp_path / "in.jsonl", ROWS)
    out, ref = tmp_path / "out.jsonl", tmp_path / "ref.jsonl"
    dedupe_file(src, ref, options=DedupeOptions(stages=("exact", "near")))
    job = make_job(input=str(src), output=str(out), kind="dedupe", args={"stages": ["exact", "near"]})
    report = run(job)
    assert out.read_bytes() == ref.read_bytes()
    assert report.task == "dedupe" and report.done == report.total == 5 and report.processed == 5
    assert report.step is not None and report.step["clusters"] == 3 and report.step["duplicates"] == 2
    assert not OutputPaths(out).calls.exists()  # the journal goes once OUT is written
    again = run(job)
    assert again.processed == 0 and again.skipped_done == 5 and out.read_bytes() == ref.read_bytes()
    _write(src, [*ROWS, {"id": "a3", "text": ROWS[0]["text"]}])  # another input: the step runs again
    third = run(job)
    assert third.processed == 6 and [c for i, c, _ in _clusters(out) if i == "a3"] == ["a1"]


def test_dedupe_job_args_and_input_are_checked_in_one_line(tmp_path: Path) -> None:
    src = _write(tmp_path / "in.jsonl", ROWS)
    for args, needle in (({"near": 3}, "near"), ({"records": []}, "records"), ({"stages": ["fuzzy"]}, "stages"),
                         ({"keep": "biggest"}, "keep rule")):
        with pytest.raises(ConfigError, match=needle):
            make_job(input=str(src), output="o.jsonl", kind="dedupe", args=args)
    with pytest.raises(ConfigError, match="runs no task"):
        make_job(input=str(src), output="o.jsonl", kind="dedupe", task="classify")
    (tmp_path / "bad.jsonl").write_bytes(b'{"id": "1", "text": "a"}\n{"id": "1", "text": "b"}\n')
    proc = run_cli("batch", "run", "--kind", "dedupe", "--input", str(tmp_path / "bad.jsonl"), "--output",
                   str(tmp_path / "o.jsonl"))
    assert_one_line_error(proc, "unique")


def test_a_dedupe_job_killed_mid_step_resumes_from_its_journal_to_the_same_clusters(tmp_path: Path) -> None:
    """SIGKILL once the journal holds some embedding answers and before OUT exists; the re-run replays them."""
    rows = [{"id": f"t{i}", "text": f"Ticket {i}: the printer on floor {i % 9} jams on page {i % 40} "
                                    f"({'urgent' if i % 3 else 'minor'})."} for i in range(1200)]
    src = _write(tmp_path / "in.jsonl", rows)
    out, ref = tmp_path / "out.jsonl", tmp_path / "ref.jsonl"
    args = ["batch", "run", "--kind", "dedupe", "--input", str(src), "--no-progress", "--json"]
    journal = OutputPaths(out).calls
    proc = subprocess.Popen([TIANKONG, *args, "--output", str(out)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        if journal.exists() and journal.read_bytes().count(b"\n") >= 3:  # the header and two groups' answers
            break
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not out.exists(), "the step finished before it could be killed: the test proves nothing"
    kept = journal.read_bytes().count(b"\n") - 1
    assert kept >= 2
    resumed = run_cli(*args, "--output", str(out))
    assert resumed.returncode == 0, resumed.stderr
    calls = json.loads(resumed.stdout)["step"]["calls"]
    assert calls["replayed"] >= kept and calls["sent"] > 0  # every journaled call answered from the journal
    whole = run_cli(*args, "--output", str(ref))  # an uninterrupted run
    assert whole.returncode == 0, whole.stderr
    assert json.loads(whole.stdout)["step"]["calls"]["replayed"] == 0
    got = _clusters(out)
    assert [i for i, _, _ in got] == [r["id"] for r in rows]  # each record once, in input order
    assert got == _clusters(ref)
    assert json.loads(resumed.stdout)["step"]["stages"]["semantic"]["pairs"] > 0  # the semantic stage ran


def test_the_journal_replays_answers_and_never_an_error(tmp_path: Path) -> None:
    def flow() -> Flow[list[Any]]:
        first = yield [Call("POST", "/x", {"i": i}) for i in range(6)]
        second = yield [Call("POST", "/x", {"i": 0}), Call("POST", "/y", None, part="p")]
        return [*first, *second]

    def drive(journal: CallJournal, answer: Any) -> list[Any]:
        gen = journaled(flow(), journal)
        try:
            calls = next(gen)
            while True:
                calls = gen.send([answer(c) for c in calls])
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]

    path = tmp_path / "j.jsonl"
    failing = drive(CallJournal(path, "f1"),
                    lambda c: ConfigError("down") if c.path == "/y" else {"n": c.body["i"]})  # type: ignore[index]
    assert [a["n"] for a in failing[:7]] == [0, 1, 2, 3, 4, 5, 0] and isinstance(failing[7], ConfigError)
    journal = CallJournal(path, "f1")
    assert len(journal) == 6  # the error was not journaled (asked again), /x {i: 0} once
    replay = drive(journal, lambda c: {"n": -1})
    assert [a["n"] for a in replay] == [0, 1, 2, 3, 4, 5, 0, -1] and journal.replayed == 7 and journal.called == 1
    with path.open("ab") as handle:
        handle.write(b'{"key": "torn')  # a kill mid-append
    assert len(CallJournal(path, "f1")) == 7 and CallJournal(path, "f2").replayed == 0
    assert len(CallJournal(path, "f2")) == 0  # another run's journal is started afresh


SCHEMA = {"type": "object", "properties": {"phone": {"type": "string", "x-normalize": "phone"},
                                           "day": {"type": "string", "format": "date"}}}


def test_a_normalize_job_runs_each_record_once_and_invents_nothing(tmp_path: Path) -> None:
    rows = [{"id": 1, "phone": "138 0013 8000", "day": "2021年3月5日"}, {"id": 2, "day": "5 March 2021"},
            {"id": 3, "phone": "not a number"}]
    src = _write(tmp_path / "in.jsonl", rows)
    (tmp_path / "schema.json").write_text(json.dumps(SCHEMA), encoding="utf-8")
    out = tmp_path / "out.jsonl"
    job_file = tmp_path / "job.toml"
    job_file.write_text(f'kind = "normalize"\ninput = "{src}"\noutput = "{out}"\n[args]\nschema = "schema.json"\n'
                        'region = "CN"\nmode = "rules"\n', encoding="utf-8")
    proc = run_cli("batch", "run", "--job", str(job_file), "--json", "--keep-order")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["processed"] == 3
    lines = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    assert [x["id"] for x in lines] == [1, 2, 3] and {x["task"] for x in lines} == {"normalize"}
    first, second, third = (x["result"] for x in lines)
    assert first["record"]["phone"] == "+8613800138000" and first["record"]["day"] == "2021-03-05"
    assert "phone" not in second["record"] and second["record"]["day"] == "2021-03-05"  # no phone given: none
    assert third["record"]["phone"] == "not a number" and third["flags"][0]["field"] == "phone"
    again = run_cli("batch", "run", "--job", str(job_file), "--json")
    assert json.loads(again.stdout)["skipped_done"] == 3 and len(out.read_text().splitlines()) == 3
    with pytest.raises(ConfigError, match="region"):
        make_job(input=str(src), output="o.jsonl", kind="normalize", args={"schema": SCHEMA, "region": "China"})
    with pytest.raises(ConfigError, match="schema"):
        make_job(input=str(src), output="o.jsonl", kind="normalize", args={})


def test_a_dedupe_job_on_ray_signs_in_partitions_and_writes_the_same_clusters(tmp_path: Path) -> None:
    """``ray = "local"``: the MinHash signatures are computed by Ray tasks in partitions (a one-machine cluster of
    this process), the driver writes OUT once — the same bytes as the job on this machine."""
    pytest.importorskip("ray", reason="the [ray] extra (make test installs it)")
    rows = [{"id": f"r{i}", "text": f"Ticket {i % 2300}: the printer on floor {i % 7} jams on page {i % 2300}."}
            for i in range(5000)]  # ids 2300.. repeat an earlier ticket's text: exact and near duplicates
    src = _write(tmp_path / "in.jsonl", rows)
    local, remote = tmp_path / "local.jsonl", tmp_path / "ray.jsonl"
    args = {"stages": ["exact", "near"]}
    run(make_job(input=str(src), output=str(local), kind="dedupe", args=args))
    report = run(make_job(input=str(src), output=str(remote), kind="dedupe", args=args, ray="local"))
    assert report.step is not None
    partitions = report.step["ray"]["partitions"]
    assert partitions["signatures"] >= 2 and partitions["bands"] >= 2 and partitions["search"] == 0
    assert remote.read_bytes() == local.read_bytes()
    assert report.step["duplicates"] >= 2700


def test_a_semantic_dedupe_on_ray_searches_in_partitions_and_finds_the_same_pairs(tmp_path: Path) -> None:
    """The vectors embedded by the nodes' own embedding parts and the ANN search in partitions of the queries (the
    index built on the driver and shipped): the same clusters and the same evidence pairs as the job on this
    machine, paraphrases (no shared shingles to speak of) among them. Scores may differ by float noise: a node's
    part batches its requests on its own (measured: cosines within 5e-5 of the driver's on 2,000 records,
    benchmarks/results/dedupe/ray-2026-12-05-vectors.log), so they are compared within 1e-4; no pair here lies that
    close to a threshold."""
    pytest.importorskip("ray", reason="the [ray] extra (make test installs it)")
    topics = ["printer", "laptop", "phone", "router", "monitor", "keyboard", "scanner", "camera", "tablet", "server"]
    rows = [{"id": f"r{i}", "text": f"Order {i}: the {topics[i % 10]} arrived with a cracked case, unit {i * 7919}."}
            for i in range(600)]
    rows += [{"id": "p1", "text": "Order 3: the router arrived with a cracked case, unit 23757."},
             {"id": "p2", "text": "My router came broken: the casing was cracked when order 3 arrived (unit 23757)."}]
    src = _write(tmp_path / "in.jsonl", rows)
    local, remote = tmp_path / "local.jsonl", tmp_path / "ray.jsonl"
    args = {"stages": ["semantic"], "semantic": 0.9, "semantic_low": 0.9}  # no band
    run(make_job(input=str(src), output=str(local), kind="dedupe", args=args))
    report = run(make_job(input=str(src), output=str(remote), kind="dedupe", args=args, ray="local"))
    assert report.step is not None and report.step["ray"]["partitions"]["search"] >= 2
    assert report.step["ray"]["partitions"]["vectors"] >= 2
    assert report.step["stages"]["semantic"]["pairs"] >= 1, report.step
    here, there = ([json.loads(x) for x in f.read_text().splitlines()] for f in (local, remote))
    assert [(r["id"], r["cluster"], r["kept"]) for r in there] == [(r["id"], r["cluster"], r["kept"]) for r in here]
    for a, b in zip(here, there, strict=True):
        assert [(e["stage"], e["with"], e["merged"]) for e in b["evidence"]] == \
            [(e["stage"], e["with"], e["merged"]) for e in a["evidence"]]
        assert [e["score"] for e in b["evidence"]] == pytest.approx([e["score"] for e in a["evidence"]], abs=1e-4)


def test_a_node_that_cannot_install_the_part_skips_the_semantic_stage_with_the_reason() -> None:
    """What runs in each Ray vectors task, called here in place: a part the node has not and cannot install is the
    semantic stage skipped with the node's reason (as on one machine without the part), never a failed job."""
    from tiankong.batch.ray_dedupe import _vector_partition

    found, reason = _vector_partition(["a ticket", "another ticket"], "no-such-part:f16")
    assert found is None
    assert "no-such-part:f16" in reason and "could not install" in reason and "\n" not in reason
