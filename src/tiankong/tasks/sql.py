"""sql: a question → one read-only SELECT over a fixed database schema, table and column names in the grammar.

The database schema comes from DDL text (``CREATE TABLE …``, parsed by sqlglot) or a SQLite file (read through a
read-only connection). From it a GBNF grammar of a read-only SQL subset is built (``sql_grammar.py``) whose
identifiers are the schema's (as spelt there or in ASCII lower case, as SQLite reads both; the answer is given back
in the schema's spelling): a bare column is one of the columns of the schema, a qualified one
``table.column`` only a column of that table, tables may be aliased (``FROM track AS T1``) — a hallucinated table
or column cannot be written. The answer is then parsed by sqlglot, every column checked against the tables the
query names (an alias resolved to its table), and ``EXPLAIN``-ed by SQLite (``sql_check.py``; on the file,
read-only, or on an empty copy of the DDL's tables in memory). A failure is retried with the error under a grammar
held to the first answer's FROM clause (its tables and aliases: ``sql_grammar.Scope``; why in two steps:
``sql_grammar``'s text), then refused. With a database file the query can be run, read-only, with a row limit.
"""

from __future__ import annotations

import contextlib
import logging
import re
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..client._shared import Usage
from ..errors import ConfigError, RetriesExhausted, TruncatedOutput
from ..structured.flow import Constraint, Flow, Structured, constrained_flow
from ..structured.prompts import repair_message
from .classify import require_text
from .generate import ANTI_LOOP
from .sql_check import check_query, respell
from .sql_grammar import QUERY_TOKENS, Scope, fold, quote, scope_of, sql_grammar

MAX_TABLES = 200
MAX_COLUMNS = 1000  # per table (SQLite's own default limit is 2000)
MAX_ALL_COLUMNS = 4000  # in the whole schema: each is a choice in the grammar
MAX_DEPTH = 64  # nested parentheses in the DDL (sqlglot's parser recurses on each)
MAX_DDL_CHARS = 200_000
MAX_ROWS = 1000
READ_ACTIONS = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION}
# the pragmas that only describe the schema (schema_from_db reads table_info); any other pragma, and one of these
# with a value to set, is denied: `PRAGMA query_only = OFF` would lift the read-only guard for the connection
READ_PRAGMAS = {"table_info", "table_xinfo", "index_list", "index_info", "index_xinfo", "foreign_key_list"}
SQL_PROMPT = ("You write one SQLite SELECT query that answers the user's question over this database. Use only "
              "these tables and columns; join tables on their id columns.\n{schema}")


@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[str, ...]
    types: tuple[str, ...]

    def ddl(self) -> str:
        cols = ", ".join(f"{quote(c)} {t}".strip() for c, t in zip(self.columns, self.types, strict=True))
        return f"CREATE TABLE {quote(self.name)} ({cols})"


@dataclass(frozen=True)
class DbSchema:
    tables: tuple[Table, ...]

    def table(self, name: str) -> Table | None:
        return next((t for t in self.tables if fold(t.name) == fold(name)), None)

    def prompt(self) -> str:
        """The tables as the model is shown them: names spelt as the grammar writes them (``quote``)."""
        def columns(t: Table) -> str:
            return ", ".join(f"{quote(c)} {ty}".strip() for c, ty in zip(t.columns, t.types, strict=True))

        return "\n".join(f"{quote(t.name)}({columns(t)})" for t in self.tables)


@dataclass
class SqlQuery:
    """A checked query: its text (in ``dialect``), the tables and columns it names, optional result rows."""

    sql: str
    tables: list[str]
    columns: list[str]
    dialect: str = "sqlite"
    rows: list[list[Any]] | None = None
    attempts: int = 1
    structured: Structured[Any] | None = field(default=None, repr=False)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"sql": self.sql, "tables": self.tables, "columns": self.columns,
                               "dialect": self.dialect, "attempts": self.attempts}
        if self.rows is not None:
            out["rows"] = self.rows
        if self.structured is not None:  # what a local run holds: a gateway's client had none of it
            usage = self.structured.usage
            out |= {"finish_reason": self.structured.finish_reason, "evidence": self.structured.evidence(),
                    "usage": {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
                              "total_tokens": usage.total_tokens}}
        return out


def schema_error(message: str, hint: str | None = None) -> ConfigError:
    """A problem with the database schema (``param``: schema, the request field)."""
    error = ConfigError(message, hint=hint)
    error.param = "schema"
    return error


def _depth(text: str) -> int:
    depth = deepest = 0
    for char in text:
        if char == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif char == ")":
            depth = max(0, depth - 1)
    return deepest


_PARSING = threading.local()  # set while this thread parses a user's DDL


def _while_not_parsing(record: logging.LogRecord) -> bool:
    """sqlglot warns on stderr of DDL text it reads as a bare command ("Falling back to parsing as a 'Command'");
    for a user's schema that is noise beside our own error (such text holds no table, and is refused or skipped)."""
    return not getattr(_PARSING, "active", False)


logging.getLogger("sqlglot").addFilter(_while_not_parsing)


def _readable(message: str) -> str:
    """sqlglot's message with its token objects (``<Token token_type: TokenType.L_PAREN, text: (, line: 1, …>``)
    shown as the text the user wrote (``'('``)."""
    return re.sub(r"<Token token_type: [^,]*, text: (.*?), line: \d+.*?>", lambda m: repr(m.group(1)), message)


def schema_from_ddl(ddl: str) -> DbSchema:
    """The tables of ``CREATE TABLE`` statements (other statements are ignored: nothing is executed)."""
    import sqlglot  # noqa: PLC0415 (loaded by the sql task only)
    from sqlglot import exp  # noqa: PLC0415

    if not isinstance(ddl, str) or not ddl.strip():
        raise schema_error("the database schema is empty", hint="give CREATE TABLE statements (or --db FILE)")
    if len(ddl) > MAX_DDL_CHARS:
        raise schema_error(f"the database schema is {len(ddl)} characters, more than {MAX_DDL_CHARS}")
    if _depth(ddl) > MAX_DEPTH:
        raise schema_error(f"the database schema nests parentheses more than {MAX_DEPTH} deep",
                           hint="give plain CREATE TABLE statements")
    if ddl.count(",") > 2 * MAX_ALL_COLUMNS:  # cheap, before a parse that would take seconds
        raise schema_error(f"the database schema lists more than {MAX_ALL_COLUMNS} columns",
                           hint="give only the tables and columns the question needs")
    _PARSING.active = True
    try:
        statements = sqlglot.parse(ddl, read="sqlite")
    except sqlglot.errors.SqlglotError as exc:
        raise schema_error(f"the schema's DDL does not parse: {_readable(str(exc).splitlines()[0])[:200]}",
                           hint="give CREATE TABLE statements in SQLite syntax") from None
    except RecursionError:  # nesting the depth check does not see (it counts parentheses only)
        raise schema_error("the database schema nests too deeply to parse",
                           hint="give plain CREATE TABLE statements") from None
    finally:
        _PARSING.active = False
    tables = []
    for statement in statements:
        if not isinstance(statement, exp.Create) or str(statement.args.get("kind", "")).upper() != "TABLE":
            continue
        target = statement.this
        name = target.this.name if isinstance(target, exp.Schema) else target.name
        # a column without a type (SQLite allows it: ``CREATE TABLE t(a, b)``) parses as a bare identifier, not a
        # ColumnDef: it was dropped without a word, and a table of such columns refused as having none
        columns = [c for c in (target.expressions if isinstance(target, exp.Schema) else [])
                   if isinstance(c, (exp.ColumnDef, exp.Identifier))]
        tables.append(Table(name, tuple(c.name for c in columns),
                            tuple(c.args["kind"].sql("sqlite") if isinstance(c, exp.ColumnDef) and c.args.get("kind")
                                  else "" for c in columns)))
    return _checked(tables)


def schema_from_db(path: str | Path) -> DbSchema:
    """The tables of a SQLite file (opened read-only)."""
    with read_only(path) as db:
        # views are read like tables (a SELECT may name them); they were left out, so a question a view answers
        # could not be asked of it
        names = [(row[0], row[1]) for row in db.execute(
            "SELECT name, type FROM sqlite_master WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite_%' "
            "ORDER BY type = 'view', rowid")]
        tables: list[Table] = []
        views: list[Table] = []
        for name, kind in names:
            quoted = '"' + name.replace('"', '""') + '"'  # always: a table may be named like a keyword
            try:
                info = db.execute(f"PRAGMA table_xinfo({quoted})").fetchall()
            except sqlite3.Error:  # a view over a table that is gone, a virtual table whose module is missing
                continue
            # table_xinfo, not table_info: generated columns (hidden 2 virtual, 3 stored) can be selected, and
            # table_info leaves them out; hidden 1 is a virtual table's hidden column, not part of SELECT *
            info = [r for r in info if r[6] != 1]
            (views if kind == "view" else tables).append(Table(name, tuple(r[1] for r in info),
                                                               tuple(str(r[2]) for r in info)))
    # the views only where they fit the bounds beside the tables: a file the bounds took before views were read is
    # not refused for its views
    if len(tables) + len(views) <= MAX_TABLES and sum(len(t.columns) for t in [*tables, *views]) <= MAX_ALL_COLUMNS:
        tables += views
    return _checked(tables)


def _checked(tables: list[Table]) -> DbSchema:
    tables = [t for t in tables if t.columns]
    if not tables:
        raise schema_error("the database schema has no tables with columns", hint="give CREATE TABLE statements")
    if len(tables) > MAX_TABLES:
        raise schema_error(f"the database schema has {len(tables)} tables, more than {MAX_TABLES}")
    widest = max(tables, key=lambda t: len(t.columns))
    if len(widest.columns) > MAX_COLUMNS:
        raise schema_error(f"table {widest.name[:64]!r} has {len(widest.columns)} columns, more than {MAX_COLUMNS}",
                           hint="give only the tables and columns the question needs")
    if (count := sum(len(t.columns) for t in tables)) > MAX_ALL_COLUMNS:
        raise schema_error(f"the database schema has {count} columns, more than {MAX_ALL_COLUMNS}",
                           hint="give only the tables and columns the question needs")
    return DbSchema(tuple(tables))


@contextlib.contextmanager
def read_only(path: str | Path) -> Iterator[sqlite3.Connection]:
    """A SQLite connection that can only read: ``mode=ro``, ``query_only`` and an authorizer that allows
    SELECT, reads and functions alone."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"no database file at {path}", hint="give the path of a SQLite file")
    try:
        db = sqlite3.connect(f"{file.resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False)
        db.execute("PRAGMA query_only = ON")
        db.execute("SELECT name FROM sqlite_master LIMIT 1")
    except sqlite3.DatabaseError as exc:
        raise ConfigError(f"{path} is not a readable SQLite database: {exc}") from None
    db.set_authorizer(_reads_only)
    try:
        yield db
    finally:
        db.close()


def _reads_only(action: int, arg1: str | None, arg2: str | None, *_: object) -> int:
    if action in READ_ACTIONS:
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_PRAGMA and (arg1 or "").lower() in READ_PRAGMAS:
        return sqlite3.SQLITE_OK  # its argument is the table or index described, never a value to set
    return sqlite3.SQLITE_DENY


def empty_copy(schema: DbSchema) -> sqlite3.Connection:
    """The schema's tables, empty, in memory: what ``EXPLAIN`` needs when there is only DDL."""
    db = sqlite3.connect(":memory:", check_same_thread=False)
    try:
        for table in schema.tables:
            db.execute(table.ddl())
    except sqlite3.Error as exc:  # e.g. a column named twice, a table defined twice
        db.close()
        raise schema_error(f"SQLite refuses the schema's tables: {str(exc)[:200]}",
                           hint="give each table once, each column of a table once") from None
    return db


def sql_constraint(schema: DbSchema, db: sqlite3.Connection, scope: Scope | None = None) -> Constraint:
    def check(text: Any) -> list[str]:
        return check_query(str(text), schema, db)[0]

    return Constraint({"grammar": sql_grammar(schema, scope)}, lambda text: text.strip().rstrip(";").strip(),
                      check, QUERY_TOKENS)


def scoped_flow(messages: list[dict[str, Any]], schema: DbSchema, db: sqlite3.Connection, *, model: str | None,
                max_attempts: int) -> Flow[Structured[Any]]:
    """The first answer under the open grammar; when it fails its checks, the retries (with the errors) under the
    grammar held to its FROM clause — or the open one when its FROM clause cannot be read. A query longer than
    ``QUERY_TOKENS`` is a run-away (a chain of nested calls or sub-queries, which also slows the grammar down at
    every token): it is retried, not given a larger budget."""
    options: dict[str, Any] = {"model": model, "max_tokens": QUERY_TOKENS, "fast_forward": False,
                               "options": ANTI_LOOP, "grow": False}
    try:
        return (yield from constrained_flow(messages, sql_constraint(schema, db), max_attempts=1, **options))
    except (RetriesExhausted, TruncatedOutput) as exc:
        if max_attempts < 2 or not exc.last_raw:
            raise
        first, tried = exc.last_raw.strip().rstrip(";").strip(), exc.attempts
        scope = scope_of(first, schema)
        errors = list(exc.errors) if isinstance(exc, RetriesExhausted) else [
            f"the query was cut off at {QUERY_TOKENS} tokens; write a shorter one"]
        sample = next((str(m.get("content", "")) for m in messages if m.get("role") == "user"), "")
        convo = [*messages, {"role": "assistant", "content": exc.last_raw}, repair_message(errors, sample)]
        try:
            result = yield from constrained_flow(convo, sql_constraint(schema, db, scope),
                                                 max_attempts=max_attempts - 1, **options)
        except (RetriesExhausted, TruncatedOutput) as again:  # every attempt counted, the first one too
            total = tried + again.attempts
            message = again.message.replace(f"after {again.attempts} attempts", f"after {total} attempts")
            usage = _sum(exc.usage, again.usage)
            if isinstance(again, TruncatedOutput):
                raise TruncatedOutput(message, attempts=total, last_raw=again.last_raw, usage=usage) from None
            raise RetriesExhausted(message, attempts=total, last_raw=again.last_raw, errors=again.errors,
                                   usage=usage) from None
        result.attempts += tried
        result.usage = _sum(exc.usage, result.usage) or result.usage
        return result


def _sum(first: object, then: object) -> Any:
    """Two attempts' token usage together (either may be missing: an error raised before the engine answered)."""
    if isinstance(first, Usage) and isinstance(then, Usage):
        return first + then
    return then if isinstance(then, Usage) else first


def sql_flow(question: str, schema: DbSchema, *, db_path: str | Path | None = None, dialect: str = "sqlite",
             execute: bool = False, max_rows: int = 100, model: str | None = None,
             max_attempts: int = 2) -> Flow[SqlQuery]:
    """One checked read-only query answering ``question``; ``execute`` runs it on ``db_path`` (read-only)."""
    require_text(question, "question")
    if execute and db_path is None:
        raise ConfigError("execute needs the database file", hint="give --db FILE (over HTTP only DDL is read)")
    if not 1 <= max_rows <= MAX_ROWS:
        raise ConfigError(f"max_rows must be from 1 to {MAX_ROWS}")
    transpile = _dialect(dialect)
    messages = [{"role": "system", "content": SQL_PROMPT.format(schema=schema.prompt())},
                {"role": "user", "content": question}]
    with contextlib.ExitStack() as stack:
        db = stack.enter_context(read_only(db_path)) if db_path is not None else \
            stack.enter_context(contextlib.closing(empty_copy(schema)))
        try:
            result = yield from scoped_flow(messages, schema, db, model=model, max_attempts=max_attempts)
        except TruncatedOutput as exc:  # its budget is the task's own: the structured-output hint does not apply
            raise TruncatedOutput(exc.message, attempts=exc.attempts, last_raw=exc.last_raw, usage=exc.usage,
                                  hint=RUNAWAY_HINT) from None
        sql = respell(str(result.data), schema, db)
        _, tables, columns = check_query(sql, schema, db)
        rows = run_query(db, sql, max_rows) if execute else None
    return SqlQuery(transpile(sql), tables, columns, dialect, rows, result.attempts, result)


#: what a caller can do when every attempt ran past ``QUERY_TOKENS`` (the task's own bound, not a request field)
RUNAWAY_HINT = ("the model wrote a run-away query each time: ask a simpler or more specific question, give only the "
                "tables it needs, or use a larger model")


#: how long ``--execute`` lets a query run: a join without its condition over large tables ran for as long as the
#: user waited, the CLI and the connection held
EXECUTE_LIMIT_S = 60.0


def run_query(db: sqlite3.Connection, sql: str, max_rows: int, limit_s: float = EXECUTE_LIMIT_S) -> list[list[Any]]:
    deadline = time.monotonic() + limit_s
    db.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)  # nonzero interrupts the query
    try:
        cursor = db.execute(sql)
        return [list(row) for row in cursor.fetchmany(max_rows)]
    except sqlite3.OperationalError as exc:
        if time.monotonic() > deadline:
            raise ConfigError(f"the query ran past {limit_s:g} s and was stopped",
                              hint="ask a narrower question, or run the printed query yourself") from None
        raise ConfigError(f"the query did not run: {exc}", hint="ask again, or check the database") from None
    except sqlite3.Error as exc:
        raise ConfigError(f"the query did not run: {exc}", hint="ask again, or check the database") from None
    finally:
        db.set_progress_handler(None, 0)


def _dialect(dialect: str) -> Any:
    import sqlglot  # noqa: PLC0415
    from sqlglot.dialects.dialect import Dialect  # noqa: PLC0415

    if dialect == "sqlite":
        return lambda sql: sql
    try:
        Dialect.get_or_raise(dialect)
    except ValueError:
        raise ConfigError(f"unknown SQL dialect {dialect!r}", hint="e.g. sqlite, postgres, mysql, duckdb, "
                          "bigquery, snowflake (sqlglot's dialects)", param="dialect") from None
    return lambda sql: sqlglot.transpile(sql, read="sqlite", write=dialect)[0]
