"""The GBNF grammars of the read-only SQL subset ``sql`` answers in, with the schema's names written in.

SELECT [DISTINCT] items FROM table [[AS] alias] [[LEFT|INNER] JOIN table [[AS] alias] ON cond]… [WHERE cond]
[GROUP BY keys [HAVING cond]] [ORDER BY key [ASC|DESC], …] [LIMIT n [OFFSET n]] — a key is a value that does not
start with a literal, bracketed or not (SQLite reads ``ORDER BY 3`` and ``ORDER BY (3)`` as the third result column: a
small model writes numbers there that are out of range, "3rd GROUP BY term out of range", and never means a
position), a GROUP BY key does not start with an aggregate (SQLite refuses ``GROUP BY COUNT(*)``), nor does an ORDER BY
key in a query without GROUP BY (``SELECT city FROM airports ORDER BY COUNT(*) DESC``: "misuse of aggregate", 8 of the
26 answers refused on Spider development questions 120–516 took that shape; ``border``: only a key's head is held,
``ORDER BY year + COUNT(*)`` or ``ROUND(AVG(x))`` there still reach the check). Values are
columns, literals, aggregates (COUNT/SUM/AVG/MIN/MAX/GROUP_CONCAT, with DISTINCT), SQLite's common scalar functions
(ROUND, LOWER/UPPER, LENGTH, ABS, TRIM, SUBSTR, REPLACE, INSTR, COALESCE/IFNULL/NULLIF, CAST) and its date
functions (strftime, date, time, datetime, julianday, unixepoch with modifiers such as ``'-1 month'``), CASE,
arithmetic, ``||`` and parentheses; conditions compare, LIKE, IN (a list or a sub-query), BETWEEN, IS [NOT]
NULL, [NOT] EXISTS, with AND/OR/NOT. Every repetition is bounded (8 items, 4 joins, 6 predicates per condition,
4 terms per value…): a small model that repeats itself reaches the end of the grammar, not the token cap.

Names. A table is one of the schema's; ``table.column`` only a column of that table; each name as the schema spells
it or with its ASCII letters in lower case (``fold``: SQLite reads both, and small models write the lower case). A
table alias is short (1–3 characters: ``T1``, ``t``, ``ar``), the way models write them. Which table an alias
stands for, and which tables a bare column may come from, depend on the FROM clause — and in SQL the FROM clause
comes *after* the select list, so a context-free grammar (GBNF) cannot hold that scope without one copy of the whole
expression grammar per possible FROM clause (tables × aliases × joins: exponential). So scope is enforced in two
steps:

1. ``sql_grammar(schema)``: the open grammar. A bare column is any column of the schema; ``alias.column`` any
   column of the schema. The answer is then checked (sqlglot resolves each alias to its table, every column
   against the tables the query names; SQLite ``EXPLAIN``s it).
2. When that check fails, the FROM clause the model chose is read with sqlglot (``Scope``) and the retry is
   generated under ``sql_grammar(schema, scope)``: the outer FROM clause is forced to the same tables, aliases
   and join kinds; ``alias.column`` only a column of the table the alias stands for; ``table.column`` not for a
   table the outer FROM names by an alias only (SQLite knows no ``orders.id`` after ``FROM orders AS o`` — nor,
   then, inside a sub-query over that table: a bare column is written there); a bare column only a column
   of the tables the first answer names, and not one two tables of the outer FROM both hold (ambiguous there:
   written qualified) unless a sub-query's table holds it; sub-queries only those tables. A column of a table that
   is not in the query cannot be written there. (A query that passed step 1's check already keeps to its scope, so
   generating FROM first every time would only double the cost.)

(llama.cpp ends a rule at a line break outside parentheses: a rule that goes on to the next line is wrapped.)
Written by hand because no library emits a grammar for llama.cpp from a database schema; sqlglot checks the
result.
"""

from __future__ import annotations

import json
import re
import string
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .sql import DbSchema, Table

#: the most tokens a query may take (the grammar ends it; this bounds a run-away sub-query chain). The longest
#: right answer in the Chinook benchmark's stores is 232 characters (≈ 70 tokens). 320 was too many: a run-away
#: that nests sub-queries slows llama.cpp's grammar down at every token (17 tokens/s at 160 tokens, 0.4 at 275 on
#: 2 cores), and with two slots one such answer (dev question f02-7's retry) froze the engine — every slot — for
#: 18 minutes before token 278 (2026-12-05). At 160 a run-away is cut while the grammar is still fast, and retried.
QUERY_TOKENS = 160

#: a table alias the grammar lets a model write: 1-3 characters (``T1``, ``t``, ``ar``)
ALIAS = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,2}")


def quote(name: str) -> str:
    """A table or column name as SQL text: bare when it is a plain identifier, else double-quoted."""
    return name if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) and name.upper() not in RESERVED \
        else '"' + name.replace('"', '""') + '"'


#: the names written double-quoted: those SQLite or sqlglot's SQLite reader refuse (or misread) bare as a column in
#: the select list, WHERE, ORDER BY, GROUP BY, after ``T1.``, or as a table (read on SQLite 3.40 and sqlglot 30 over
#: SQLite's keyword list and sqlglot's extra words; ``transaction`` and ``to`` fail, ``first`` and ``match`` pass), and
#: the words the list held before (BY, LEFT, KEY, END, ASC, DESC). Quoted is always valid; the schema prompt shows
#: the same spelling (``DbSchema.prompt``), so a model never sees a name bare that the grammar only writes quoted.
_KEYWORDS = """
ADD ALL ALTER AND ANY AS ASC AUTOINCREMENT BETWEEN BY CASE CAST CHECK COLLATE COMMIT CONSTRAINT CREATE CROSS CUBE
CURRENT_DATE CURRENT_TIME CURRENT_TIMESTAMP DEFAULT DEFERRABLE DELETE DESC DESCRIBE DISTINCT DROP ELSE END ESCAPE EXCEPT
EXISTS FALSE FETCH FOR FOREIGN FROM GLOB GRANT GROUP HAVING IF ILIKE IN INDEX INNER INSERT INTERSECT INTO IS ISNULL
JOIN KEY LATERAL LEFT LIKE LIMIT LOCK NOT NOTHING NOTNULL NULL OFFSET ON OR ORDER OUTER PRIMARY QUALIFY RAISE
REFERENCES REGEXP RETURNING RLIKE ROLLBACK ROLLUP SELECT SET TABLE THEN TO TRANSACTION TRUE UNION UNIQUE UPDATE USING
VALUES WHEN WHERE WINDOW WITH"""
RESERVED = frozenset(_KEYWORDS.split())


def _either(*names: str) -> str:
    """A function name in upper or lower case (models write both; SQLite reads both)."""
    return "(" + " | ".join(f'"{n}" | "{n.lower()}"' for n in names) + ")"


RULES = r"""
items ::= "*" | item (", " item){0,7}
item ::= value (" AS " outname)?
outname ::= [a-z] [a-z0-9_]{0,30}
where ::= " WHERE " cond
group ::= " GROUP BY " gkey (", " gkey){0,3} (" HAVING " cond)?
order ::= " ORDER BY " key (" ASC" | " DESC")? (", " key (" ASC" | " DESC")?){0,2}
border ::= " ORDER BY " gkey (" ASC" | " DESC")? (", " gkey (" ASC" | " DESC")?){0,2}
key ::= (agg | call | case | col | "(" key ")") (arith term){0,3}
gkey ::= (call | case | col | "(" gkey ")") (arith term){0,3}
limit ::= " LIMIT " [1-9] [0-9]{0,3} (" OFFSET " [0-9]{1,4})?
cond ::= pred ((" AND " | " OR ") pred){0,5}
pred ::= ("NOT ")? (value cmp value | value " IS " ("NOT ")? "NULL" | value (" NOT")? " LIKE " value
       | value (" NOT")? " IN (" (query | lit (", " lit){0,11}) ")" | value (" NOT")? " BETWEEN " value " AND " value
       | "EXISTS (" query ")" | "(" cond ")")
cmp ::= " = " | " != " | " <> " | " < " | " <= " | " > " | " >= "
value ::= term (arith term){0,3}
arith ::= " + " | " - " | " * " | " / " | " % " | " || "
term ::= agg | call | case | col | lit | "(" value ")" | "(" query ")"
agg ::= "COUNT(*)" | AGG "(" ("DISTINCT ")? value ")" | GROUPCONCAT "(" value (", " str)? ")"
call ::= (ONE "(" value ")" | ROUND "(" value (", " [0-9])? ")" | SUBSTR "(" value ", " value (", " value)? ")"
       | REPLACE "(" value ", " value ", " value ")" | TWO "(" value ", " value ")"
       | MANY "(" value (", " value){1,3} ")" | CAST "(" value " AS " ("INTEGER" | "REAL" | "TEXT" | "NUMERIC") ")"
       | STRFTIME "(" str ", " value (", " str){0,3} ")" | DATEFN "(" value (", " str){0,3} ")")
case ::= ("CASE" ((" WHEN " cond " THEN " value){1,4} | " " value (" WHEN " lit " THEN " value){1,4})
         (" ELSE " value)? " END")
lit ::= num | str | "NULL" | "CURRENT_DATE" | "CURRENT_TIMESTAMP"
num ::= "-"? [0-9]{1,12} ("." [0-9]{1,6})?
str ::= "'" ([^'\\\n] | "''"){0,80} "'"
""" + f"""AGG ::= {_either("COUNT", "SUM", "AVG", "MIN", "MAX", "TOTAL")}
GROUPCONCAT ::= {_either("GROUP_CONCAT")}
ONE ::= {_either("LOWER", "UPPER", "LENGTH", "ABS", "TRIM", "LTRIM", "RTRIM", "TYPEOF")}
ROUND ::= {_either("ROUND")}
SUBSTR ::= {_either("SUBSTR")}
REPLACE ::= {_either("REPLACE")}
TWO ::= {_either("INSTR", "NULLIF", "IFNULL")}
MANY ::= {_either("COALESCE")}
CAST ::= {_either("CAST")}
STRFTIME ::= {_either("STRFTIME")}
DATEFN ::= {_either("DATE", "TIME", "DATETIME", "JULIANDAY", "UNIXEPOCH")}
"""


@dataclass(frozen=True)
class Scope:
    """The outer FROM clause of a first answer and every table that answer names (sub-queries included).

    ``sources``: (table, alias or "", join kind: "" for the first table, "JOIN" or "LEFT JOIN" after it)."""

    sources: tuple[tuple[str, str, str], ...]
    tables: tuple[str, ...]
    #: the tables named inside its sub-queries
    inner: tuple[str, ...] = ()


def _literal(text: str) -> str:
    """A GBNF string literal (JSON escaping is a subset GBNF reads)."""
    return json.dumps(text, ensure_ascii=False)


_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def fold(name: str) -> str:
    """A name as SQLite compares names: ASCII letters in lower case, every other character as it is (SQLite reads
    ``ÄRGER`` and ``ärger`` as two names, and a double-quoted name it does not know as a string)."""
    return name.translate(_ASCII_LOWER)


def _spellings(names: list[str]) -> str:
    """Schema names as the grammar writes them: as the schema spells them or folded (``fold``). SQLite reads a name in
    any ASCII case, and a small model writes ``cars_data`` for the schema's ``CARS_DATA`` as it writes ``count(*)``;
    held to the schema's case it turned to another table whose first token it could write (``CAR_NAMES``: three of
    Spider's development questions, docs/benchmarks.md). The answer is given back in the schema's spelling
    (``sql_check.respell``)."""
    return " | ".join(_literal(n) for n in dict.fromkeys(v for n in names for v in (n, fold(n))))


def _columns(schema: DbSchema, prefix: str, table: str, alias: bool = False) -> str:
    found = _table(schema, table)
    spelt = list(dict.fromkeys([prefix + ".", *([] if alias else [fold(prefix) + "."])]))
    head = _literal(spelt[0]) if len(spelt) == 1 else f"({_spellings(spelt)})"
    return f"{head} ({_spellings([quote(c) for c in found.columns])})"


def sql_grammar(schema: DbSchema, scope: Scope | None = None) -> str:
    """The open grammar (``scope`` None), or the grammar of a retry held to ``scope`` (see the module's text)."""
    names = [t.name for t in schema.tables] if scope is None else list(scope.tables)
    tables = _spellings([quote(t) for t in names])
    # a column two tables of the outer FROM both hold is ambiguous there (SQLite: "ambiguous column name: PetID", 3
    # of the 26 refusals on Spider development questions 120–516, the retry writing it bare again): the retry
    # writes it qualified only — unless a sub-query's table holds it (``… WHERE T1.id NOT IN (SELECT id FROM album)``
    # after ``FROM album AS T1 JOIN artist AS T2``: there the bare name is the one right way to write it)
    held = Counter(fold(c) for t, _, _ in (scope.sources if scope else ()) for c in set(_table(schema, t).columns))
    inner = {fold(c) for t in (scope.inner if scope else ()) for c in _table(schema, t).columns}
    bare = sorted({quote(c) for t in names for c in _table(schema, t).columns
                   if held[fold(c)] < 2 or fold(c) in inner})
    # a table the outer FROM names only by an alias cannot be named as a qualifier there (SQLite: "no such column:
    # orders.id" after "FROM orders AS o"): the retry writes its alias only
    aliased = set() if scope is None else ({t for t, a, _ in scope.sources if a}
                                           - {t for t, a, _ in scope.sources if not a})
    qualified = [_columns(schema, quote(t), t) for t in names if t not in aliased]
    body = '"SELECT " ("DISTINCT ")? items " FROM " '
    tail = " where? (group order? | border?) limit?"
    if scope is None:
        every = _spellings(bare)
        head = (f"root ::= query\nquery ::= {body}tref (join){{0,4}}{tail}\n"
                f'tref ::= tbl ((" AS " | " ") talias)?\n'
                f'join ::= (" LEFT" | " INNER")? " JOIN " tref " ON " cond\n'
                f'talias ::= [A-Za-z] [A-Za-z0-9_]{{0,2}}\nacol ::= talias "." ({every})\n')
        col = "qcol | acol | bcol"
    else:
        parts = []
        for table, alias, kind in scope.sources:
            named = quote(table) + (f" AS {alias}" if alias else "")
            parts.append(_literal((f" {kind} " if kind else "") + named) + (' " ON " cond' if kind else ""))
        bound = [_columns(schema, alias, table, alias=True) for table, alias, _ in scope.sources if alias]
        head = (f"root ::= {body}{' '.join(parts)}{tail}\n"
                f'query ::= {body}tbl (("" | " LEFT" | " INNER") " JOIN " tbl " ON " cond){{0,2}}{tail}\n'
                + (f"acol ::= {' | '.join(bound)}\n" if bound else ""))
        col = " | ".join(["qcol"] * bool(qualified) + ["acol"] * bool(bound) + ["bcol"] * bool(bare))
    return (head + RULES.strip() + f"\ntbl ::= {tables}\ncol ::= {col}\n"
            + (f"qcol ::= {' | '.join(qualified)}\n" if qualified else "")
            + (f"bcol ::= {_spellings(bare)}\n" if bare else ""))


def _table(schema: DbSchema, name: str) -> Table:
    found = schema.table(name)
    assert found is not None, name
    return found


def scope_of(sql: str, schema: DbSchema) -> Scope | None:
    """The scope of a first answer (``Scope``): None when it does not parse, is not one plain SELECT over the
    schema's tables, or uses an alias the retry's grammar cannot write well (a keyword; inside a sub-query, an alias
    of a table the outer FROM names bare)."""
    import sqlglot  # noqa: PLC0415 (loaded by the sql task only)
    from sqlglot import exp  # noqa: PLC0415

    try:
        tree = sqlglot.parse_one(sql, read="sqlite")
    except sqlglot.errors.SqlglotError:
        return None
    if not isinstance(tree, exp.Select):
        return None
    first = tree.args.get("from") or tree.args.get("from_")
    if first is None or not isinstance(first.this, exp.Table):
        return None
    sources: list[tuple[str, str, str]] = []
    for node, kind in [(first.this, ""), *((j.this, "LEFT JOIN" if j.side.upper() == "LEFT" else "JOIN")
                                          for j in tree.args.get("joins") or [])]:
        table = schema.table(node.name) if isinstance(node, exp.Table) else None
        if table is None or (node.alias and (not ALIAS.fullmatch(node.alias) or node.alias.upper() in RESERVED)):
            return None  # (an alias that is a keyword — FROM album AS to — the retry would write again: SQLite
            #             refuses it; the retry then runs under the open grammar)
        sources.append((table.name, node.alias, kind))
    outer = {id(first.this), *(id(j.this) for j in tree.args.get("joins") or [])}
    plain = {schema_name for schema_name, alias, _ in sources if not alias}
    named: list[str] = []
    inner: list[str] = []
    for node in tree.find_all(exp.Table):
        table = schema.table(node.name)
        if table is None or (node.alias and id(node) not in outer and table.name in plain):
            # a sub-query's alias of a table the outer FROM names bare (... = (SELECT MAX(year) FROM album AS b WHERE
            # b.artist_id = album.artist_id)): the retry's sub-queries take no alias, and the one form left to write
            # the correlation in is always true (album.artist_id = album.artist_id) — a silently wrong answer; the
            # retry runs under the open grammar (other sub-query aliases are written there as table names)
            return None
        if table.name not in named:
            named.append(table.name)
        if id(node) not in outer and table.name not in inner:
            inner.append(table.name)
    return Scope(tuple(sources), tuple(named), tuple(inner))
