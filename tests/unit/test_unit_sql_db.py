"""The sql task's reading of a SQLite file and its running of a query (no engine): views and generated columns are
part of the schema the model is shown, a query that runs too long is stopped, and a DDL error reads as text."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest

from tiankong.errors import ConfigError
from tiankong.tasks.sql import read_only, run_query, schema_from_db, schema_from_ddl


def _db(tmp_path: Path) -> Path:
    path = tmp_path / "shop.db"
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE item (id INTEGER PRIMARY KEY, price REAL, qty INTEGER,
                           total REAL GENERATED ALWAYS AS (price * qty) VIRTUAL,
                           label TEXT GENERATED ALWAYS AS ('#' || id) STORED);
        CREATE VIEW dear AS SELECT id, total FROM item WHERE total > 10;
        INSERT INTO item (id, price, qty) VALUES (1, 2.5, 10), (2, 1.0, 1);
        CREATE TABLE n (x INTEGER);
        WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 3000) INSERT INTO n SELECT x FROM c;
    """)
    db.commit()
    db.close()
    return path


def test_views_and_generated_columns_are_in_the_schema(tmp_path: Path) -> None:
    schema = schema_from_db(_db(tmp_path))
    item, dear = schema.table("item"), schema.table("dear")
    assert schema.table("n") is not None
    assert item is not None and item.columns == ("id", "price", "qty", "total", "label")
    assert dear is not None and dear.columns == ("id", "total")
    assert "dear(" in schema.prompt() and "total" in schema.prompt()


def test_a_query_on_a_view_and_a_generated_column_runs(tmp_path: Path) -> None:
    with read_only(_db(tmp_path)) as db:
        assert run_query(db, "SELECT id, total FROM dear", 10) == [[1, 25.0]]
        assert run_query(db, "SELECT label FROM item ORDER BY id", 10) == [["#1"], ["#2"]]


def test_a_query_running_past_its_limit_is_stopped_with_a_one_line_error(tmp_path: Path) -> None:
    # 2.7e9 rows: about 25 s on this machine on its own (9e7 took 0.85 s), so without the limit it ends, with a
    # count and no error — the test fails rather than waits for hours
    runaway = "SELECT count(*) FROM n AS a, n AS b, n AS c WHERE c.x <= 300"
    with read_only(_db(tmp_path)) as db:
        with pytest.raises(ConfigError, match=r"ran past 0\.3 s and was stopped"):
            run_query(db, runaway, 10, limit_s=0.3)
        # the connection is usable afterwards: the limit was lifted with the query
        assert run_query(db, "SELECT count(*) FROM item", 10) == [[2]]


def test_a_ddl_parse_error_names_the_text_not_sqlglots_token_object() -> None:
    with pytest.raises(ConfigError) as caught:
        schema_from_ddl("CREATE TABLE (a int)")
    assert "<Token" not in caught.value.message and "'('" in caught.value.message


def test_ddl_read_as_a_bare_command_logs_no_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING), pytest.raises(ConfigError, match="no tables"):
        schema_from_ddl("CREATE TABLE t (a int) garbage here")
    assert not [r for r in caplog.records if r.name.startswith("sqlglot")]  # our error says it, on one line


def test_views_past_the_table_bound_are_left_out_not_refused(tmp_path: Path) -> None:
    """A file of 150 tables read before views were; 60 views beside them must not make it "more than 200"."""
    path = tmp_path / "wide.db"
    db = sqlite3.connect(path)
    db.executescript("".join(f"CREATE TABLE t{i} (a INTEGER);" for i in range(150)) +
                     "".join(f"CREATE VIEW v{i} AS SELECT a FROM t{i};" for i in range(60)))
    db.close()
    schema = schema_from_db(path)
    assert len(schema.tables) == 150 and schema.table("v0") is None
