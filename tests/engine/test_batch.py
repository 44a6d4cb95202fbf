"""Batch jobs against the real engine: exactly-once after kill -9 (of the batch and of the engine), torn-line
repair, bad input (malformed lines, duplicate ids, missing fields, empty input), CSV, folders, OpenAI batch files.

Inputs are tiny (classification or rules-only redaction) because the test machine is small; nothing is timed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import TIANKONG, assert_one_line_error, free_port, pid_alive
from tiankong.batch import BatchJob, build_job, make_job, repair, run
from tiankong.engine import EngineBinary, EngineConfig, EngineProcess
from tiankong.errors import ConfigError
from tiankong.models import TEST_MODEL


def _argv(*args: str) -> list[str]:
    return [TIANKONG, *args]


def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(_argv(*args), capture_output=True, text=True, timeout=timeout)


TICKETS = ["My invoice is wrong, I was charged twice.", "The app crashes when I open settings.",
           "How do I change my account email?", "我的发票金额不对。", "登录时一直提示密码错误。",
           "Export produces an empty file.", "Please refund my last payment.", "请问怎么注销账号？"]
LABELS = "billing,bug,account"


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


def tickets(n: int) -> list[dict[str, Any]]:
    return [{"id": f"t{i:03d}", "text": TICKETS[i % len(TICKETS)] + f" (#{i})"} for i in range(n)]


def read_lines(path: Path) -> list[dict[str, Any]]:
    raw = path.read_bytes()
    assert not raw or raw.endswith(b"\n"), "the output must end with a complete line"
    return [json.loads(line) for line in raw.splitlines()]  # every line valid JSON


def assert_exactly_once(output: Path, expected: list[Any], key: str = "id") -> None:
    ids = [record[key] for record in read_lines(output)]
    assert sorted(ids, key=str) == sorted(expected, key=str)
    assert len(ids) == len(set(map(str, ids)))


def wait_for_lines(path: Path, n: int, proc: subprocess.Popen[str], timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_bytes().count(b"\n") >= n:
            return
        assert proc.poll() is None, proc.communicate()[1]
        time.sleep(0.05)
    raise AssertionError(f"{path} did not reach {n} lines")


@pytest.fixture
def url(smol_engine: EngineProcess) -> str:
    return smol_engine.url


def rules_job(tmp_path: Path, url: str, input: Path, **keys: Any) -> BatchJob:
    """Rules-only redaction: exercises the batch machinery with no model calls."""
    fields: dict[str, Any] = {"output": str(tmp_path / "out.jsonl"), **keys}
    return make_job(input=str(input), task="redact", use_model=False, url=[url], **fields)


# --- end to end -----------------------------------------------------------------------------------


def test_classify_cli_rerun_status_report(tmp_path: Path, url: str) -> None:
    records = tickets(10)
    src, out = write_jsonl(tmp_path / "in.jsonl", records), tmp_path / "out.jsonl"
    proc = cli("batch", "run", "--task", "classify", "--labels", LABELS, "--input", str(src), "--output", str(out),
               "--url", url, "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["processed"] == 10 and report["complete"] and report["tokens"]["total"] > 0
    assert set(report["latency_s"]) >= {"p50", "p90", "p99"}
    assert_exactly_once(out, [r["id"] for r in records])
    for line in read_lines(out):
        assert set(line) == {"id", "task", "result", "usage", "latency_s", "label", "scores"}
        assert line["result"]["label"] in LABELS.split(",") and line["label"] == line["result"]["label"]
        assert line["scores"] == line["result"]["scores"]
    before = out.read_bytes()
    again = cli("batch", "run", "--task", "classify", "--labels", LABELS, "--input", str(src), "--output", str(out),
                "--url", url, "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["skipped_done"] == 10 and out.read_bytes() == before
    status = json.loads(cli("batch", "status", str(out), "--json").stdout)
    assert (status["done"], status["total"], status["failed"], status["pending"]) == (10, 10, 0, 0)
    shown = cli("batch", "report", str(out))
    assert shown.returncode == 0 and json.loads(shown.stdout)["skipped_done"] == 10


def test_kill9_batch_then_rerun_is_exactly_once(tmp_path: Path, url: str) -> None:
    records = tickets(20)
    src, out = write_jsonl(tmp_path / "in.jsonl", records), tmp_path / "out.jsonl"
    args = ("batch", "run", "--task", "classify", "--labels", LABELS, "--input", str(src), "--output", str(out),
            "--url", url, "--concurrency", "2")
    proc = subprocess.Popen(_argv(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_lines(out, 4, proc)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    written = out.read_bytes().count(b"\n")
    assert written < len(records)
    with out.open("ab") as handle:  # what a crash in the middle of a write leaves behind
        handle.write(b'{"id": "t999", "task": "classif')
    again = cli(*args, "--json")
    assert again.returncode == 0, again.stderr
    report = json.loads(again.stdout)
    assert report["repaired_bytes"] > 0 and report["skipped_done"] == written and report["complete"]
    assert_exactly_once(out, [r["id"] for r in records])


def test_kill9_engine_midrun_is_retried(tmp_path: Path, engine_binary: EngineBinary, smol_path: Path) -> None:
    # a fixed port: the watchdog restarts the engine on the same URL
    config = EngineConfig(model=smol_path, ctx=2048, slots=2, port=free_port(), alias=TEST_MODEL)
    engine = EngineProcess(config, engine_binary)
    records = tickets(16)
    src, out = write_jsonl(tmp_path / "in.jsonl", records), tmp_path / "out.jsonl"
    proc: subprocess.Popen[str] | None = None
    try:
        engine.start()
        proc = subprocess.Popen(_argv("batch", "run", "--task", "classify", "--labels", LABELS, "--input", str(src),
                                      "--output", str(out), "--url", engine.url, "--engine-wait", "120", "--json"),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_for_lines(out, 3, proc)
        old_pid = engine.pid
        assert old_pid is not None
        os.kill(old_pid, signal.SIGKILL)
        stdout, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, stderr
        assert engine.restarts >= 1 and engine.pid != old_pid and not pid_alive(old_pid)
        report = json.loads(stdout)
        assert report["failed"] == 0 and report["complete"] and report["retries"] >= 1
        assert_exactly_once(out, [r["id"] for r in records])
        assert not (tmp_path / "out.jsonl.errors.jsonl").exists()
    finally:
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        engine.stop()


# --- bad input ------------------------------------------------------------------------------------


def test_malformed_lines_are_reported_with_line_numbers(tmp_path: Path, url: str) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text('{"id": 1, "text": "mail me at a@b.com"}\n{bad json\n{"id": 2, "text": "call 13812345678"}\n'
                   '[1, 2]\n\n{"id": {"x": 1}, "text": "odd id"}\n{"id": 3, "text": "nothing here"}\n')
    report = run(rules_job(tmp_path, url, src))
    assert (report.processed, report.failed, report.malformed, report.total) == (3, 3, 3, 6)
    errors = read_lines(tmp_path / "out.jsonl.errors.jsonl")
    assert sorted(e["line"] for e in errors) == [2, 4, 6]
    assert all(f"line {e['line']}" in e["error"]["message"] for e in errors)
    assert_exactly_once(tmp_path / "out.jsonl", [1, 2, 3])
    again = run(rules_job(tmp_path, url, src))
    assert (again.processed, again.skipped_failed, again.failed) == (0, 3, 3)
    assert len(read_lines(tmp_path / "out.jsonl.errors.jsonl")) == 3


def test_a_malformed_line_fixed_since_is_no_longer_failed(tmp_path: Path, url: str) -> None:
    """Its error was logged under its line (it had no id) and stayed for good: 'failed 1', exit 3, every run."""
    src = tmp_path / "in.jsonl"
    src.write_text('{"id": 1, "text": "a@b.com"}\n{bad json\n{"id": 3, "text": "c"}\n')
    assert run(rules_job(tmp_path, url, src)).failed == 1
    src.write_text('{"id": 1, "text": "a@b.com"}\n{"id": 2, "text": "mended"}\n{"id": 3, "text": "c"}\n')
    again = run(rules_job(tmp_path, url, src))
    assert (again.processed, again.failed) == (1, 0)
    assert not (tmp_path / "out.jsonl.errors.jsonl").exists()
    assert_exactly_once(tmp_path / "out.jsonl", [1, 2, 3])


def test_an_output_is_resumed_only_by_the_job_that_wrote_it(tmp_path: Path, url: str) -> None:
    """Another task or input on the same OUT was reported complete (0 processed) with the first job's lines."""
    src = write_jsonl(tmp_path / "in.jsonl", [{"id": "a", "text": "x@y.com"}, {"id": "b", "text": "y"}])
    out = tmp_path / "out.jsonl"
    redact = ("batch", "run", "--task", "redact", "--no-model", "--input", str(src), "--output", str(out))
    assert cli(*redact).returncode == 0 and cli(*redact).returncode == 0  # the same job again: resumed (nothing left)
    before = out.read_bytes()
    assert_one_line_error(cli("batch", "run", "--task", "classify", "--labels", "a,b", "--input", str(src),
                              "--output", str(out), "--url", url), "holds the results of another job", "task")
    other = write_jsonl(tmp_path / "other.jsonl", [{"id": "a", "text": "z"}])
    assert_one_line_error(cli(*redact[:-4], "--input", str(other), "--output", str(out)), "another job", "input")
    assert out.read_bytes() == before
    os.link(src, tmp_path / "linked.jsonl")  # a hard link to the input is the input
    assert_one_line_error(cli(*redact[:-2], "--output", str(tmp_path / "linked.jsonl")), "the file the job writes")
    moved = cli("batch", "status", str(out), "--input", str(tmp_path / "nope.jsonl"))
    assert_one_line_error(moved, "nope.jsonl", "not there")
    src.rename(tmp_path / "elsewhere.jsonl")  # `status` said done 2/? with no word of why
    status = cli("batch", "status", str(out))
    assert status.returncode == 0 and "not there: pass --input" in status.stdout


def test_a_csv_byte_that_is_not_utf8_fails_its_row_only(tmp_path: Path, url: str) -> None:
    """It stopped the file — reported as line 1, the rows before and after it never run."""
    src = tmp_path / "in.csv"
    src.write_bytes(b"id,text\n1,ok\n2,caf\xe9\n3,fine\n")
    report = run(rules_job(tmp_path, url, src))
    assert (report.processed, report.failed) == (2, 1)
    (error,) = read_lines(tmp_path / "out.jsonl.errors.jsonl")
    assert error["line"] == 3 and "not valid UTF-8" in error["error"]["message"]
    assert_exactly_once(tmp_path / "out.jsonl", ["1", "3"])


def test_duplicate_ids_refused_or_deduped(tmp_path: Path, url: str) -> None:
    src = write_jsonl(tmp_path / "in.jsonl", [{"id": "a", "text": "x"}, {"id": "b", "text": "y"},
                                              {"id": "a", "text": "z"}])
    out = tmp_path / "out.jsonl"
    args = ("batch", "run", "--task", "redact", "--no-model", "--input", str(src), "--output", str(out), "--url", url)
    assert_one_line_error(cli(*args), "duplicate", '"a"', "--dedupe")
    assert not out.exists()
    proc = cli(*args, "--dedupe", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["duplicates_skipped"] == 1
    assert_exactly_once(out, ["a", "b"])
    assert read_lines(out)[0]["result"]["text"] == "x"  # the first of each id is kept


def test_missing_template_fields(tmp_path: Path, url: str) -> None:
    src = write_jsonl(tmp_path / "in.jsonl", [{"id": 1, "title": "Login", "text": "cannot log in"},
                                              {"id": 2, "text": "no title here"}])
    job = make_job(input=str(src), output=str(tmp_path / "out.jsonl"), task="chat", template="{title}: {text}",
                   max_tokens=4, url=[url])
    report = run(job)
    assert (report.processed, report.failed) == (1, 1)
    (error,) = read_lines(tmp_path / "out.jsonl.errors.jsonl")
    assert error["id"] == 2 and "'title'" in error["error"]["message"]
    nobody = job.model_copy(update={"template": "{subject}: {text}", "output": str(tmp_path / "o2.jsonl")})
    with pytest.raises(ConfigError, match="no record has the field 'subject'"):
        run(nobody)
    assert not (tmp_path / "o2.jsonl").exists()
    with pytest.raises(ConfigError, match="placeholder"):
        make_job(input=str(src), output="o", task="chat", template="no fields", url=[url])


def test_empty_input_is_a_clear_error(tmp_path: Path, url: str) -> None:
    src = tmp_path / "empty.jsonl"
    src.write_text("\n\n")
    proc = cli("batch", "run", "--task", "redact", "--input", str(src), "--output", str(tmp_path / "o.jsonl"),
               "--url", url)
    assert_one_line_error(proc, "no records")
    assert_one_line_error(cli("batch", "run", "--input", str(src), "--output", "o.jsonl", "--url", url), "no task")


# --- formats --------------------------------------------------------------------------------------


def test_csv_and_folder_inputs(tmp_path: Path, url: str) -> None:
    csv_file = tmp_path / "in.csv"
    csv_file.write_text('id,text\na,"write to x@example.com, thanks"\nb,plain text\n', encoding="utf-8")
    report = run(rules_job(tmp_path, url, csv_file))
    assert report.format == "csv" and report.processed == 2
    lines = {r["id"]: r for r in read_lines(tmp_path / "out.jsonl")}
    assert "x@example.com" not in lines["a"]["result"]["text"]
    no_ids = tmp_path / "noid.csv"
    no_ids.write_text("text\nfirst\nsecond\n", encoding="utf-8")
    run(rules_job(tmp_path, url, no_ids, output=str(tmp_path / "noid.jsonl")))
    assert_exactly_once(tmp_path / "noid.jsonl", [2, 3])  # line numbers (the header is line 1)
    folder = tmp_path / "docs"
    (folder / "sub").mkdir(parents=True)
    (folder / "one.txt").write_text("电话 13812345678", encoding="utf-8")
    (folder / "sub" / "two.txt").write_text("nothing to hide", encoding="utf-8")
    (folder / ".hidden").write_text("skipped", encoding="utf-8")
    report = run(rules_job(tmp_path, url, folder, output=str(tmp_path / "folder.jsonl")))
    assert report.format == "folder"
    assert_exactly_once(tmp_path / "folder.jsonl", ["one.txt", "sub/two.txt"])


def test_openai_batch_format(tmp_path: Path, url: str) -> None:
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    requests = [
        {"custom_id": "r1", "method": "POST", "url": "/v1/chat/completions",
         "body": {"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 5}},
        {"custom_id": "r2", "method": "POST", "url": "/v1/chat/completions",
         "body": {"messages": [{"role": "user", "content": "Is water wet? Answer in JSON."}],
                  "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": schema}}}},
        {"custom_id": "r3", "method": "POST", "url": "/v1/unknown", "body": {}},
    ]
    src, out = write_jsonl(tmp_path / "batch.jsonl", requests), tmp_path / "out.jsonl"
    report = run(make_job(input=str(src), output=str(out), url=[url]))
    assert report.format == "openai" and (report.processed, report.failed) == (2, 1)
    lines = {line["custom_id"]: line for line in read_lines(out)}
    assert set(lines) == {"r1", "r2"}
    for line in lines.values():
        assert line["id"].startswith("batch_req_") and line["error"] is None
        assert line["response"]["status_code"] == 200 and line["response"]["body"]["choices"]
    answer = json.loads(lines["r2"]["response"]["body"]["choices"][0]["message"]["content"])
    assert isinstance(answer["ok"], bool)
    (error,) = read_lines(tmp_path / "out.jsonl.errors.jsonl")
    assert error["custom_id"] == "r3" and error["response"]["status_code"] == 400 and error["error"]["message"]

    # a request line without custom_id fails alone (the gateway's upload refuses it): it had run under its line
    # number as its custom_id, an id no request named
    nameless = write_jsonl(tmp_path / "nameless.jsonl", [requests[0], {k: v for k, v in requests[0].items()
                                                                        if k != "custom_id"}])
    report = run(make_job(input=str(nameless), output=str(tmp_path / "n.jsonl"), url=[url]))
    assert (report.processed, report.failed) == (1, 1)
    (missing,) = read_lines(tmp_path / "n.jsonl.errors.jsonl")
    assert missing["custom_id"] is None and missing["line"] == 2 and "custom_id" in missing["error"]["message"]


def test_extract_with_schema_file_and_job_file(tmp_path: Path, url: str) -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40}}, "required": ["city"]}
    (tmp_path / "schema.json").write_text(json.dumps(schema))
    src = write_jsonl(tmp_path / "in.jsonl", [{"id": 1, "text": "I flew to Paris."}, {"id": 2, "text": "Tokyo!"}])
    job_file = tmp_path / "job.toml"
    job_file.write_text(f'input = "{src}"\noutput = "{tmp_path / "out.jsonl"}"\ntask = "extract"\n'
                        f'schema = "schema.json"\nurl = "{url}"\n')
    report = run(build_job(job_file))
    assert report.processed + report.failed == 2
    for line in read_lines(tmp_path / "out.jsonl"):
        assert isinstance(line["result"]["city"], str) and line["usage"]["completion_tokens"] > 0
    job_file.write_text(job_file.read_text() + "colour = \"blue\"\n")
    with pytest.raises(ConfigError, match="colour: unknown key"):
        build_job(job_file)


def test_retry_failed_after_fixing_the_job(tmp_path: Path, url: str) -> None:
    src = write_jsonl(tmp_path / "in.jsonl", [{"id": 1, "text": "a@b.com"}, {"id": 2, "body": "c@d.com"}])
    first = run(rules_job(tmp_path, url, src))
    assert (first.processed, first.failed) == (1, 1)
    skipped = run(rules_job(tmp_path, url, src, text_field="body"))
    assert (skipped.processed, skipped.skipped_failed, skipped.skipped_done) == (0, 1, 1)
    retried = run(rules_job(tmp_path, url, src, text_field="body", retry_failed=True))
    assert (retried.processed, retried.failed, retried.complete) == (1, 0, True)
    assert_exactly_once(tmp_path / "out.jsonl", [1, 2])
    assert not (tmp_path / "out.jsonl.errors.jsonl").exists()  # compacted: nothing is failed any more


# --- pieces ---------------------------------------------------------------------------------------


@pytest.fixture
def torn(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "torn.jsonl"
    path.write_bytes(b'{"id": 1}\n{"id": 2}\n{"id": 3, "resu')
    yield path


def test_repair_truncates_a_torn_last_line(torn: Path) -> None:
    assert repair(torn) == len(b'{"id": 3, "resu')
    assert read_lines(torn) == [{"id": 1}, {"id": 2}]
    assert repair(torn) == 0
    torn.write_bytes(b'{"id": 1')
    assert repair(torn) == 8 and torn.read_bytes() == b""


def test_managed_engine_via_model_flag(tmp_path: Path) -> None:
    src = write_jsonl(tmp_path / "in.jsonl", tickets(3))
    proc = cli("batch", "run", "--task", "classify", "--labels", LABELS, "--input", str(src), "--output",
               str(tmp_path / "out.jsonl"), "--model", TEST_MODEL, "--slots", "2", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["concurrency"] == 2
    assert_exactly_once(tmp_path / "out.jsonl", ["t000", "t001", "t002"])


def test_an_openai_embeddings_line_is_answered_by_the_managed_engine(tmp_path: Path) -> None:
    """Each /v1/embeddings line failed: 501 "start it with --embeddings" (a flag `batch run` does not take), then,
    with embeddings on, 400 "pooling type 'none' is not OAI compatible". Now it is answered as the gateway's
    /v1/embeddings answers: mean-pooled, L2-normalised, OpenAI's shape."""
    lines = [{"custom_id": "e1", "method": "POST", "url": "/v1/embeddings", "body": {"input": ["hello", "你好"]}},
             {"custom_id": "c1", "method": "POST", "url": "/v1/chat/completions",
              "body": {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}}]
    src = write_jsonl(tmp_path / "in.jsonl", lines)
    proc = cli("batch", "run", "--input", str(src), "--output", str(tmp_path / "out.jsonl"), "--model", TEST_MODEL,
               "--slots", "1")
    assert proc.returncode == 0, proc.stderr
    by_id = {line["custom_id"]: line["response"] for line in read_lines(tmp_path / "out.jsonl")}
    assert by_id["c1"]["status_code"] == 200 and by_id["e1"]["status_code"] == 200
    data = by_id["e1"]["body"]["data"]
    assert [item["index"] for item in data] == [0, 1] and len(data[0]["embedding"]) == 576  # SmolLM2's width
    assert abs(sum(v * v for v in data[1]["embedding"]) - 1) < 1e-4


def test_input_errors_say_what_the_file_says_once() -> None:
    """An id written `true` was reported as Python's `True`; the tasks a /v1/tasks/ URL may name listed extract
    twice."""
    import asyncio

    from tiankong.batch.inputs import _record_item
    from tiankong.batch.openai_fmt import run_request

    assert str(_record_item(3, {"id": True, "text": "x"}, "id").error).endswith("not true")
    with pytest.raises(ConfigError) as refused:  # refused before any client is used
        asyncio.run(run_request(None, {"url": "/v1/nope", "body": {}}))  # type: ignore[arg-type]
    assert refused.value.one_line().count("extract") == 1
