"""The sql task: the schema's names in the grammar, sqlglot + EXPLAIN checks, read-only execution; SmolLM2 end to
end (library, CLI, HTTP)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from conftest import run_cli, serve_app
from tiankong import Client
from tiankong.engine import EngineProcess
from tiankong.errors import ConfigError
from tiankong.gateway import GatewayState
from tiankong.models import TEST_MODEL
from tiankong.tasks.sql import check_query, empty_copy, read_only, schema_from_db, schema_from_ddl
from tiankong.tasks.sql_grammar import sql_grammar

DDL = """
CREATE TABLE artist (id INTEGER PRIMARY KEY, name TEXT);
CREATE TABLE album (id INTEGER PRIMARY KEY, title TEXT, artist_id INTEGER REFERENCES artist(id), year INTEGER);
CREATE INDEX album_year ON album (year);
"""


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sql") / "music.sqlite"
    con = sqlite3.connect(path)
    con.executescript(DDL)
    con.executemany("INSERT INTO artist VALUES (?, ?)", [(1, "AC/DC"), (2, "Miles Davis"), (3, "Björk")])
    con.executemany("INSERT INTO album VALUES (?, ?, ?, ?)", [
        (1, "Back in Black", 1, 1980), (2, "Highway to Hell", 1, 1979), (3, "Kind of Blue", 2, 1959),
        (4, "Homogenic", 3, 1997)])
    con.commit()
    con.close()
    return path


def names_in_schema(sql: str, schema_ddl: str = DDL) -> None:
    schema = schema_from_ddl(schema_ddl)
    errors, tables, _ = check_query(sql, schema, empty_copy(schema))
    assert errors == [] and tables and set(tables) <= {"artist", "album"}


# --- no engine -------------------------------------------------------------------------------------------

def test_the_schema_comes_from_ddl_or_a_database_file_alike(db: Path) -> None:
    from_ddl, from_db = schema_from_ddl(DDL), schema_from_db(db)
    assert [(t.name, t.columns) for t in from_ddl.tables] == [(t.name, t.columns) for t in from_db.tables] == [
        ("artist", ("id", "name")), ("album", ("id", "title", "artist_id", "year"))]
    for bad in ("", "CREATE TABLE (", "CREATE INDEX i ON t (x)"):
        with pytest.raises(ConfigError):
            schema_from_ddl(bad)


def test_the_grammar_holds_only_the_schemas_names_and_qualifies_per_table() -> None:
    grammar = sql_grammar(schema_from_ddl(DDL))
    assert 'tbl ::= "artist" | "album"' in grammar
    assert '"artist." ("id" | "name")' in grammar and '"album." ("id" | "title" | "artist_id" | "year")' in grammar
    assert "DELETE" not in grammar and "UPDATE" not in grammar and "DROP" not in grammar


def test_queries_are_checked_name_by_name_and_by_explain() -> None:
    schema = schema_from_ddl(DDL)
    con = empty_copy(schema)
    ok, tables, columns = check_query("SELECT album.title FROM album JOIN artist ON album.artist_id = artist.id "
                                      "WHERE artist.name = 'AC/DC'", schema, con)
    assert ok == [] and tables == ["album", "artist"] and "artist.name" in columns
    assert check_query("SELECT T1.title FROM album AS T1", schema, con)[0] == []  # an alias names its table
    assert "has no column 'name'" in check_query("SELECT T1.name FROM album AS T1", schema, con)[0][0]
    for sql, needle in (("SELECT * FROM albums", "no table 'albums'"),
                        ("SELECT album.name FROM album", "has no column 'name'"),
                        ("SELECT genre FROM album", "in none of the tables"),
                        ("DELETE FROM album", "only one SELECT"),
                        ("SELECT title FROM album WHERE", "not valid SQL"),
                        ("SELECT title FROM album WHERE title = 'it's'", "not valid SQL")):  # a token error
        errors = check_query(sql, schema, con)[0]
        assert errors and needle in errors[0], (sql, errors)
    # names all exist, sqlglot parses them: only SQLite's EXPLAIN can refuse these (a mutant without it passes them)
    for sql in ("SELECT no_such_function(album.title) FROM album", "SELECT album.title FROM album WHERE count(*) > 1"):
        errors = check_query(sql, schema, con)[0]
        assert len(errors) == 1 and errors[0].startswith("SQLite:"), (sql, errors)


def test_the_database_connection_cannot_write(db: Path) -> None:
    with read_only(db) as con:
        assert con.execute("SELECT COUNT(*) FROM album").fetchone() == (4,)
        for statement in ("DELETE FROM album", "DROP TABLE album", "INSERT INTO artist VALUES (9, 'x')",
                          "ATTACH DATABASE ':memory:' AS other"):
            with pytest.raises(sqlite3.Error):
                con.execute(statement)
    with read_only(db) as con:
        assert con.execute("SELECT COUNT(*) FROM album").fetchone() == (4,)


# --- SmolLM2 end to end ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def client(smol_engine: EngineProcess) -> Iterator[Client]:
    with Client(smol_engine.url) as c:
        yield c


def test_sql_over_a_database_file_runs_read_only(client: Client, db: Path) -> None:
    result = client.sql("How many albums does AC/DC have?", db=db, execute=True)
    assert result.sql.upper().startswith("SELECT ")
    names_in_schema(result.sql)
    assert result.rows is not None and len(result.rows) <= 100
    assert set(result.tables) <= {"artist", "album"} and result.attempts >= 1
    with read_only(db) as con:  # nothing was changed
        assert con.execute("SELECT COUNT(*) FROM album").fetchone() == (4,)


def test_sql_over_ddl_text_and_another_dialect(client: Client) -> None:
    result = client.sql("How many albums does AC/DC have?", DDL, dialect="postgres")
    assert result.dialect == "postgres" and result.rows is None
    assert result.sql.upper().startswith("SELECT ")
    with pytest.raises(ConfigError, match="once"):
        client.sql("q", DDL, db="x.sqlite")
    with pytest.raises(ConfigError, match="execute"):
        client.sql("q", DDL, execute=True)
    with pytest.raises(ConfigError, match="dialect"):
        client.sql("q", DDL, dialect="klingon")


def test_sql_cli_prints_the_query_and_the_rows(smol_engine: EngineProcess, db: Path) -> None:
    proc = run_cli("sql", "How many albums are there?", "--db", str(db), "--execute", "--json",
                   "--url", smol_engine.url)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["sql"].upper().startswith("SELECT ") and isinstance(data["rows"], list)
    names_in_schema(data["sql"])
    proc = run_cli("sql", "anything", "--url", smol_engine.url)
    assert proc.returncode != 0 and "--db" in proc.stderr


def test_sql_over_http_takes_ddl_text_only(smol_engine: EngineProcess) -> None:
    with serve_app(GatewayState.for_engine(smol_engine, TEST_MODEL)) as url:
        answer = httpx.post(f"{url}/v1/tasks/sql", json={"question": "How many albums are there?", "schema": DDL},
                            timeout=300)
        assert answer.status_code == 200, answer.text
        data = answer.json()
        assert set(data) >= {"sql", "tables", "columns", "dialect"} and "rows" not in data
        names_in_schema(data["sql"])
        refused = httpx.post(f"{url}/v1/tasks/sql", json={"question": "q", "db": "/etc/passwd"}, timeout=60)
        assert refused.status_code == 400 and refused.json()["error"]["param"] in ("db", "schema")
