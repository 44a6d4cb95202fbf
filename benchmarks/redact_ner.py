"""Name redaction on public NER corpora written independently of the project: PERSON precision and recall of
``redact`` (issue 40 item 4).

    nice -n 10 .venv/bin/python benchmarks/redact_ner.py --split dev [--lang zh en] [--n 120] [--mode trace|real]
        [--model NAME] [--slots 2] [--out benchmarks/results/redact]

Data (``public_gold.py``; sha256 of each split in docs/benchmarks.md): Chinese — MSRA NER (People's Daily),
English — CoNLL-2003 (Reuters); per language 60 sentences with a gold PER span and 60 without; dev splits for
development, the test splits read once after the rules were fixed.

Modes:

* ``real``  — ``redact_flow(text)`` exactly as ``/v1/tasks/redact`` runs it (the figure to report);
* ``trace`` — the same engine calls, with every name candidate's P(yes) kept (not only those over the bar), the
  model's raw listing and the rule entities: ``--rescore`` then re-assembles the redaction offline with the
  *current* rules and bar (what development needs on two shared cores: no engine pass per rule change).

Scores, PERSON only: a redacted PERSON span is a true positive when it overlaps a gold PER span, else a false
positive (counted by what it hit: a gold LOC/ORG/MISC span or plain text); a gold PER span is caught when every
letter/digit/CJK character of it is inside a redacted span (of any type: a leak is what matters), and caught as
PERSON when inside PERSON spans. Raw rows go to ``<out>/<split>-<mode>-items.jsonl`` (a rerun resumes).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import public_gold  # noqa: E402

from tiankong import Client  # noqa: E402
from tiankong.engine import EngineConfig, EngineProcess  # noqa: E402
from tiankong.models import DEFAULT_MODEL, model_path  # noqa: E402
from tiankong.structured.combine import gather  # noqa: E402
from tiankong.structured.drivers import run_sync  # noqa: E402
from tiankong.structured.flow import Flow  # noqa: E402
from tiankong.tasks.pii_names import name_entities  # noqa: E402
from tiankong.tasks.pii_rules import Entity, detect_rules  # noqa: E402
from tiankong.tasks.pii_tagger import available as tagger_available  # noqa: E402
from tiankong.tasks.redact import (  # noqa: E402
    _chunks,
    _named_flow,
    ask_candidates,
    assemble_names,
    candidate_spans,
    locate,
    merge,
    redact_flow,
    split_listing,
)


def entity_json(e: Entity) -> dict[str, Any]:
    return {"start": e.start, "end": e.end, "type": e.type, "text": e.text, "source": e.source, "score": e.score}


def trace_flow(text: str, model: str | None) -> Flow[dict[str, Any]]:
    """The engine calls of ``redact_flow``, keeping the model's listing and every candidate's P(yes)."""
    found = yield from gather([_named_flow(chunk, model) for chunk in _chunks(text)])
    listed = [item for items in found for item in items]
    sure, doubtful = split_listing(listed)
    asked = merge(detect_rules(text), [*locate(text, sure), *name_entities(text)])
    probabilities = yield from ask_candidates(text, asked, model, locate(text, doubtful))
    return {"listed": listed, "candidates": [{"start": s, "end": e, "text": text[s:e], "p": p}
                                             for (s, e), p in probabilities.items()]}


def assemble(text: str, trace: dict[str, Any], tagger: bool = True) -> list[Entity]:
    """``redact_flow``'s entities from a trace, with the current rules and bar. A candidate the current rules
    propose that the trace never asked about counts as unasked (kept: fail safe)."""
    asked = {(c["start"], c["end"]): c["p"] for c in trace["candidates"]}
    listed = [(kind, value) for kind, value in trace["listed"]]
    rules = detect_rules(text)
    sure, doubtful = split_listing(listed)
    base = merge(rules, [*locate(text, sure), *name_entities(text)])
    current = candidate_spans(text, base, locate(text, doubtful))
    probabilities = {(c.start, c.end): asked.get((c.start, c.end)) for c in current}
    return assemble_names(text, rules, listed, probabilities, tagger=tagger)


def score(item: dict[str, Any], entities: Iterable[dict[str, Any]]) -> dict[str, Any]:
    text, spans = item["text"], item["spans"]
    entities = list(entities)
    any_cover = [False] * len(text)
    person_cover = [False] * len(text)
    for e in entities:
        for i in range(e["start"], e["end"]):
            any_cover[i] = True
            if e["type"] == "PERSON":
                person_cover[i] = True
    gold = [s for s in spans if s["type"] == "PERSON"]
    caught = [all(any_cover[i] for i in range(g["start"], g["end"]) if text[i].isalnum()) for g in gold]
    caught_person = [all(person_cover[i] for i in range(g["start"], g["end"]) if text[i].isalnum()) for g in gold]
    tp, fp = [], []
    for e in (e for e in entities if e["type"] == "PERSON"):
        hit = [s for s in spans if s["start"] < e["end"] and e["start"] < s["end"]]
        if any(s["type"] == "PERSON" for s in hit):
            tp.append(e["text"])
        else:
            fp.append({"text": e["text"], "source": e["source"], "score": e.get("score"),
                       "hit": hit[0]["type"] if hit else "O"})
    return {"gold_person": len(gold), "caught": sum(caught), "caught_person": sum(caught_person),
            "missed": [g["text"] for g, c in zip(gold, caught, strict=True) if not c], "tp": tp, "fp": fp}


def report(rows: list[dict[str, Any]], label: str) -> tuple[str, dict[str, Any]]:
    lines, table = [label], {}
    for lang in ("zh", "en", "all"):
        subset = [r for r in rows if lang in ("all", r["lang"])]
        if not subset:
            continue
        tp = sum(len(r["score"]["tp"]) for r in subset)
        fp = sum(len(r["score"]["fp"]) for r in subset)
        gold = sum(r["score"]["gold_person"] for r in subset)
        caught = sum(r["score"]["caught"] for r in subset)
        caught_person = sum(r["score"]["caught_person"] for r in subset)
        families = Counter(f["hit"] + "/" + f["source"] for r in subset for f in r["score"]["fp"])
        cell = {"n": len(subset), "gold_person": gold, "precision": tp / max(1, tp + fp), "tp": tp, "fp": fp,
                "recall": caught / max(1, gold), "recall_as_person": caught_person / max(1, gold),
                "fp_families": dict(families.most_common())}
        table[lang] = cell
        lines.append(f"{lang:<3} n={len(subset):<4} PERSON precision {cell['precision']:.3f} ({tp} tp, {fp} fp)  "
                     f"recall {cell['recall']:.3f} (as PERSON {cell['recall_as_person']:.3f}; {caught}/{gold})  "
                     f"fp by what they hit/source: {dict(families.most_common(6))}")
    return "\n".join(lines), table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--split", choices=("dev", "test", "test2", "test3", "test4", "test5", "test6"),
                        required=True)
    parser.add_argument("--lang", nargs="+", default=["zh", "en"])
    parser.add_argument("--n", type=int, default=120,
                        help="the first n sentences per language (of 120; test3 to test6: of 160)")
    parser.add_argument("--mode", choices=("trace", "real"), default="real")
    parser.add_argument("--rescore", action="store_true", help="trace mode: re-assemble offline, no engine")
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--threads", type=int, default=1,
                        help="engine threads (1: on a shared, oversubscribed machine threads wait on each other)")
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/redact"))
    parser.add_argument("--no-tagger", action="store_true",
                        help="trace mode: assemble without the [ner] taggers' names (as before issue 40's taggers)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    items = []
    for lang in args.lang:
        split = public_gold.redact_split(lang, args.split)
        print(f"{lang} {args.split} sha256 {public_gold.digest(split)}", flush=True)
        items += split[:args.n]
    path = args.out / f"{args.split}-{args.mode}-items.jsonl"
    done = {json.loads(line)["id"]: json.loads(line) for line in path.read_text().splitlines()} \
        if path.exists() else {}
    todo = [item for item in items if item["id"] not in done]
    if todo and not args.rescore:
        print(f"{len(done)} done, {len(todo)} to go", flush=True)
        config = EngineConfig(model=model_path(args.model), ctx=2048 * args.slots, slots=args.slots,
                          threads=args.threads)
        with EngineProcess(config) as engine, Client(engine.url) as client:
            def one(item: dict[str, Any]) -> dict[str, Any]:
                started = time.perf_counter()
                row: dict[str, Any] = {**item}
                if args.mode == "real":
                    result = run_sync(redact_flow(item["text"]), client._request)
                    row["entities"] = [entity_json(e) for e in result.entities]
                else:
                    row["trace"] = run_sync(trace_flow(item["text"], None), client._request)
                row["s"] = round(time.perf_counter() - started, 2)
                with path.open("a", encoding="utf-8") as handle:
                    handle.write(json.dumps(row, ensure_ascii=False) + "\n")
                print(item["id"], row["s"], flush=True)
                return row

            with ThreadPoolExecutor(args.slots) as pool:
                for row in pool.map(one, todo):
                    done[row["id"]] = row
    # committed raw rows carry no sentence text (the corpora are research-use): it comes back from the split
    rows = [{**done[item["id"]], **item} for item in items if item["id"] in done]
    for row in rows:
        entities = row["entities"] if args.mode == "real" else \
            [entity_json(e) for e in assemble(row["text"], row["trace"], tagger=not args.no_tagger)]
        row["final"] = entities
        row["score"] = score(row, entities)
    label = (f"{args.split} split, mode {args.mode}{' (re-assembled with the current rules)' if args.rescore else ''}"
             f"{' without the taggers' if args.no_tagger else ''}, model {args.model}, {len(rows)} sentences; "
             f"taggers loaded: {tagger_available()}")
    text, table = report(rows, label)
    print(text)
    stem = f"{args.split}-{args.mode}{'-rescored' if args.rescore else ''}{'-no-tagger' if args.no_tagger else ''}"
    (args.out / f"{stem}-summary.txt").write_text(text + "\n", encoding="utf-8")
    (args.out / f"{stem}-summary.json").write_text(json.dumps(table, indent=1, ensure_ascii=False) + "\n")
    (args.out / f"{stem}-fp.jsonl").write_text("".join(
        json.dumps({"id": r["id"], "text": r["text"], "fp": r["score"]["fp"], "missed": r["score"]["missed"]},
                   ensure_ascii=False) + "\n" for r in rows if r["score"]["fp"] or r["score"]["missed"]),
        encoding="utf-8")


if __name__ == "__main__":
    main()
