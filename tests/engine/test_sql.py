"""The sql task: the schema's names in the grammar, sqlglot + EXPLAIN checks, read-only execution; SmolLM2 end to
end (library, CLI, HTTP)."""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlglot

from conftest import run_cli, serve_app
from tiankong import Client
from tiankong.engine import EngineBinary, EngineConfig, EngineProcess
from tiankong.errors import ConfigError, TruncatedOutput
from tiankong.gateway import GatewayState
from tiankong.models import DEFAULT_MODEL
from tiankong.tasks.sql import DbSchema, check_query, empty_copy, read_only, schema_from_db, schema_from_ddl, sql_flow
from tiankong.tasks.sql import respell as respell
from tiankong.tasks.sql_grammar import QUERY_TOKENS, Scope, scope_of, sql_grammar

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


# --- a GBNF acceptor (the subset our grammars use: literals, classes, groups, ? * + {m,n}) ---------------

TOKEN = re.compile(r'\s+|"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\]|[A-Za-z][A-Za-z0-9_-]*|\{\d+(?:,\d*)?\}|[()|?*+]')


def gbnf(text: str) -> dict[str, Any]:
    rules = {}
    for name, body in re.findall(r"^([A-Za-z][A-Za-z0-9_-]*) ::= (.*?)(?=^[A-Za-z][A-Za-z0-9_-]* ::= |\Z)", text,
                                 re.M | re.S):
        tokens = [t for t in TOKEN.findall(body) if not t.isspace()]
        rules[name], rest = _alternatives(tokens)
        assert not rest, (name, rest)
    return rules


def _alternatives(tokens: list[str]) -> tuple[Any, list[str]]:
    options = []
    while True:
        sequence: list[Any] = []
        while tokens and tokens[0] not in "|)":
            atom, tokens = _atom(tokens)
            sequence.append(atom)
        options.append(("seq", sequence))
        if not tokens or tokens[0] == ")":
            return ("alt", options), tokens
        tokens = tokens[1:]


def _atom(tokens: list[str]) -> tuple[Any, list[str]]:
    head, tokens = tokens[0], tokens[1:]
    if head == "(":
        atom, tokens = _alternatives(tokens)
        tokens = tokens[1:]
    elif head.startswith('"'):
        atom = ("lit", json.loads(head))
    elif head.startswith("["):
        inner = head[1:-1].encode().decode("unicode_escape")
        negate = inner.startswith("^")
        atom = ("cls", re.compile("[" + ("^" if negate else "") + re.escape(inner[negate:]).replace("\\-", "-") + "]"))
    else:
        atom = ("ref", head)
    while tokens and (tokens[0] in "?*+" or tokens[0].startswith("{")):
        low, high = {"?": (0, 1), "*": (0, 99), "+": (1, 99)}.get(tokens[0], (0, 0))
        if tokens[0].startswith("{"):
            bounds = tokens[0][1:-1].split(",")
            low = int(bounds[0])
            high = low if len(bounds) == 1 else int(bounds[1]) if bounds[1] else 99
        atom, tokens = ("rep", atom, low, high), tokens[1:]
    return atom, tokens


def accepts(grammar: str, text: str) -> bool:
    rules = gbnf(grammar)

    @cache
    def ends(node: Any, at: int) -> frozenset[int]:
        kind = node[0]
        if kind == "lit":
            return frozenset({at + len(node[1])}) if text.startswith(node[1], at) else frozenset()
        if kind == "cls":
            return frozenset({at + 1}) if at < len(text) and node[1].fullmatch(text[at]) else frozenset()
        if kind == "ref":
            return ends(rules[node[1]], at)
        if kind == "alt":
            return frozenset().union(*(ends(option, at) for option in node[1]))
        if kind == "seq":
            here = frozenset({at})
            for part in node[1]:
                here = frozenset().union(*(ends(part, p) for p in here))
            return here
        _, inner, low, high = node
        out, here = set(), frozenset({at})
        for count in range(high + 1):
            if count >= low:
                out |= here
            here = frozenset().union(*(ends(inner, p) for p in here)) if here else here
        return frozenset(out)

    def freeze(node: Any) -> Any:
        if node[0] in ("alt", "seq"):
            return (node[0], tuple(freeze(n) for n in node[1]))
        return ("rep", freeze(node[1]), node[2], node[3]) if node[0] == "rep" else node

    rules = {name: freeze(node) for name, node in rules.items()}
    return len(text) in ends(("ref", "root"), 0)


# --- no engine -------------------------------------------------------------------------------------------

def test_the_schema_comes_from_ddl_or_a_database_file_alike(db: Path) -> None:
    from_ddl, from_db = schema_from_ddl(DDL), schema_from_db(db)
    assert [(t.name, t.columns) for t in from_ddl.tables] == [(t.name, t.columns) for t in from_db.tables] == [
        ("artist", ("id", "name")), ("album", ("id", "title", "artist_id", "year"))]
    for bad in ("", "CREATE TABLE (", "CREATE INDEX i ON t (x)"):
        with pytest.raises(ConfigError):
            schema_from_ddl(bad)


def test_columns_without_a_type_are_columns() -> None:
    # SQLite allows them (`CREATE TABLE t(a, b)`); sqlglot reads them as bare names, which were dropped without a
    # word — and a table of only such columns was refused as having none
    assert schema_from_ddl("CREATE TABLE t(a TEXT, b)").tables[0].columns == ("a", "b")
    assert schema_from_ddl("CREATE TABLE t(a, b, PRIMARY KEY (a))").tables[0].columns == ("a", "b")
    assert schema_from_ddl('CREATE TABLE t("my col", c INTEGER REFERENCES x(id))').tables[0].types == ("", "INTEGER")


def test_an_unknown_dialect_names_its_field() -> None:
    from tiankong.tasks.sql import _dialect

    with pytest.raises(ConfigError, match="unknown SQL dialect") as raised:
        _dialect("klingon")
    assert raised.value.param == "dialect"  # over HTTP: the 400's param


def test_one_alias_for_two_tables_is_refused() -> None:
    # `FROM album AS e JOIN artist AS e`: SQLite binds e.x to the first table; other dialects refuse the query
    schema = schema_from_ddl(DDL)
    con = empty_copy(schema)
    errors = check_query("SELECT e.title FROM album AS e JOIN artist AS e ON e.artist_id = e.id", schema, con)[0]
    assert errors and "names two tables" in errors[0], errors
    assert check_query("SELECT a.title FROM album AS a JOIN album AS b ON a.id = b.id", schema, con)[0] == []
    assert check_query("SELECT title FROM album WHERE id IN (SELECT T1.id FROM album AS T1)", schema, con)[0] == []


def test_the_grammar_holds_only_the_schemas_names_and_qualifies_per_table() -> None:
    grammar = sql_grammar(schema_from_ddl(DDL))
    assert 'tbl ::= "artist" | "album"' in grammar
    assert '"artist." ("id" | "name")' in grammar and '"album." ("id" | "title" | "artist_id" | "year")' in grammar
    assert "DELETE" not in grammar and "UPDATE" not in grammar and "DROP" not in grammar


def test_a_name_is_written_in_the_schemas_case_or_in_lower_case_as_sqlite_reads_both() -> None:
    """Held to ``CARS_DATA``'s spelling, the 0.5B model that writes ``cars_data`` turned to another table (Spider)."""
    schema = schema_from_ddl("CREATE TABLE CARS_DATA (Id INTEGER, Cylinders INTEGER); CREATE TABLE car_names "
                             "(MakeId INTEGER, Model TEXT);")
    con = empty_copy(schema)
    grammar = sql_grammar(schema)
    for sql in ("SELECT COUNT(*) FROM cars_data WHERE cylinders > 4",
                "SELECT COUNT(*) FROM CARS_DATA WHERE Cylinders > 4", "SELECT cars_data.id FROM CARS_DATA",
                "SELECT T1.model FROM car_names AS T1"):
        assert accepts(grammar, sql) and check_query(sql, schema, con)[0] == [], sql
    for sql in ("SELECT COUNT(*) FROM Cars_Data", "SELECT COUNT(*) FROM CAR_NAMES",
                "SELECT cars_data.model FROM CARS_DATA"):
        assert not accepts(grammar, sql), sql  # other spellings stay out; a column only of its own table
    scope = scope_of("SELECT COUNT(*) FROM cars_data AS T1 WHERE T1.cylinders > 4", schema)
    assert scope is not None and scope.sources == (("CARS_DATA", "T1", ""),)
    assert accepts(sql_grammar(schema, scope), "SELECT COUNT(*) FROM CARS_DATA AS T1 WHERE T1.cylinders > 4")
    # the answer comes back in the schema's spelling, the rest of its text as written (a string literal untouched)
    mixed = "SELECT cars_data.cylinders, T1.model FROM CARS_DATA JOIN car_names AS T1 ON T1.makeid = id WHERE " \
            "T1.model = 'cars_data'"
    spelt = respell(mixed, schema, con)
    assert spelt == ("SELECT CARS_DATA.Cylinders, T1.Model FROM CARS_DATA JOIN car_names AS T1 ON T1.MakeId = Id "
                     "WHERE T1.Model = 'cars_data'")
    assert check_query(spelt, schema, con)[1:] == (["CARS_DATA", "car_names"],
                                                   ["CARS_DATA.Cylinders", "Id", "car_names.MakeId", "car_names.Model"])
    # a bare column takes its own SELECT's table's spelling; a result's name is left as written
    two = schema_from_ddl("CREATE TABLE singer (Id INTEGER, Name TEXT); CREATE TABLE concert (singer_id INTEGER, "
                          "NAME TEXT);")
    sql = "SELECT name AS n FROM singer WHERE id IN (SELECT singer_id FROM concert WHERE name = 'x') ORDER BY n"
    assert respell(sql, two, empty_copy(two)) == ("SELECT Name AS n FROM singer WHERE Id IN (SELECT singer_id FROM "
                                                  "concert WHERE NAME = 'x') ORDER BY n")


def chat_answer(content: str) -> dict[str, Any]:
    """A chat completion as llama-server answers it (a scripted answer to a flow's one call)."""
    return {"choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1}}


def test_the_task_gives_a_folded_answer_back_in_the_schemas_spelling() -> None:
    schema = schema_from_ddl("CREATE TABLE CARS_DATA (Id INTEGER, Cylinders INTEGER);")
    flow = sql_flow("How many cars have more than 4 cylinders?", schema, dialect="postgres")
    calls = next(flow)
    assert len(calls) == 1 and '"cars_data"' in calls[0].body["grammar"]
    with pytest.raises(StopIteration) as done:
        flow.send([chat_answer("SELECT COUNT(*) FROM cars_data WHERE cylinders > 4")])
    query = done.value.value
    assert (query.tables, query.columns) == (["CARS_DATA"], ["Cylinders"]) and "FROM CARS_DATA" in query.sql, query


def test_only_ascii_letters_fold_as_sqlite_folds_them() -> None:
    """SQLite reads ``ärger`` as another name than ``ÄRGER`` — and a double-quoted name it does not know as a string,
    a silently wrong answer — so only the ASCII letters of a name fold; a quoted keyword name keeps its case where a
    dialect's quoted names are case-sensitive."""
    schema = schema_from_ddl('CREATE TABLE "Order" (id INTEGER, "ÄRGER" TEXT);')
    con = empty_copy(schema)
    grammar = sql_grammar(schema)
    assert accepts(grammar, 'SELECT "ÄRGER" FROM "order"') and not accepts(grammar, 'SELECT "ärger" FROM "order"')
    assert schema.table("ORDER") is not None and schema.table("örder") is None
    spelt = respell('SELECT "ÄRGER" FROM "order" WHERE id > 1', schema, con)
    assert spelt == 'SELECT "ÄRGER" FROM "Order" WHERE id > 1'
    assert '"Order"' in sqlglot.transpile(spelt, read="sqlite", write="postgres")[0]


def test_a_retry_qualifies_an_aliased_table_by_its_alias_only_and_keys_are_never_positions() -> None:
    """After ``FROM artist AS a`` SQLite knows no ``artist.id`` (a 135M model wrote exactly that, twice); and
    ``ORDER BY 3`` is a result column's position, out of range as small models write it: neither can be written."""
    schema = schema_from_ddl(DDL)
    scope = scope_of("SELECT COUNT(*) FROM artist AS a WHERE artist.id = 1", schema)
    assert scope is not None and scope.sources == (("artist", "a", ""),)
    retry = sql_grammar(schema, scope)
    assert '"a." ("id" | "name")' in retry and '"artist."' not in retry and "qcol" not in retry
    joined = sql_grammar(schema, scope_of("SELECT * FROM artist AS a JOIN album ON album.artist_id = a.id", schema))
    assert '"album." (' in joined and '"artist."' not in joined and "col ::= qcol | acol | bcol" in joined
    for grammar in (sql_grammar(schema), retry):
        assert 'group ::= " GROUP BY " gkey' in grammar and 'order ::= " ORDER BY " key' in grammar
        rules = {line.split(" ::= ")[0]: line.split(" ::= ", 1)[1] for line in grammar.splitlines() if " ::= " in line}
        head = {name: rules[name].split(")")[0] for name in ("key", "gkey")}  # what a key may start with
        assert not any(word in head[name] for name in head for word in ("lit", "num", "value")), head  # (3) too
        assert "agg" in head["key"] and "agg" not in head["gkey"]  # ORDER BY COUNT(*) yes, GROUP BY COUNT(*) no
        # ... and ORDER BY an aggregate only in a query that groups (SQLite: "misuse of aggregate: COUNT()")
        assert not accepts(grammar, "SELECT name FROM artist AS a ORDER BY COUNT(*) DESC LIMIT 1")
        assert accepts(grammar, "SELECT name FROM artist AS a GROUP BY name ORDER BY COUNT(*) DESC LIMIT 1")
        assert accepts(grammar, "SELECT name FROM artist AS a ORDER BY name DESC LIMIT 1")


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
    # valid for the grammar, names all in the schema: SQLite's EXPLAIN alone refuses them
    grammar = sql_grammar(schema)
    for sql in ("SELECT album.title FROM album WHERE COUNT(*) > 1", "SELECT SUM(COUNT(*)) FROM album",
                "SELECT id FROM album AS T1 JOIN artist AS T2 ON T1.artist_id = T2.id"):  # ambiguous: EXPLAIN says
        assert accepts(grammar, sql), sql
        errors = check_query(sql, schema, con)[0]
        assert len(errors) == 1 and errors[0].startswith("SQLite:"), (sql, errors)


def test_an_alias_is_read_in_its_own_select_and_in_any_case() -> None:
    """Spider's queries reuse T1 in a sub-query for another table, and SQLite reads t1 as T1: neither is an error
    (each cost a retry with a misleading message), while a column its alias's table lacks still is — stricter than
    SQLite, which looks outward for a T1 that has the column (only a retry is spent on such a query)."""
    schema = schema_from_ddl(DDL)
    con = empty_copy(schema)
    for sql in ("SELECT T1.name FROM artist AS T1 WHERE T1.id IN (SELECT T1.artist_id FROM album AS T1 "
                "WHERE T1.year > 1990)", "SELECT t1.title FROM album AS T1",
                "SELECT T1.name FROM artist AS T1 WHERE EXISTS (SELECT 1 FROM album AS T2 WHERE T2.artist_id = T1.id)"):
        assert check_query(sql, schema, con)[0] == [], sql
    for sql in ("SELECT T1.name FROM album AS T1",
                "SELECT T1.name FROM artist AS T1 WHERE T1.id IN (SELECT T1.name FROM album AS T1)"):
        assert "table 'album' has no column 'name'" in check_query(sql, schema, con)[0][0], sql


def test_names_that_are_sqlite_keywords_are_quoted_in_the_ddl_the_grammar_and_a_file(tmp_path: Path) -> None:
    """A table named ``transaction`` with a column ``to``: bare, SQLite refuses the DDL and the PRAGMA."""
    ddl = 'CREATE TABLE "transaction" (id INTEGER, "to" TEXT, amount REAL);'
    schema = schema_from_ddl(ddl)
    con = empty_copy(schema)  # refused as a syntax error before
    grammar = sql_grammar(schema)
    query = 'SELECT "to", SUM(amount) FROM "transaction" GROUP BY "to"'
    assert accepts(grammar, query) and not accepts(grammar, "SELECT to FROM transaction")
    assert schema.prompt() == '"transaction"(id INTEGER, "to" TEXT, amount REAL)'  # as the grammar spells them
    # a keyword both SQLite and sqlglot take bare stays bare (the model is shown it so)
    person = schema_from_ddl("CREATE TABLE person (id INTEGER, first TEXT);")
    assert 'bcol ::= "first" | "id"' in sql_grammar(person) and person.prompt() == "person(id INTEGER, first TEXT)"
    assert check_query(query, schema, con)[0] == []
    path = tmp_path / "keywords.sqlite"
    with sqlite3.connect(path) as made:
        made.execute(ddl)
        made.execute("""INSERT INTO "transaction" VALUES (1, 'rent', 900.0)""")
    made.close()
    assert [(t.name, t.columns) for t in schema_from_db(path).tables] == [("transaction", ("id", "to", "amount"))]
    with read_only(path) as db:
        assert db.execute(query).fetchall() == [("rent", 900.0)]
    # an alias that is a keyword: SQLite refuses it, so a retry is not held to it (it runs under the open grammar)
    assert scope_of("SELECT title FROM album AS to", schema_from_ddl(DDL)) is None
    assert scope_of("SELECT title FROM album AS T9", schema_from_ddl(DDL)) is not None


def test_a_first_answer_with_an_aliased_sub_query_is_not_held_to_its_from_clause() -> None:
    """The retry's sub-queries take no alias: held to ``FROM album``, the only correlation left to write,
    ``album.artist_id = album.artist_id``, is always true — a wrong answer that runs. Such an answer has no scope
    (its retry runs under the open grammar, where the alias can be written)."""
    schema = schema_from_ddl(DDL)
    first = ("SELECT title FROM album WHERE year = (SELECT MAX(year) FROM album AS b WHERE b.artist_id = "
             "album.artist_id AND b.name = 1)")
    assert scope_of(first, schema) is None
    assert accepts(sql_grammar(schema), first.replace(" AND b.name = 1", ""))
    plain = "SELECT title FROM album WHERE artist_id IN (SELECT id FROM artist WHERE name = 'AC/DC')"
    assert scope_of(plain, schema) == Scope((("album", "", ""),), ("album", "artist"), ("artist",))
    other = "SELECT title FROM album WHERE artist_id IN (SELECT T2.id FROM artist AS T2 WHERE T2.name = 'AC/DC')"
    assert scope_of(other, schema) == Scope((("album", "", ""),), ("album", "artist"), ("artist",))  # artist.id


def test_ifnull_takes_two_arguments_as_sqlite_does() -> None:
    grammar = sql_grammar(schema_from_ddl(DDL))
    assert accepts(grammar, "SELECT IFNULL(title, 'none') FROM album")
    assert not accepts(grammar, "SELECT IFNULL(title, year, 0) FROM album")  # SQLite: wrong number of arguments
    assert accepts(grammar, "SELECT COALESCE(title, year, 'none') FROM album")


ALIASED = ("SELECT T2.title FROM artist AS T1 JOIN album AS T2 ON T1.id = T2.artist_id WHERE T1.name = 'AC/DC'",
           "SELECT a.title, ar.name FROM album a LEFT JOIN artist ar ON a.artist_id = ar.id ORDER BY a.year DESC "
           "LIMIT 2")
QUALIFIED = ("SELECT album.title FROM album JOIN artist ON album.artist_id = artist.id WHERE artist.name = 'AC/DC'",
             "SELECT artist.name, COUNT(album.id) FROM artist JOIN album ON album.artist_id = artist.id "
             "GROUP BY artist.name HAVING COUNT(*) > 1")
SQLITE = ("SELECT COUNT(*) FROM album WHERE strftime('%Y', date('now', '-1 month')) > '1900' AND year BETWEEN 1950 "
          "AND 2000", "SELECT ROUND(AVG(year), 1), MIN(LOWER(title)), MAX(UPPER(title)) FROM album",
          "SELECT CASE WHEN year < 1980 THEN 'old' ELSE 'new' END, COALESCE(title, '') FROM album WHERE title LIKE "
          "'%Black%' OR artist_id IN (1, 2)",
          "SELECT title FROM album WHERE julianday('now') - julianday(CAST(year AS TEXT) || '-01-01') > 0 AND "
          "artist_id IN (SELECT id FROM artist WHERE name = 'AC/DC')")


def test_the_grammar_writes_aliases_qualified_columns_and_sqlites_functions_which_validate_and_run(db: Path) -> None:
    schema = schema_from_ddl(DDL)
    grammar = sql_grammar(schema)
    with read_only(db) as con:
        for sql in (*ALIASED, *QUALIFIED, *SQLITE):
            assert accepts(grammar, sql), sql
            errors, tables, _ = check_query(sql, schema, con)
            assert errors == [] and set(tables) <= {"album", "artist"}, (sql, errors)
            assert con.execute(sql).fetchall(), sql
        assert con.execute(ALIASED[0]).fetchall() == [("Back in Black",), ("Highway to Hell",)] or \
            sorted(con.execute(ALIASED[0]).fetchall()) == [("Back in Black",), ("Highway to Hell",)]
    for sql in ("SELECT album.name FROM album", "SELECT genre FROM album", "SELECT * FROM albums",
                "DELETE FROM album", "SELECT title FROM album; DROP TABLE album", "SELECT albums.title FROM album"):
        assert not accepts(grammar, sql), sql  # names not in the schema, writes: not writable


def test_a_bare_column_of_a_table_not_in_from_is_refused_then_cannot_be_written() -> None:
    schema = schema_from_ddl(DDL)
    con = empty_copy(schema)
    wrong = "SELECT COUNT(artist_id) FROM artist"  # artist_id is a column of album, not of artist
    assert accepts(sql_grammar(schema), wrong)  # the open grammar cannot know the FROM clause yet …
    assert "in none of the tables" in check_query(wrong, schema, con)[0][0]  # … the check refuses it
    scope = scope_of(wrong, schema)
    assert scope == Scope((("artist", "", ""),), ("artist",))
    held = sql_grammar(schema, scope)  # … and the retry's grammar cannot write it
    assert not accepts(held, wrong) and accepts(held, "SELECT COUNT(id) FROM artist")
    assert not accepts(held, "SELECT COUNT(id) FROM album")  # the FROM clause is the first answer's
    # an alias stands for its table: T1.name is writable in the open grammar, refused, then not writable
    aliased = "SELECT T1.name FROM album AS T1 JOIN artist AS T2 ON T1.artist_id = T2.id"
    assert accepts(sql_grammar(schema), aliased) and "has no column 'name'" in check_query(aliased, schema, con)[0][0]
    held = sql_grammar(schema, scope_of(aliased, schema))
    assert not accepts(held, aliased)
    assert accepts(held, aliased.replace("T1.name", "T2.name")) and accepts(held, aliased.replace("T1.name", "title"))
    assert not accepts(held, "SELECT genre FROM album AS T1 JOIN artist AS T2 ON T1.artist_id = T2.id")
    assert scope_of("SELECT x FROM albums", schema) is None and scope_of("SELECT (", schema) is None


def test_a_column_two_joined_tables_hold_is_written_qualified_in_the_retry() -> None:
    """``id`` is in artist and album: bare after ``FROM album JOIN artist`` SQLite refuses it ("ambiguous column
    name"); the open grammar cannot know the FROM clause, the retry's does, and writes it qualified only."""
    schema = schema_from_ddl(DDL)
    ambiguous = "SELECT title FROM album AS T1 JOIN artist AS T2 ON T1.artist_id = T2.id WHERE id = 1"
    assert accepts(sql_grammar(schema), ambiguous)
    assert "ambiguous" in check_query(ambiguous, schema, empty_copy(schema))[0][0]
    held = sql_grammar(schema, scope_of(ambiguous, schema))
    assert not accepts(held, ambiguous) and accepts(held, ambiguous.replace("id = 1", "T2.id = 1"))
    assert accepts(held, ambiguous.replace("id = 1", "name = 'x'"))  # a column one of them holds stays bare
    one = sql_grammar(schema, scope_of("SELECT title FROM album WHERE id = 1", schema))
    assert accepts(one, "SELECT title FROM album WHERE id = 1")  # one table: nothing is ambiguous
    # a sub-query over one of them writes it bare (the table is named by an alias only outside: the one right way)
    inner = ambiguous.replace("id = 1", "id NOT IN (SELECT id FROM album WHERE year > 1990)")
    nested = sql_grammar(schema, scope_of(inner, schema))
    assert accepts(nested, inner.replace("WHERE id NOT IN", "WHERE T1.id NOT IN"))
    joined_twice = "SELECT a.title FROM album AS a JOIN album AS b ON a.id = b.id"
    self_join = sql_grammar(schema, scope_of(joined_twice, schema))
    assert "bcol" not in self_join and accepts(self_join, joined_twice)  # every column is in both


def test_the_database_connection_cannot_write(db: Path) -> None:
    with read_only(db) as con:
        assert con.execute("SELECT COUNT(*) FROM album").fetchone() == (4,)
        for statement in ("DELETE FROM album", "DROP TABLE album", "INSERT INTO artist VALUES (9, 'x')",
                          "ATTACH DATABASE ':memory:' AS other"):
            with pytest.raises(sqlite3.Error):
                con.execute(statement)
        # a pragma that sets (query_only = OFF lifts the read-only guard for the connection) is denied; the ones
        # that describe the schema still run
        for statement in ("PRAGMA query_only = OFF", "PRAGMA journal_mode = WAL", "PRAGMA writable_schema = ON"):
            with pytest.raises(sqlite3.DatabaseError, match="not authorized"):
                con.execute(statement)
        assert [row[1] for row in con.execute("PRAGMA table_info(album)")][:1] == ["id"]
    with read_only(db) as con:
        assert con.execute("SELECT COUNT(*) FROM album").fetchone() == (4,)


# --- end to end on the default (coder) model ------------------------------------------------------------
# SQL is where a model's quality shows: the test model (SmolLM2-135M) writes run-on queries that fill the 160-token
# cap on this schema since it is the Q4_0 file (docs/testing.md; benchmarks/results/tests/
# pytest-q4_0-first-2026-12-06.txt), so the queries are written by the 0.5B coder model,
# as `tiankong sql` writes them by default.


@pytest.fixture(scope="module")
def coder(engine_binary: EngineBinary, default_model_path: Path) -> Iterator[EngineProcess]:
    engine = EngineProcess(EngineConfig(model=default_model_path, ctx=4096, slots=2, alias=DEFAULT_MODEL),
                           engine_binary).start()
    try:
        yield engine
    finally:
        engine.stop()


@pytest.fixture(scope="module")
def client(coder: EngineProcess) -> Iterator[Client]:
    with Client(coder.url) as c:
        yield c


def test_sql_over_a_database_file_runs_read_only(client: Client, db: Path) -> None:
    result = client.sql("How many albums does AC/DC have?", db=db, execute=True)
    assert result.sql.upper().startswith("SELECT ")
    names_in_schema(result.sql)
    assert result.rows is not None and len(result.rows) <= 100
    assert set(result.tables) <= {"artist", "album"} and result.attempts >= 1
    with read_only(db) as con:  # nothing was changed
        assert con.execute("SELECT COUNT(*) FROM album").fetchone() == (4,)


def test_the_engine_compiles_both_grammars_and_an_alias_query_it_writes_validates_and_runs(
        client: Client, db: Path) -> None:
    schema = schema_from_db(db)
    messages = [{"role": "system", "content": "Write one SQLite query.\n" + schema.prompt()},
                {"role": "user", "content": "List the titles of the albums by AC/DC."}]
    scope = Scope((("album", "T1", ""), ("artist", "T2", "JOIN")), ("album", "artist"))
    for grammar in (sql_grammar(schema), sql_grammar(schema, scope)):
        sql = client.chat(messages, grammar=grammar, max_tokens=120).text.strip()
        assert accepts(grammar, sql) or not sql.endswith(("'", ")")) and sql, sql  # cut at max_tokens at worst
    sql = client.chat(messages, grammar=sql_grammar(schema, scope), max_tokens=200).text.strip()
    assert sql.startswith("SELECT ") and " FROM album AS T1 JOIN artist AS T2 ON " in sql, sql
    with read_only(db) as con:
        errors, tables, _ = check_query(sql, schema, con)
        if not errors:  # names are the grammar's; a 135M model may still misuse an aggregate (EXPLAIN's part)
            assert tables == ["album", "artist"] and isinstance(con.execute(sql).fetchall(), list)


def run_flow(flow: Any, url: str, first: str) -> Any:
    """Drive a task flow against llama-server, with ``first`` as the engine's first answer (a query a model
    writes: the retry after it is what is tested); every later call goes to the real engine."""
    calls, answers = next(flow), []
    with httpx.Client(base_url=url, timeout=300) as http:
        while True:
            answers = []
            for call in calls:
                if first:
                    answers.append({"choices": [{"index": 0, "finish_reason": "stop", "message": {
                        "role": "assistant", "content": first}}], "usage": {"prompt_tokens": 1,
                                                                            "completion_tokens": 1}})
                    first = ""
                    continue
                answers.append(http.request(call.method, call.path, json=call.body).json())
            try:
                calls = flow.send(answers)
            except StopIteration as done:
                return done.value


def test_a_first_answer_out_of_scope_is_retried_under_its_from_clause(coder: EngineProcess, db: Path) -> None:
    schema: DbSchema = schema_from_db(db)
    sent: list[Any] = []
    flow = sql_flow("How many artists are there?", schema, db_path=db)

    def watched() -> Any:
        calls = next(flow)
        while True:
            sent.extend(calls)
            try:
                calls = flow.send((yield calls))
            except StopIteration as done:
                return done.value

    result = run_flow(watched(), coder.url, "SELECT COUNT(artist_id) FROM artist")
    assert result.attempts == 2 and len(sent) == 2
    retry_grammar = sent[1].body["grammar"]
    assert retry_grammar == sql_grammar(schema, Scope((("artist", "", ""),), ("artist",)))
    assert '"artist_id"' not in retry_grammar and "COUNT(artist_id)" in json.dumps(sent[1].body["messages"])
    assert "artist_id" not in result.sql and result.tables == ["artist"] and accepts(retry_grammar, result.sql)
    with read_only(db) as con:
        assert check_query(result.sql, schema, con)[0] == [] and con.execute(result.sql).fetchall()


def test_a_run_away_first_answer_is_retried_at_the_same_cap_not_grown(db: Path) -> None:
    """A query cut off at the cap (a chain of nested sub-queries) is retried under its FROM clause with the same
    budget: a larger one let llama.cpp's grammar slow at every token until a 278-token answer froze the engine for
    18 minutes (docs/benchmarks.md, 2026-12-05); the longest right answer measured is ≈ 70 tokens."""
    schema = schema_from_db(db)
    flow = sql_flow("Which albums are by AC/DC?", schema, db_path=db)
    first = next(flow)
    assert first[0].body["max_tokens"] == QUERY_TOKENS <= 160
    run_away = "SELECT title FROM album WHERE artist_id IN (SELECT artist_id FROM album WHERE artist_id IN (SELECT"
    retry = flow.send([{"choices": [{"index": 0, "finish_reason": "length", "message": {
        "role": "assistant", "content": run_away}}], "usage": {"prompt_tokens": 1, "completion_tokens": QUERY_TOKENS}}])
    assert retry[0].body["max_tokens"] == QUERY_TOKENS
    assert f"cut off at {QUERY_TOKENS} tokens" in json.dumps(retry[0].body["messages"])
    assert retry[0].body["grammar"] == sql_grammar(schema)  # a cut-off query does not parse: the open grammar
    with pytest.raises(TruncatedOutput, match="after 2 attempts") as cut:  # the retry runs away too: both counted
        flow.send([{"choices": [{"index": 0, "finish_reason": "length", "message": {
            "role": "assistant", "content": run_away}}], "usage": {"prompt_tokens": 1, "completion_tokens": 160}}])
    assert cut.value.attempts == 2 and cut.value.usage.completion_tokens == QUERY_TOKENS + 160  # both attempts' tokens


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


def test_sql_cli_prints_the_query_and_the_rows(coder: EngineProcess, db: Path) -> None:
    proc = run_cli("sql", "How many albums are there?", "--db", str(db), "--execute", "--json",
                   "--url", coder.url)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["sql"].upper().startswith("SELECT ") and isinstance(data["rows"], list)
    names_in_schema(data["sql"])
    proc = run_cli("sql", "anything", "--url", coder.url)
    assert proc.returncode != 0 and "--db" in proc.stderr


def test_sql_over_http_takes_ddl_text_only(coder: EngineProcess) -> None:
    with serve_app(GatewayState.for_engine(coder, DEFAULT_MODEL)) as url:
        answer = httpx.post(f"{url}/v1/tasks/sql", json={"question": "How many albums are there?", "schema": DDL},
                            timeout=300)
        assert answer.status_code == 200, answer.text
        data = answer.json()
        assert set(data) >= {"sql", "tables", "columns", "dialect"} and "rows" not in data
        names_in_schema(data["sql"])
        refused = httpx.post(f"{url}/v1/tasks/sql", json={"question": "q", "db": "/etc/passwd"}, timeout=60)
        assert refused.status_code == 400 and refused.json()["error"]["param"] in ("db", "schema")
