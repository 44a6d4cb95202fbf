"""What a read-only sweep of the task verbs found (2026-12-07, second sweep): a TEXT argument that is not UTF-8
taken (and --json then printed invalid UTF-8), a DDL file misread with replacement characters or refused for its
byte-order mark, and options taken that did nothing (route's upstream options without --upstream-url, guard's
--decider beside --no-decider, redact's --salt without --style hash). Each is refused before any engine starts."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from conftest import TIANKONG, assert_one_line_error, run_cli


def test_a_text_argument_that_is_not_utf8_is_refused() -> None:
    proc = subprocess.run([os.fsencode(TIANKONG), b"redact", b"--no-model", b"--json", b"caf\xe9 13800138000"],
                          capture_output=True, timeout=60)
    assert proc.returncode != 0 and b"not valid UTF-8" in proc.stderr and proc.stdout == b"", proc.stderr


def test_a_ddl_file_is_read_as_utf8_strictly_and_without_its_byte_order_mark(tmp_path: Path) -> None:
    latin = tmp_path / "latin.sql"
    latin.write_bytes(b"CREATE TABLE caf\xe9s (id INTEGER, n\xe4me TEXT);")
    assert_one_line_error(run_cli("sql", "list all names", "--ddl", str(latin), "--url", "http://127.0.0.1:9"),
                          "not valid UTF-8", "latin.sql")
    bom = tmp_path / "bom.sql"
    bom.write_bytes(b"\xef\xbb\xbfCREATE TABLE users (id INTEGER, name TEXT);")
    proc = run_cli("sql", "list all names", "--ddl", str(bom), "--url", "http://127.0.0.1:9")
    assert "does not parse" not in proc.stderr and "cannot reach" in proc.stderr, proc.stderr  # read: on to the engine


def test_options_that_would_do_nothing_are_refused(tmp_path: Path) -> None:
    routes = tmp_path / "routes.json"
    routes.write_text(json.dumps([{"name": "chat", "description": "small talk", "target": "task:chat"},
                                  {"name": "code", "description": "code", "target": "task:code"}]), encoding="utf-8")
    for flags in (["--upstream-model", "big"], ["--upstream-key-env", "NOPE"], ["--no-redact"]):
        proc = run_cli("route", "What is 17*23?", "--routes", str(routes), *flags, "--url", "http://127.0.0.1:9")
        assert proc.returncode == 2 and "--upstream-url" in proc.stderr, proc.stderr
    proc = run_cli("guard", "--no-decider", "--decider", "nonexistent", "hello there")
    assert proc.returncode == 2 and "--no-decider" in proc.stderr, proc.stderr
    assert_one_line_error(run_cli("redact", "--no-model", "--salt", "s1", "call 13800138000"), "salt", "hash")


def test_labels_typed_with_a_chinese_input_methods_commas_are_split() -> None:
    """`--labels 退款，物流查询，产品故障` (the full-width comma Chinese input methods type) was one label, refused as
    "at least two distinct labels"."""
    from tiankong.cli import parse_labels

    assert parse_labels("退款，物流查询、产品故障, 账户问题") == ["退款", "物流查询", "产品故障", "账户问题"]
    proc = run_cli("classify", "--labels", "退款，物流", "--url", "http://127.0.0.1:9", "退款两周了还没到账")
    assert "two distinct" not in proc.stderr and "cannot reach" in proc.stderr, proc.stderr


def test_rerank_docs_are_the_files_lines_and_a_blank_line_is_refused(tmp_path: Path) -> None:
    """`--docs FILE` split at form feeds and U+2028 too and dropped blank lines: 3 lines became 5 candidates, and an
    answer's index was not the line's."""
    docs = tmp_path / "docs.txt"
    docs.write_text("first line\fwith a form feed\nsecond\u2028line\nthird: password reset\n\n", encoding="utf-8")
    proc = run_cli("rerank", "password reset", "--docs", str(docs), "--mode", "bm25", "--json")
    assert proc.returncode == 0, proc.stderr
    answer = json.loads(proc.stdout)
    assert len(answer["scores"]) == 3 and answer["results"][0]["index"] == 2
    blank = tmp_path / "blank.txt"
    blank.write_text("a\n\nb\n", encoding="utf-8")
    assert_one_line_error(run_cli("rerank", "x", "--docs", str(blank), "--mode", "bm25"), "line 2 is blank")
