"""What a users'-conditions sweep of the other CLI verbs found (2026-12-07): a relative engine path that never
ran (and blamed the model), a closed stdin that crashed every TEXT verb, option values a settings model refused
with a pydantic dump, outputs found unwritable only after the work, a tolerance that crashed `eval compare`, a
label typo dropped without a word, one corrupt registry file that stopped `deciders list`, and flags taken that
did nothing. Each is a one-line error (or a right answer) now, before any engine starts."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import TIANKONG, assert_one_line_error, run_cli
from tiankong.engine import EngineBinary


def cli_in(cwd: Path, *args: str, env: dict[str, str] | None = None,
           close_stdin: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run([TIANKONG, *args], capture_output=not close_stdin, text=True, cwd=cwd,
                          env={**os.environ, **(env or {})}, timeout=300,
                          stdin=None if close_stdin else subprocess.DEVNULL,
                          stdout=subprocess.PIPE if close_stdin else None,
                          stderr=subprocess.PIPE if close_stdin else None,
                          preexec_fn=(lambda: os.close(0)) if close_stdin else None)


def test_a_relative_engine_path_runs_the_file_it_names(tmp_path: Path, engine_binary: EngineBinary) -> None:
    # before: `./lsrv` became `lsrv`, looked up on $PATH: "does not run … rebuild", and `models verify` blamed the model
    (tmp_path / "lsrv").symlink_to(engine_binary.path)
    for flag in ("./lsrv", "lsrv"):
        proc = cli_in(tmp_path, "engine", "info", "--llama-server", flag, "--json")
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["path"] == str(tmp_path / "lsrv")


def test_a_closed_stdin_is_the_usage_error_not_a_crash(tmp_path: Path) -> None:
    for verb in (["classify", "--decider", "guard"], ["run"]):
        proc = cli_in(tmp_path, *verb, close_stdin=True)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr and "internal error" not in proc.stderr
        assert "stdin" in proc.stderr, proc.stderr


@pytest.mark.parametrize("args, option", [
    (["bench", "ladder", "--url", "http://127.0.0.1:9", "--max-tokens", "0"], "--max-tokens"),
    (["bench", "ladder", "--url", "http://127.0.0.1:9", "--step-time", "-1"], "--step-time"),
    (["bench", "speed", "--url", "http://127.0.0.1:9", "--repeats", "0"], "--repeats"),
])
def test_an_option_a_settings_model_refuses_is_named_in_one_line(args: list[str], option: str) -> None:
    proc = run_cli(*args)
    assert proc.returncode == 2 and "pydantic" not in proc.stderr and "internal error" not in proc.stderr
    assert_one_line_error(proc, option)


def test_outputs_are_checked_before_the_work(tmp_path: Path) -> None:
    a_file = tmp_path / "afile"
    a_file.write_text("x", encoding="utf-8")
    eval_set = tmp_path / "set.jsonl"
    assert run_cli("eval", "init", str(eval_set)).returncode == 0
    # each would have run every item or both sides first (minutes), then failed on its output
    assert_one_line_error(run_cli("eval", "run", str(eval_set), "--model", "smollm2-135m-instruct:q4_0", "--out",
                                  str(a_file)), "--out", "not a folder")
    assert_one_line_error(run_cli("eval", "run", str(eval_set), "--model", "smollm2-135m-instruct:q4_0",
                                  "--cache-dir", str(a_file)), "--cache-dir")
    assert_one_line_error(run_cli("bench", "speed", "--model", "smollm2-135m-instruct:q4_0", "--out", str(a_file)),
                          "--out")
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps({"text": "hello", "label": "injection"}) + "\n", encoding="utf-8")
    plot = run_cli("cascade", "eval", "--data", str(data), "--task", "guard", "--large-decider", "guard", "--plot",
                   str(tmp_path / "out.txt"))
    assert plot.returncode == 2 and "must end in .png" in plot.stderr
    folder = run_cli("cascade", "eval", "--data", str(data), "--task", "guard", "--large-decider", "guard",
                     "--markdown", str(tmp_path))
    assert_one_line_error(folder, "--markdown", "is a folder")
    assert_one_line_error(run_cli("eval", "init", str(tmp_path), "--force"), "is a folder")


def test_eval_compare_and_report_refuse_what_they_cannot_do(tmp_path: Path) -> None:
    run = tmp_path / "missing-run.json"  # the tolerance is checked before the runs are read
    assert_one_line_error(run_cli("eval", "compare", str(run), "--tolerance", "-5"), "tolerance")
    assert_one_line_error(run_cli("eval", "compare", str(run), "--tolerance", "nan"), "tolerance")
    same = str(tmp_path / "same.md")
    assert_one_line_error(run_cli("eval", "report", str(run), "--md", same, "--html", same), "same file")
    items = run_cli("eval", "compare", str(run), "--items")
    assert items.returncode == 2 and "--json" in items.stderr


def test_tune_refuses_a_description_or_method_list_it_would_drop(tmp_path: Path) -> None:
    data = tmp_path / "ex.jsonl"
    rows = [{"text": f"win a free prize number {i}" if i % 2 else f"meeting moved to {i} pm", "label":
             "spam" if i % 2 else "ham"} for i in range(24)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    env = {"TIANKONG_DATA_DIR": str(tmp_path / "data")}
    base = ["tune", "classify", "--data", str(data), "--name", "t", "--no-engine", "--dry-run"]
    no_equals = cli_in(tmp_path, *base, "--methods", "tfidf", "--describe", "spam", env=env)
    assert no_equals.returncode == 2 and "LABEL=words" in no_equals.stderr
    assert_one_line_error(cli_in(tmp_path, *base, "--methods", "tfidf", "--describe", "spma=ads", env=env),
                          "spma")
    empty = cli_in(tmp_path, *base, "--methods", "", env=env)
    assert empty.returncode == 2 and "--methods is empty" in empty.stderr
    assert cli_in(tmp_path, *base, "--methods", "tfidf", "--describe", "spam=ads", env=env).returncode == 0
    # --no-engine asked for no engine: its default methods are the engine-free ones, none "skipped … pass --model"
    plain = cli_in(tmp_path, *base, "--json", env=env)
    assert plain.returncode == 0, plain.stderr
    report = json.loads(plain.stdout)
    assert set(report["skipped"]) <= {"probe-part"}  # the part is skipped only where it is not installed (here)
    assert {r["method"] for r in report["results"]} | set(report["skipped"]) == {"tfidf", "probe-part"}
    engine_asked = cli_in(tmp_path, *base, "--methods", "tfidf,zeroshot", env=env)
    assert engine_asked.returncode == 2 and "zeroshot" in engine_asked.stderr and "--no-engine" in engine_asked.stderr


def test_one_corrupt_decider_file_does_not_hide_the_others(tmp_path: Path) -> None:
    (tmp_path / "deciders" / "bad").mkdir(parents=True)
    (tmp_path / "deciders" / "bad" / "v1.json").write_text("garbage", encoding="utf-8")
    proc = cli_in(tmp_path, "deciders", "list", "--json", env={"TIANKONG_DATA_DIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    assert "guard" in {row["name"] for row in json.loads(proc.stdout)}
    assert "tiankong deciders rm bad" in proc.stderr


def test_sql_max_rows_without_execute_is_refused(tmp_path: Path) -> None:
    ddl = tmp_path / "d.sql"
    ddl.write_text("CREATE TABLE t (a int);", encoding="utf-8")
    proc = run_cli("sql", "how many rows", "--ddl", str(ddl), "--max-rows", "5")
    assert proc.returncode == 2 and "add --execute" in proc.stderr


def test_serve_names_the_option_a_config_check_refuses(tmp_path: Path) -> None:
    # the review: `serve` re-validates the whole config, and the first name of an error's place is its section
    proc = run_cli("serve", "--port", "70000", "--model", "smollm2-135m-instruct:q4_0")
    assert proc.returncode == 2 and "--port" in proc.stderr and "--server" not in proc.stderr, proc.stderr
