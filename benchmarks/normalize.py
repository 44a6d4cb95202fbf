"""Normalisation accuracy per field kind: rules alone, the model alone, and both (rules, then the model).

Canonical public records that ship inside packages, corrupted by documented transformations the normalisers were
not written against, each with its gold canonical value:

- dates: ``stocks.csv`` (``vega_datasets``: monthly prices, ``Jan 1 2000``) → ISO 8601; the corruptions are
  eight spellings (``01/01/2000``, ``1st January 2000``, ``2000.01.01``, ``January the 1st, 2000``,
  ``2000年1月1日``, ``1-Jan-00``, ``Saturday, January 1, 2000``, ``20000101``);
- amounts: the same rows' prices, in USD: ``$39.81``, ``39.81 USD``, ``USD 39.81``, ``US$ 39.81``, ``39,81 $``,
  ``39.81 dollars``, ``USD39.81``;
- names: ``la-riots.csv`` (``vega_datasets``: first and last names) → ``First Last``: ``LAST, FIRST``,
  ``last, first``, spaces doubled, all caps, ``Mr./Ms. First Last``;
- addresses: ``airports.csv`` (``vega_datasets``: city, state, country) → ``{city, state, country}``:
  ``City, ST, USA``, ``City, ST``, ``CITY ST USA`` (no commas), ``City, ST, United States``, ``city, st, usa``;
- phones: ``phonenumbers``' own example numbers (mobile and fixed line, 12 regions) → E.164:
  international format, ``00`` + country code with dashes, ``(+CC)`` and dots, ``tel:`` prefix, ``+CC (0)`` trunk.

Each canonical record gets one corruption, chosen by a seeded RNG; records alternate into a dev and a test split
(by a hash of the record), and only the test split is scored here; its sha256 is printed and frozen in
docs/normalize.md. A value counts as correct when it equals the gold value (addresses: city, state and country);
an *invented* value is one the output changed to something not derivable from the input (``derivable.py``), for
every mode (the rules included).

    PYTHONPATH=src .venv/bin/python benchmarks/normalize.py --out benchmarks/results/normalize/run.json
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import hashlib
import importlib.util
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

from tiankong.normalize import NormalizeOptions, normalize_records
from tiankong.normalize import derivable as D

US_STATE_NAMES = {"AL": "Alabama", "AK": "Alaska", "AZ": "Arizona", "AR": "Arkansas", "CA": "California",
                  "CO": "Colorado", "FL": "Florida", "GA": "Georgia", "IL": "Illinois", "MS": "Mississippi",
                  "NY": "New York", "TX": "Texas", "WA": "Washington", "OH": "Ohio", "PA": "Pennsylvania",
                  "MI": "Michigan", "NC": "North Carolina", "MN": "Minnesota", "OK": "Oklahoma", "KS": "Kansas"}
SCHEMAS: dict[str, dict[str, Any]] = {
    "date": {"type": "object", "properties": {"v": {"type": "string", "format": "date"}}},
    "amount": {"type": "object", "properties": {"v": {"x-normalize": "amount"}}},
    "name": {"type": "object", "properties": {"v": {"type": "string", "x-normalize": "name"}}},
    "address": {"type": "object", "properties": {"v": {"x-normalize": "address"}}},
    "phone": {"type": "object", "properties": {"v": {"type": "string", "x-normalize": "phone"}}},
}


def vega(name: str) -> list[dict[str, str]]:
    spec = importlib.util.find_spec("vega_datasets")  # the data files only: importing it would need pandas
    if spec is None or not spec.submodule_search_locations:
        sys.exit("vega_datasets is not installed (pip install vega_datasets)")
    path = Path(next(iter(spec.submodule_search_locations))) / "_data" / name
    with path.open(encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 11 <= n % 100 <= 13 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def items(rng: random.Random) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for row in vega("stocks.csv")[::6]:
        day = dt.datetime.strptime(row["date"], "%b %d %Y").date()
        spellings = [day.strftime("%m/%d/%Y"), f"{_ordinal(day.day)} {day:%B %Y}", day.strftime("%Y.%m.%d"),
                     f"{day:%B} the {_ordinal(day.day)}, {day.year}", f"{day.year}年{day.month}月{day.day}日",
                     f"{day.day}-{day:%b-%y}", f"{day:%A, %B} {day.day}, {day.year}", day.strftime("%Y%m%d")]
        out.append({"kind": "date", "raw": rng.choice(spellings), "gold": day.isoformat(), "source": "stocks"})
        price = row["price"]
        amounts = [f"${price}", f"{price} USD", f"USD {price}", f"US$ {price}", f"{price.replace('.', ',')} $",
                   f"{price} dollars", f"USD{price}"]
        out.append({"kind": "amount", "raw": rng.choice(amounts), "gold": {"amount": float(price), "currency": "USD"},
                    "source": "stocks"})
    for row in vega("la-riots.csv"):
        first, last = row["first_name"].strip(), row["last_name"].strip()
        if not first or not last:
            continue
        gold = f"{first} {last}"
        names = [f"{last.upper()}, {first.upper()}", f"{last.lower()}, {first.lower()}", f"{first}  {last}",
                 gold.upper(), f"{'Mr.' if row['gender'] == 'Male' else 'Ms.'} {gold}"]
        out.append({"kind": "name", "raw": rng.choice(names), "gold": gold, "source": "la-riots"})
    airports = [r for r in vega("airports.csv") if r["state"] in US_STATE_NAMES and r["country"] == "USA"]
    for row in rng.sample(airports, 60):
        city, state = row["city"], row["state"]
        addresses = [f"{city}, {state}, USA", f"{city}, {state}", f"{city.upper()} {state} USA",
                     f"{city}, {state}, United States", f"{city.lower()}, {state.lower()}, usa"]
        out.append({"kind": "address", "raw": rng.choice(addresses),
                    "gold": {"city": city, "state": state, "country": "USA"}, "source": "airports"})
    import phonenumbers
    from phonenumbers import PhoneNumberFormat as F
    from phonenumbers import PhoneNumberType as T

    for region in ["US", "GB", "CN", "DE", "FR", "JP", "IN", "BR", "AU", "CA", "IT", "ES"]:
        for kind in (T.MOBILE, T.FIXED_LINE):
            number = phonenumbers.example_number_for_type(region, kind)
            e164 = phonenumbers.format_number(number, F.E164)
            intl = phonenumbers.format_number(number, F.INTERNATIONAL)
            cc, nsn = str(number.country_code), str(number.national_number)
            phones = [intl, f"00{cc}-{nsn[:3]}-{nsn[3:6]}-{nsn[6:]}", f"(+{cc}) {nsn[:3]}.{nsn[3:6]}.{nsn[6:]}",
                      f"tel: {intl}", f"+{cc} (0) {nsn}"]
            out.append({"kind": "phone", "raw": rng.choice(phones), "gold": e164, "source": "phonenumbers"})
    return out


def split(all_items: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    dev, test = [], []
    for item in all_items:
        digest = hashlib.sha256(json.dumps(item, sort_keys=True, ensure_ascii=False).encode()).digest()
        (test if digest[0] % 2 else dev).append(item)
    return dev, test


def correct(kind: str, value: Any, gold: Any, raw: str) -> bool:
    if kind == "address":  # the country only where the input names one: an output adding it has invented it
        named = {k: v for k, v in gold.items() if k != "country" or any(
            w in raw.casefold() for w in ("usa", "united states"))}
        return isinstance(value, dict) and all(str(value.get(k, "")).casefold() == str(v).casefold()
                                               for k, v in named.items())
    return bool(value == gold)


def derivable(kind: str, value: Any, raw: str, currency: str | None = None) -> bool:
    """Derivable from the input, or from the defaults the user gave (``--currency``)."""
    if kind == "date":
        return isinstance(value, str) and D.date_derivable(value, raw)
    if kind == "phone":
        return isinstance(value, str) and D.phone_derivable(value, raw, None)
    if kind == "amount":
        return D.amount_derivable(value, raw, currency)
    if kind == "address":
        return D.address_derivable(value, raw)
    return D.text_derivable(value, raw)


def score(test: list[dict[str, Any]], mode: str, extract: Any, currency: str | None = None) -> dict[str, Any]:
    table: dict[str, Any] = {}
    rows = []
    for kind in SCHEMAS:
        chosen = [x for x in test if x["kind"] == kind]
        started = time.perf_counter()
        results, report = normalize_records([{"v": x["raw"]} for x in chosen], SCHEMAS[kind],
                                            NormalizeOptions(mode=mode,  # type: ignore[arg-type]
                                                             currency=currency),
                                            extract=None if mode == "rules" else extract)
        seconds = time.perf_counter() - started
        right = invented = wrong = untouched = 0
        for item, result in zip(chosen, results, strict=True):
            value = result.record["v"]
            changed = bool(result.changes)
            ok = correct(kind, value, item["gold"], item["raw"])
            right += ok
            if changed and not derivable(kind, value, item["raw"], currency):
                invented += 1
            if changed and not ok:
                wrong += 1
            if not changed:
                untouched += 1
            rows.append({"kind": kind, "raw": item["raw"], "gold": item["gold"], "out": value,
                         "by": [c["by"] for c in result.changes], "correct": ok})
        table[kind] = {"n": len(chosen), "accuracy": round(right / max(1, len(chosen)), 3), "correct": right,
                       "wrong_changes": wrong, "left_flagged": untouched, "invented": invented,
                       "model": report["model"], "seconds": round(seconds, 2)}
    return {"fields": table, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--modes", default="rules,model,both")
    parser.add_argument("--model", default=None, help="default: the catalog's default model")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--threads", type=int, default=1, help="engine threads")
    parser.add_argument("--currency", default=None, help="the default currency (--currency of normalize): the "
                        "amounts are USD prices, written with $ and 'dollars' as well as codes")
    parser.add_argument("--per-kind", type=int, default=0, help="score only the first N test items of each kind "
                        "(0: all; the model's calls take seconds each on 2 shared cores)")
    args = parser.parse_args()
    dev, test = split(items(random.Random(args.seed)))
    frozen = hashlib.sha256("\n".join(json.dumps(x, sort_keys=True, ensure_ascii=False)
                                      for x in test).encode()).hexdigest()
    result: dict[str, Any] = {"test_sha256": frozen, "dev": len(dev), "test": len(test),
                              "test_by_kind": {k: sum(x["kind"] == k for x in test) for k in SCHEMAS},
                              "currency": args.currency, "modes": {}}
    print(json.dumps({k: result[k] for k in ("test_sha256", "dev", "test", "test_by_kind")}), flush=True)
    if args.per_kind:
        test = [x for k in SCHEMAS for x in [y for y in test if y["kind"] == k][:args.per_kind]]
        result["scored"] = len(test)
    modes = args.modes.split(",")
    client = engine = None
    if any(m != "rules" for m in modes):
        from tiankong import Client
        from tiankong.engine import EngineConfig, EngineProcess
        from tiankong.models import DEFAULT_MODEL, resolve_installed

        record = resolve_installed(args.model or DEFAULT_MODEL)
        # one engine thread: on cores shared with other work, llama.cpp's threads spin-waiting on each other at
        # every barrier made a 2-thread engine decode at 0.3 token/s (run-16.log, stopped)
        engine = EngineProcess(EngineConfig(model=record.path, ctx=2048, slots=1, threads=args.threads,
                                            alias=record.name)).start()
        client = Client(engine.url)
        result["model"] = record.name
        result["engine_threads"] = args.threads
    try:
        for mode in modes:
            result["modes"][mode] = score(test, mode, client.extract if client else None, args.currency)
            print(mode, json.dumps(result["modes"][mode]["fields"]), flush=True)
    finally:
        if client is not None:
            client.close()
        if engine is not None:
            engine.stop()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
