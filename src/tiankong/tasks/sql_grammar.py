"""The GBNF grammar of the read-only SQL subset ``sql`` answers in, with the schema's names written in.

SELECT [DISTINCT] items FROM table [[LEFT] JOIN table ON a = b]… [WHERE cond] [GROUP BY values] [HAVING cond]
[ORDER BY value [ASC|DESC], …] [LIMIT n]; values are columns, literals, aggregates (COUNT/SUM/AVG/MIN/MAX, with
DISTINCT), a few scalar functions, arithmetic and parentheses; conditions compare, LIKE, IN (a list or a
sub-query), BETWEEN, IS [NOT] NULL, with AND/OR/NOT. Every repetition is bounded (8 items, 5 joins, 6 predicates
per condition, 4 terms per value…): a small model that repeats itself reaches the end of the grammar, not the
token cap. Tables are not aliased: a qualified column is
``table.column`` and the grammar allows, after each table's name, only that table's columns. Written by hand
because no library emits a grammar for llama.cpp from a database schema; sqlglot checks the result.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .sql import DbSchema

#: the most tokens a query may take (the grammar ends it; this bounds a run-away sub-query chain)
QUERY_TOKENS = 320

RULES = r"""
root ::= query
query ::= "SELECT " ("DISTINCT ")? items " FROM " tbl (" " join){0,4} where? group? order? limit?
items ::= "*" | item (", " item){0,7}
item ::= value (" AS " alias)?
alias ::= [a-z] [a-z0-9_]{0,30}
join ::= ("LEFT ")? "JOIN " tbl " ON " col " = " col
where ::= " WHERE " cond
group ::= " GROUP BY " value (", " value){0,3} (" HAVING " cond)?
order ::= " ORDER BY " value (" ASC" | " DESC")? (", " value (" ASC" | " DESC")?){0,2}
limit ::= " LIMIT " [1-9] [0-9]{0,3}
cond ::= pred ((" AND " | " OR ") pred){0,5}
pred ::= ("NOT ")? (value cmp value | value " IS " ("NOT ")? "NULL" | value (" NOT")? " LIKE " str
       | value (" NOT")? " IN (" (query | lit (", " lit){0,11}) ")" | value " BETWEEN " lit " AND " lit | "(" cond ")")
cmp ::= " = " | " != " | " < " | " <= " | " > " | " >= "
value ::= term (arith term){0,3}
arith ::= " + " | " - " | " * " | " / "
term ::= agg | fn "(" value ")" | col | lit | "(" value ")" | "(" query ")"
agg ::= "COUNT(*)" | ("COUNT" | "SUM" | "AVG" | "MIN" | "MAX") "(" ("DISTINCT ")? value ")"
fn ::= "LOWER" | "UPPER" | "LENGTH" | "ABS" | "ROUND" | "TRIM"
lit ::= num | str
num ::= "-"? [0-9]{1,12} ("." [0-9]{1,6})?
str ::= "'" ([^'\\\n] | "''"){0,80} "'"
"""


def _literal(text: str) -> str:
    """A GBNF string literal (JSON escaping is a subset GBNF reads)."""
    return json.dumps(text, ensure_ascii=False)


def sql_grammar(schema: DbSchema) -> str:
    from .sql import quote  # noqa: PLC0415 (sql imports this module)

    tables = " | ".join(_literal(quote(t.name)) for t in schema.tables)
    bare = sorted({quote(c) for t in schema.tables for c in t.columns})
    qualified = " | ".join(f"{_literal(quote(t.name) + '.')} ({' | '.join(_literal(quote(c)) for c in t.columns)})"
                           for t in schema.tables)
    return (RULES.strip() + f"\ntbl ::= {tables}\ncol ::= qcol | bcol\nqcol ::= {qualified}\n"
            f"bcol ::= {' | '.join(_literal(c) for c in bare)}\n")
