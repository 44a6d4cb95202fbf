"""The checks of a ``sql`` answer (``sql.py``): every name resolved against the schema the way SQLite resolves it
(aliases per SELECT, names folded as SQLite folds them), ``EXPLAIN`` by SQLite; and the answer given back in the
schema's spelling (``respell``)."""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, Any

from .sql_grammar import fold, quote

if TYPE_CHECKING:
    from .sql import DbSchema


def check_query(sql: str, schema: DbSchema, db: sqlite3.Connection) -> tuple[list[str], list[str], list[str]]:
    """(errors, tables, columns): sqlglot's parse, every table in the schema, every column in a table the query
    names (qualified: in that table), and SQLite's ``EXPLAIN``."""
    import sqlglot  # noqa: PLC0415
    from sqlglot import exp  # noqa: PLC0415

    try:
        tree = sqlglot.parse_one(sql, read="sqlite")
    except sqlglot.errors.SqlglotError as exc:  # ParseError, TokenError (an unclosed quote, …)
        return [f"not valid SQL: {str(exc).splitlines()[0][:200]}"], [], []
    if not isinstance(tree, (exp.Select, exp.Union)):
        return ["only one SELECT query is allowed"], [], []
    errors: list[str] = []
    tables = {t.name for t in tree.find_all(exp.Table)}
    # an alias (T1) stands for its table — in the nearest SELECT that names it (a sub-query may reuse T1 for another
    # table, as Spider's gold queries do), case-insensitively as SQLite reads names; then anywhere in the query
    owners = {fold(t.alias_or_name): t.name for t in tree.find_all(exp.Table)}
    for name in sorted(tables):
        if schema.table(name) is None:
            errors.append(f"no table {name!r} in the schema")
    for select in tree.find_all(exp.Select):  # `FROM events AS e JOIN 员工 AS e`: SQLite binds e.x to the first
        names = [fold(t.alias_or_name) for t in _from_tables(select)]  # table, other dialects refuse the query
        errors += [f"{name!r} names two tables in one FROM: give each its own alias"
                   for name in sorted({n for n in names if names.count(n) > 1})]
    aliases = {a.alias for a in tree.find_all(exp.Alias)}
    columns: set[str] = set()
    for column in tree.find_all(exp.Column):
        name, owner = column.name, _owner(column, owners)
        found = schema.table(owner) if owner else None
        if owner and found is None:
            errors.append(f"{owner}.{name}: no table {owner!r} in the schema")
        elif owner and found is not None and fold(name) not in (fold(c) for c in found.columns):
            errors.append(f"{owner}.{name}: table {owner!r} has no column {name!r}")
        elif not owner and name not in aliases and not any(
                fold(name) in (fold(c) for c in t.columns) for t in map(schema.table, tables) if t):
            errors.append(f"column {name!r} is in none of the tables the query names ({', '.join(sorted(tables))})")
        columns.add(f"{owner}.{name}" if owner else name)
    if not errors:
        try:
            db.execute(f"EXPLAIN {sql}")
        except sqlite3.Error as exc:
            errors.append(f"SQLite: {exc}")
    return errors, sorted(tables), sorted(columns)


def _from_tables(select: Any) -> list[Any]:
    """The tables of one SELECT's FROM / JOIN."""
    from sqlglot import exp  # noqa: PLC0415

    first = select.args.get("from") or select.args.get("from_")
    found = ([first.this] if first is not None else []) + [j.this for j in select.args.get("joins") or []]
    return [t for t in found if isinstance(t, exp.Table)]


def _sources(node: Any) -> list[Any]:
    """The tables of the nearest enclosing SELECT's FROM / JOIN (where SQLite looks for a bare column first)."""
    from sqlglot import exp  # noqa: PLC0415

    while node is not None and not isinstance(node, exp.Select):
        node = node.parent
    return [] if node is None else _from_tables(node)


def _owner(column: Any, owners: dict[str, str]) -> str:
    """The table a column's qualifier names: its alias or name in the nearest enclosing SELECT's FROM / JOIN, else
    anywhere in the query, else the qualifier as written ("" for a bare column)."""
    from sqlglot import exp  # noqa: PLC0415

    qualifier = column.table
    if not qualifier:
        return ""
    node = column.parent
    while node is not None:
        if isinstance(node, exp.Select):
            for source in _from_tables(node):
                if fold(source.alias_or_name) == fold(qualifier):
                    return str(source.name)
        node = node.parent
    return str(owners.get(fold(qualifier), qualifier))


def respell(sql: str, schema: DbSchema, db: sqlite3.Connection) -> str:
    """A checked query with every table and column name in the schema's spelling (the grammar also lets the model
    write them folded: ``cars_data`` for ``CARS_DATA``), the rest of its text as written. The same query to SQLite;
    to a dialect where a quoted name is case-sensitive (Postgres, Snowflake) or a MySQL on Linux, the names it has.
    Unchanged when a name's table cannot be told or the respelt text fails the check."""
    import sqlglot  # noqa: PLC0415
    from sqlglot import exp  # noqa: PLC0415

    tree = sqlglot.parse_one(sql, read="sqlite")
    owners = {fold(t.alias_or_name): t.name for t in tree.find_all(exp.Table)}
    outputs = {fold(a.alias) for a in tree.find_all(exp.Alias)}  # ORDER BY n: a result's name, not a column
    edits: list[tuple[int, int, str]] = []

    def spell(node: Any, name: str) -> None:
        if "start" in node.meta and name != node.this:
            edits.append((node.meta["start"], node.meta["end"] + 1, quote(name)))

    for table in tree.find_all(exp.Table):
        found = schema.table(table.name)
        if found is not None and isinstance(table.this, exp.Identifier):
            spell(table.this, found.name)
    for column in tree.find_all(exp.Column):
        owner = _owner(column, owners)
        pool = [schema.table(owner)] if owner else [schema.table(t.name) for t in _sources(column)]
        spelt = {c for t in pool if t for c in t.columns if fold(c) == fold(column.name)}
        if len(spelt) == 1 and isinstance(column.this, exp.Identifier) and (owner or fold(column.name) not in outputs):
            spell(column.this, spelt.pop())  # a bare name in two tables' spellings is left as written
        qualifier = column.args.get("table")
        found = schema.table(column.table) if column.table else None
        if found is not None and isinstance(qualifier, exp.Identifier) and fold(column.table) not in {
                fold(t.alias) for t in tree.find_all(exp.Table) if t.alias}:
            spell(qualifier, found.name)
    text = sql
    for start, end, name in sorted(edits, reverse=True):
        text = text[:start] + name + text[end:]
    return text if text == sql or not check_query(text, schema, db)[0] else sql
