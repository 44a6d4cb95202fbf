"""What a user's own files look like when they reach `batch run`: a byte-order mark (Excel's "CSV UTF-8",
Windows editors), a format that does not fit the path, a job file kept beside its data, a flag of another task.

Rules-only redaction (`--no-model`): the batch machinery with no engine and no model; nothing is timed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import assert_one_line_error, run_cli
from tiankong.errors import ConfigError
from tiankong.evals.format import load_set
from tiankong.lora.data import load_examples

EXAMPLE_SET = Path(__file__).parents[2] / "evals" / "example.jsonl"

BOM = b"\xef\xbb\xbf"


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_bytes().splitlines()]


def redact(*args: str) -> list[str]:
    return ["batch", "run", "--task", "redact", "--no-model", "--json", "--no-progress", *args]


def test_a_byte_order_mark_opens_the_file_not_the_first_record(tmp_path: Path) -> None:
    """Line 1 of a JSONL file with a BOM failed as "not valid JSON"; a CSV's first column was named "\\ufeffid", so
    the ids were line numbers; the eval set, the LoRA data and a task's --file had the same first byte problem."""
    jsonl = tmp_path / "in.jsonl"
    jsonl.write_bytes(BOM + b'{"id": "a", "text": "mail x@y.com"}\n{"id": "b", "text": "plain"}\n')
    proc = run_cli(*redact("--input", str(jsonl), "--output", str(tmp_path / "j.jsonl")))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["failed"] == 0
    assert sorted(line["id"] for line in lines(tmp_path / "j.jsonl")) == ["a", "b"]
    csv = tmp_path / "in.csv"
    csv.write_bytes(BOM + b"id,text\nr1,call 13812345678\nr2,nothing\n")
    proc = run_cli(*redact("--input", str(csv), "--output", str(tmp_path / "c.jsonl")))
    assert proc.returncode == 0, proc.stderr
    assert sorted(line["id"] for line in lines(tmp_path / "c.jsonl")) == ["r1", "r2"]  # not 2, 3
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "one.txt").write_bytes(BOM + "写信到 x@y.com".encode())
    proc = run_cli(*redact("--input", str(folder), "--output", str(tmp_path / "f.jsonl")))
    assert proc.returncode == 0, proc.stderr
    (line,) = lines(tmp_path / "f.jsonl")
    assert not line["result"]["text"].startswith("\ufeff")
    text = tmp_path / "t.txt"
    text.write_bytes(BOM + b"write to x@y.com")
    proc = run_cli("redact", "--no-model", "--file", str(text), "--json")
    assert proc.returncode == 0, proc.stderr
    assert not json.loads(proc.stdout)["text"].startswith("\ufeff")
    evals = tmp_path / "set.jsonl"
    evals.write_bytes(BOM + Path(EXAMPLE_SET).read_bytes().splitlines(keepends=True)[0])
    assert len(load_set(evals).items) == 1
    yaml_set = tmp_path / "set.yaml"
    yaml_set.write_bytes(BOM + b"- id: one\n  task: classify\n  input: x\n  labels: [a, b]\n  reference: a\n")
    assert len(load_set(yaml_set).items) == 1
    lora = tmp_path / "lora.jsonl"
    lora.write_bytes(BOM + b'{"prompt": "2+2?", "answer": "4"}\n{"prompt": "3+3?", "answer": "6"}\n')
    assert [example.answer for example in load_examples(lora)] == ["4", "6"]
    lora.write_bytes(b'{"prompt": "\xff", "answer": "4"}\n')  # not UTF-8: was an internal error
    with pytest.raises(ConfigError, match="not valid UTF-8"):
        load_examples(lora)


def test_a_format_that_does_not_fit_the_path_is_refused(tmp_path: Path) -> None:
    """`--format folder` on a file walked nothing and said the input was empty."""
    src = tmp_path / "in.jsonl"
    src.write_text('{"id": 1, "text": "x"}\n', encoding="utf-8")
    out = tmp_path / "out.jsonl"
    assert_one_line_error(run_cli(*redact("--input", str(src), "--output", str(out), "--format", "folder")),
                          "is a file", "jsonl")
    assert_one_line_error(run_cli(*redact("--input", str(tmp_path), "--output", str(out), "--format", "jsonl")),
                          "is a directory", "--format folder")
    assert not out.exists()


def test_a_job_file_reads_its_paths_beside_itself_and_its_stored_job_runs_from_anywhere(tmp_path: Path) -> None:
    """`schema` was read beside the job file and `input`/`output` from the current directory: the same job found
    other files when run from elsewhere."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "in.jsonl").write_text('{"id": 1, "text": "x@y.com"}\n', encoding="utf-8")
    job = project / "job.toml"
    job.write_text('input = "in.jsonl"\noutput = "out/result.jsonl"\ntask = "redact"\n[args]\nuse_model = false\n',
                   encoding="utf-8")
    (project / "out").mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = run_cli("batch", "run", "--job", str(job), "--json", "--no-progress", cwd=elsewhere)
    assert proc.returncode == 0, proc.stderr
    assert [line["id"] for line in lines(project / "out" / "result.jsonl")] == [1]
    assert list(elsewhere.iterdir()) == []
    stored = json.loads((project / "out" / "result.jsonl.job.json").read_text(encoding="utf-8"))
    assert Path(stored["input"]).is_absolute() and Path(stored["output"]).is_absolute()
    again = run_cli("batch", "run", "--job", str(project / "out" / "result.jsonl.job.json"), "--json",
                    "--no-progress", cwd=elsewhere)  # the stored job is the same job: resumed, nothing left
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["processed"] == 0
    assert len(lines(project / "out" / "result.jsonl")) == 1


def test_a_flag_of_another_task_is_refused_not_ignored(tmp_path: Path) -> None:
    """`--task classify --words 5` ran classify as if --words were not there."""
    src = tmp_path / "in.jsonl"
    src.write_text('{"id": 1, "text": "x"}\n', encoding="utf-8")
    out = tmp_path / "out.jsonl"
    base = ("batch", "run", "--input", str(src), "--output", str(out), "--url", "http://127.0.0.1:9")
    assert_one_line_error(run_cli(*base, "--task", "classify", "--labels", "a,b", "--words", "5"),
                          "task classify takes no --words")
    assert_one_line_error(run_cli(*base, "--task", "summarize", "--labels", "a,b"), "--labels")
    assert_one_line_error(run_cli(*base, "--task", "chat", "--template", "{text}", "--no-model"), "--no-model")
    assert_one_line_error(run_cli(*base[:-2], "--kind", "dedupe", "--labels", "a,b"), "dedupe job", "--labels")
    job = tmp_path / "job.toml"
    job.write_text(f'input = "{src}"\noutput = "{out}"\ntask = "redact"\nno_model = true\n', encoding="utf-8")
    assert_one_line_error(run_cli("batch", "run", "--job", str(job)), "no_model", "use_model = false")
    assert not out.exists()


def test_a_moved_input_resumes_its_job_and_another_file_does_not(tmp_path: Path) -> None:
    """The job's identity is its input's path: moving the input made the same job "another job"."""
    src = tmp_path / "in.jsonl"
    src.write_text('{"id": 1, "text": "x@y.com"}\n{"id": 2, "text": "plain"}\n', encoding="utf-8")
    out = tmp_path / "out.jsonl"
    assert run_cli(*redact("--input", str(src), "--output", str(out))).returncode == 0
    moved = tmp_path / "archive" / "in.jsonl"
    moved.parent.mkdir()
    src.rename(moved)
    again = run_cli(*redact("--input", str(moved), "--output", str(out)))
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["processed"] == 0 and len(lines(out)) == 2  # resumed: nothing ran twice
    other = tmp_path / "other.jsonl"
    other.write_text('{"id": 1, "text": "something else"}\n', encoding="utf-8")
    moved.unlink()
    assert_one_line_error(run_cli(*redact("--input", str(other), "--output", str(out))), "another job", "input")


@pytest.mark.parametrize("foreign", [
    '{"id": 1, "text": "x@y.com"}\n{"id": 2, "text": "plain"}\n',  # a copy of the input: "12 of 12 done", nothing ran
    '{"id": 1, "foo": 1}\n',  # one stray line: its id counted as done
    '{"id": "zz", "v": 1}\n{"id": "yy", "v": 2}',  # no final newline: its last line was cut off ("repaired")
])
def test_an_output_file_no_job_wrote_is_refused_not_adopted(tmp_path: Path, foreign: str) -> None:
    """An OUT with lines and no OUT.job.json was taken as this job's finished work (a sweep of 2026-12-08)."""
    src = tmp_path / "in.jsonl"
    src.write_text('{"id": 1, "text": "x@y.com"}\n{"id": 2, "text": "plain"}\n', encoding="utf-8")
    out = tmp_path / "out.jsonl"
    out.write_text(foreign, encoding="utf-8")
    assert_one_line_error(run_cli(*redact("--input", str(src), "--output", str(out))), "no batch job wrote",
                          "another --output")
    assert out.read_text(encoding="utf-8") == foreign  # untouched
    assert not out.with_name(out.name + ".job.json").exists()
    empty = tmp_path / "empty.jsonl"
    empty.write_text("", encoding="utf-8")  # an empty file is no one's work: the job writes there
    done = run_cli(*redact("--input", str(src), "--output", str(empty)))
    assert done.returncode == 0 and json.loads(done.stdout)["processed"] == 2, done.stderr


def test_a_stored_job_of_an_older_version_keeps_its_paths_as_typed(tmp_path: Path) -> None:
    """An OUT.job.json written before paths were read beside the job file holds them as typed (relative to where
    it ran): read from beside itself, `results/out.jsonl` became `results/results/out.jsonl` — a fresh output."""
    from tiankong.batch import build_job

    (tmp_path / "results").mkdir()
    stored = tmp_path / "results" / "out.jsonl.job.json"
    stored.write_text(json.dumps({"input": str(tmp_path / "in.jsonl"), "output": "results/out.jsonl",
                                  "format": "jsonl", "task": "redact", "args": {"use_model": False}}),
                      encoding="utf-8")
    assert build_job(stored).output == "results/out.jsonl"
    stored.write_text(json.dumps({"input": "in.jsonl", "output": "out.jsonl", "format": "jsonl", "task": "redact",
                                  "args": {"use_model": False}, "input_head": None}), encoding="utf-8")
    assert build_job(stored).output == str(tmp_path / "results" / "out.jsonl")  # this version's: beside itself


def test_a_line_number_standing_in_for_an_id_never_takes_another_records_id(tmp_path: Path) -> None:
    """Line 2 had no id (its line number, 2, stands in) and line 8 had the id 2: with --dedupe the second was
    dropped as a duplicate — a real record lost without a word — and without it the valid input was refused as
    holding duplicates. Now refused either way, naming both lines and the fix."""
    source = tmp_path / "mixed.jsonl"
    rows = [{"id": 1, "text": "a"}, {"text": "no id here, call 13800138000"}, *[
        {"id": i, "text": f"t{i}"} for i in (3, 4, 5, 6, 7)], {"id": 2, "text": "int id two"}]
    source.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    for extra in ((), ("--dedupe",)):
        proc = run_cli(*redact("--input", str(source), "--output", str(tmp_path / f"o{len(extra)}.jsonl"), *extra))
        assert_one_line_error(proc, "line 2 (no id)", "line 8", "give every record an id")
    # ids that are strings never meet a line number; real duplicates are still kept once under --dedupe
    strings = tmp_path / "strings.jsonl"
    strings.write_text("".join(json.dumps(r) + "\n" for r in [{"id": "2", "text": "x"}, {"text": "y"},
                                                                {"id": "2", "text": "z"}]), encoding="utf-8")
    out = tmp_path / "s.jsonl"
    proc = run_cli(*redact("--input", str(strings), "--output", str(out), "--dedupe"))
    assert proc.returncode == 0, proc.stderr
    assert sorted(json.dumps(r["id"]) for r in lines(out)) == ['"2"', "2"]


def test_status_counts_a_folder_input(tmp_path: Path) -> None:
    """`batch status` printed `?` ("the job's input … is not there") for a folder that was there, and refused it
    as --input; `batch report` counted it."""
    folder = tmp_path / "notes"
    folder.mkdir()
    for i in range(3):
        (folder / f"n{i}.txt").write_text(f"note {i}: mail a{i}@b.cn", encoding="utf-8")
    out = tmp_path / "f.jsonl"
    assert run_cli(*redact("--input", str(folder), "--output", str(out))).returncode == 0
    for extra in ((), ("--input", str(folder))):
        proc = run_cli("batch", "status", str(out), "--json", *extra)
        assert proc.returncode == 0, proc.stderr
        status = json.loads(proc.stdout)
        assert (status["total"], status["done"], status["pending"], status["complete"]) == (3, 3, 0, True), status


def test_a_missing_file_is_one_line_that_names_the_fix(tmp_path: Path) -> None:
    """"the input nothere.jsonl does not exist", "cannot read X: No such file or directory": what, not what to do."""
    missing = str(tmp_path / "nothere.jsonl")
    assert_one_line_error(run_cli(*redact("--input", missing, "--output", str(tmp_path / "o.jsonl"))),
                          "does not exist", "check the input")
    assert_one_line_error(run_cli("redact", "--no-model", "--file", missing), "cannot read", "check the path")
    assert_one_line_error(run_cli("tune", "classify", "--data", missing, "--name", "x", "--no-engine"),
                          "check the --data path")


def test_a_rerun_with_other_arguments_says_the_done_lines_keep_their_answers(tmp_path: Path) -> None:
    """A decider job re-run with other labels printed "done 5/5 · 0 processed" and changed nothing, without a word."""
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"id": i, "text": f"mail a{i}@b.cn"}) + "\n" for i in range(3)),
                      encoding="utf-8")
    out = tmp_path / "o.jsonl"
    first = run_cli(*redact("--input", str(source), "--output", str(out)))
    assert first.returncode == 0 and "note:" not in first.stderr, first.stderr
    again = run_cli(*redact("--input", str(source), "--output", str(out), "--max-tokens", "128"))
    assert again.returncode == 0, again.stderr
    report = json.loads(again.stdout)
    assert report["skipped_done"] == 3 and len(report["notes"]) == 1 and "max_tokens" in report["notes"][0]
    assert "note: max_tokens changed" in again.stderr and "another --output" in again.stderr
    same = run_cli(*redact("--input", str(source), "--output", str(out), "--max-tokens", "128"))
    assert "note:" not in same.stderr  # the job file now holds the new settings: nothing changed since


def test_a_jsonl_line_that_is_not_utf8_fails_with_the_fix(tmp_path: Path) -> None:
    """A CSV row said "convert the file: iconv …"; a JSONL line said only "not valid UTF-8"."""
    source = tmp_path / "in.jsonl"
    source.write_bytes(b'{"id": 1, "text": "ok"}\n' + '{"id": 2, "text": "退款"}\n'.encode("gbk"))
    out = tmp_path / "o.jsonl"
    proc = run_cli(*redact("--input", str(source), "--output", str(out)))
    assert proc.returncode == 3, proc.stderr
    (error,) = lines(tmp_path / "o.jsonl.errors.jsonl")
    assert error["line"] == 2 and "iconv" in error["error"]["message"]
    # and on the console: every row of a GBK file failed with "see the errors file" alone
    assert "the first: line 2" in proc.stderr and "iconv" in proc.stderr, proc.stderr


def test_a_hash_redaction_resumed_under_another_key_says_its_tags_differ(tmp_path: Path) -> None:
    """`style = "hash"` without a salt tags with this installation's key: the same job resumed on another machine
    (or after the key was replaced) tagged its new lines with another key than the done ones, without a word."""
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"id": i, "text": f"mail a{i}@b.cn"}) + "\n" for i in range(3)),
                      encoding="utf-8")
    job = tmp_path / "job.toml"
    job.write_text('input = "in.jsonl"\noutput = "o.jsonl"\ntask = "redact"\n[args]\nstyle = "hash"\n'
                   'use_model = false\n', encoding="utf-8")
    here, there = ({"TIANKONG_DATA_DIR": str(tmp_path / name)} for name in ("here", "there"))
    args = ("batch", "run", "--job", str(job), "--json", "--no-progress")
    first = run_cli(*args, env=here)
    assert first.returncode == 0 and "note:" not in first.stderr, first.stderr
    stored = json.loads((tmp_path / "o.jsonl.job.json").read_text(encoding="utf-8"))
    key = (tmp_path / "here" / "redact-key").read_bytes()
    assert len(stored["redact_key"]) == 16 and stored["redact_key"] not in key.hex()  # a fingerprint, not the key
    same = run_cli(*args, env=here)
    assert same.returncode == 0 and "note:" not in same.stderr, same.stderr
    moved = run_cli(*args, env=there)
    assert moved.returncode == 0, moved.stderr
    assert "note: redact_key changed" in moved.stderr and "another --output" in moved.stderr
    # a salt is in the job's own args (a changed salt is a changed args); the stored job runs again as it is
    job.write_text(job.read_text(encoding="utf-8").replace('"o.jsonl"', '"s.jsonl"') + 'salt = "k"\n',
                   encoding="utf-8")
    assert run_cli(*args, env=there).returncode == 0
    assert "redact_key" not in json.loads((tmp_path / "s.jsonl.job.json").read_text(encoding="utf-8"))
    again = run_cli("batch", "run", "--job", str(tmp_path / "o.jsonl.job.json"), "--no-progress", env=there)
    assert again.returncode == 0 and "note:" not in again.stderr, again.stderr
