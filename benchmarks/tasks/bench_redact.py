"""redact on a generated zh_CN + en set: precision / recall / F1 per entity type, rules and rules+model.

    .venv/bin/python benchmarks/tasks/bench_redact.py [--n-rules 1000] [--n-model 60] [--seed 2026] [--slots 2]

The set comes from ``redact_data.build_set`` (Faker identities in ticket/e-mail/log templates, with distractors
that must not be flagged). The rules are scored on ``--n-rules`` records; the full task (rules + the model for
PERSON, ADDRESS, ORG) on the first ``--n-model`` records, in the same run. The seed differs from the one used
while developing the detectors.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from common import DEFAULT_MODEL, bounded, engine
from redact_data import MODEL_TYPES, RULE_TYPES, build_set, score

from tiankong import AsyncClient
from tiankong.tasks import detect_rules


def entities(found: Any) -> list[dict[str, Any]]:
    return [{"start": e.start, "end": e.end, "type": e.type} for e in found]


def show(title: str, table: dict[str, dict[str, float]]) -> None:
    print(f"\n{title}\n")
    print("| type | gold | predicted | precision | recall | F1 | overlap F1 |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for kind, m in table.items():
        print(f"| {kind} | {int(m['support'])} | {int(m['predicted'])} | {m['precision']:.3f} | {m['recall']:.3f} | "
              f"{m['f1']:.3f} | {m['overlap_f1']:.3f} |")


async def with_model(url: str, records: list[dict[str, Any]], slots: int) -> list[list[dict[str, Any]]]:
    async with AsyncClient(url) as client:
        found = await bounded(records, slots, lambda r: client.redact(r["text"], use_model=True))
    return [entities(f.entities) for f in found]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n-rules", type=int, default=1000)
    parser.add_argument("--n-model", type=int, default=60)
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    args = parser.parse_args()
    records = build_set(max(args.n_rules, args.n_model), args.seed)
    rules = records[: args.n_rules]
    show(f"rules only, {len(rules)} records (seed {args.seed})",
         score(rules, [{"id": r["id"], "entities": entities(detect_rules(r["text"]))} for r in rules], RULE_TYPES))
    sample = records[: args.n_model]
    if not sample:
        return
    started = time.monotonic()
    with engine(args.model, args.slots, 4096) as (url, name):
        predicted = asyncio.run(with_model(url, sample, args.slots))
    show(f"rules + model ({name}), {len(sample)} records, {time.monotonic() - started:.0f} s, "
         f"{time.strftime('%Y-%m-%d')}",
         score(sample, [{"id": r["id"], "entities": p} for r, p in zip(sample, predicted, strict=True)],
               (*RULE_TYPES, *MODEL_TYPES)))


if __name__ == "__main__":
    main()
