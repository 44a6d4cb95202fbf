"""What ``pii_code.drop_code_identifiers`` drops on public Markdown the project did not write: the long
descriptions (README text) of the distributions installed in the venv. Engine-free.

    nice -n 10 .venv/bin/python benchmarks/redact_code.py [--n 150] [--out benchmarks/results/redact/code]
        [--sample 100] [--seed 0]

Documents: every installed distribution (``importlib.metadata``, deduplicated by normalised name, sorted by it)
whose long description has a fenced code block (```` ``` ````) and is over 1,000 characters; cut to its first
8,000 characters at a line break; at most ``--n`` documents.

Entities per document, as the real path assembles them with no model: ``redact.assemble_names(text,
detect_rules(text), [], {})`` — the rules, the name rules (``pii_names.name_entities``) and the taggers' names
(``pii_tagger.read``: spaCy, LAC), merged with ``redact.merge``. Then ``drop_code_identifiers`` (what
``redact._finish`` applies on every path). A second, upper-bound reading adds every name candidate
(``pii_names.name_candidates``: runs of capitalised English words, surname + given name) as if the model
confirmed it — on the model path candidates past ``MAX_CONFIRM`` (24) are kept unasked, so on a long README many
are redacted with no question asked.

Writes ``<out>/dropped.jsonl`` (every dropped span: document, text, type, source, 60 characters around it),
``<out>/kept_in_code.jsonl`` (PERSON/ADDRESS/ORG entities inside a code span that were not dropped, with the
reason), ``<out>/documents.jsonl`` (per-document counts) and ``<out>/summary.txt``; the hand-check of the dropped
spans is written into the summary by hand after reading ``dropped.jsonl`` (``--handcheck FILE``: a text appended).
"""

from __future__ import annotations

import argparse
import bisect
import datetime
import importlib.metadata
import json
import random
import re
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from tiankong.tasks import pii_tagger
from tiankong.tasks.pii_code import (
    _CODE_SHAPE,
    _IDENTIFIER,
    NAME_TYPES,
    code_regions,
    code_spans,
    drop_code_identifiers,
)
from tiankong.tasks.pii_rules import Entity, detect_rules
from tiankong.tasks.redact import assemble_names, candidate_spans

MIN_CHARS = 1000
MAX_CHARS = 8000
CONTEXT = 60
FENCE = "```"


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def documents(limit: int) -> list[dict[str, Any]]:
    seen: dict[str, dict[str, Any]] = {}
    for dist in importlib.metadata.distributions():
        meta = dist.metadata
        name = meta.get("Name")
        if not name or _norm(name) in seen:
            continue
        body = meta.get_payload() or meta.get("Description") or ""
        if not isinstance(body, str) or FENCE not in body or len(body) <= MIN_CHARS:
            continue
        text = body
        if len(text) > MAX_CHARS:
            cut = text.rfind("\n", 0, MAX_CHARS)
            text = text[: cut + 1 if cut > 0 else MAX_CHARS]
        seen[_norm(name)] = {"name": name, "version": meta.get("Version", "?"),
                             "content_type": meta.get("Description-Content-Type", ""), "full_chars": len(body),
                             "text": text}
    return [seen[k] for k in sorted(seen)][:limit]


def _context(text: str, e: Entity) -> str:
    half = CONTEXT // 2
    return text[max(0, e.start - half): e.end + half]


def _inside(spans: list[tuple[int, int]], start: int, end: int) -> bool:
    at = bisect.bisect_right(spans, (start, 10**12)) - 1
    return at >= 0 and spans[at][0] <= start < end <= spans[at][1]


def _why_kept(text: str, e: Entity, spans: list[tuple[int, int]]) -> str:
    """Why an entity inside a code span was not dropped (mirrors ``is_code_identifier``'s checks, in order)."""
    if e.type not in NAME_TYPES:
        return "rule type"
    if not _IDENTIFIER.fullmatch(e.text):
        return "space inside" if re.search(r"\s", e.text) else "not one identifier"
    regions = [r for r in code_regions(text) if r[0] <= e.start < e.end <= r[1]]
    if regions and regions[0][2] == "prose":
        return "in a fence without a programming language's tag (prose)"
    if not _CODE_SHAPE.search(e.text):
        return "no code shape in the word, nor a call, attribute or keyword around it"
    return "in a string, a docstring or a comment, or inline and bare"


def _where(text: str, e: Entity, spans: list[tuple[int, int]]) -> str:
    """Where in its code span an entity sits, read off its line: "inline" (an inline code span), "string" (an
    odd count of a quote before it on the line), "comment" (a ``#``, ``//`` or ``--`` before it, outside quotes),
    else "code" (a shell or REPL transcript's output lines are not told apart: "code")."""
    at = bisect.bisect_right(spans, (e.start, 10**12)) - 1
    a, b = spans[at]
    if a > 0 and text[a - 1] == "`" and not text[a:b].startswith(("`", "~")) and "\n" not in text[a:b]:
        return "inline"
    line = text[text.rfind("\n", a, e.start) + 1 or a: e.start]
    if any(line.count(q) % 2 for q in "\"'"):
        return "string"
    if re.search(r"(^|\s)(#|//|--)", line):
        return "comment"
    return "code"


def measure(text: str, upper: bool) -> tuple[list[Entity], list[Entity]]:
    rules = detect_rules(text)
    probabilities: dict[tuple[int, int], float | None] = {}
    if upper:
        base = assemble_names(text, rules, [], {}, tagger=False)
        probabilities = {(c.start, c.end): None for c in candidate_spans(text, base)}
    before = assemble_names(text, rules, [], probabilities)
    return before, drop_code_identifiers(text, before)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=150)
    parser.add_argument("--out", default="benchmarks/results/redact/code")
    parser.add_argument("--sample", type=int, default=20, help="kept-in-code entities shown in the summary")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--handcheck", help="a text file appended to the summary (the hand-check of dropped.jsonl)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    taggers = pii_tagger.available()
    docs = documents(args.n)
    totals = {mode: {"before": Counter(), "after": Counter(), "dropped": Counter(), "dropped_src": Counter()}
              for mode in ("real", "upper")}
    dropped_rows: list[dict[str, Any]] = []
    kept_rows: list[dict[str, Any]] = []
    doc_rows: list[dict[str, Any]] = []
    unclosed = 0
    for doc in docs:
        text = doc["text"]
        spans = code_spans(text)
        fenced = text.count(FENCE)
        if fenced % 2:
            unclosed += 1
        row: dict[str, Any] = {"name": doc["name"], "version": doc["version"], "chars": len(text),
                               "full_chars": doc["full_chars"], "code_spans": len(spans),
                               "code_chars": sum(b - a for a, b in spans)}
        for mode in ("real", "upper"):
            before, after = measure(text, mode == "upper")
            kept_ids = {(e.start, e.end, e.type) for e in after}
            dropped = [e for e in before if (e.start, e.end, e.type) not in kept_ids]
            t = totals[mode]
            t["before"].update(e.type for e in before)
            t["after"].update(e.type for e in after)
            t["dropped"].update(e.type for e in dropped)
            t["dropped_src"].update(e.source for e in dropped)
            row[mode] = {"before": len(before), "after": len(after), "dropped": len(dropped),
                         "dropped_by_type": dict(Counter(e.type for e in dropped))}
            for e in dropped:
                dropped_rows.append({"mode": mode, "doc": doc["name"], "start": e.start, "end": e.end,
                                     "text": e.text, "type": e.type, "source": e.source, "score": e.score,
                                     "where": _where(text, e, spans), "context": _context(text, e)})
            for e in after:
                if e.type in NAME_TYPES and _inside(spans, e.start, e.end):
                    kept_rows.append({"mode": mode, "doc": doc["name"], "start": e.start, "end": e.end,
                                      "text": e.text, "type": e.type, "source": e.source,
                                      "why_kept": _why_kept(text, e, spans),
                                      "where": _where(text, e, spans), "context": _context(text, e)})
        doc_rows.append(row)
    with (out / "dropped.jsonl").open("w") as f:
        for r in dropped_rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    with (out / "kept_in_code.jsonl").open("w") as f:
        for r in kept_rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    with (out / "documents.jsonl").open("w") as f:
        for r in doc_rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")

    cmd = "nice -n 10 .venv/bin/python " + " ".join([sys.argv[0], *sys.argv[1:]])
    lines = [cmd, f"date: {datetime.datetime.now().isoformat(timespec='seconds')}   python {sys.version.split()[0]}"
             f"   {time.time() - started:.1f} s", f"taggers available: {taggers}",
             f"documents: {len(docs)} (long description with ``` and > {MIN_CHARS} chars, cut to <= {MAX_CHARS} "
             f"at a line break; {sum(d['full_chars'] > MAX_CHARS for d in docs)} cut; {unclosed} with an odd "
             f"``` count after the cut)",
             f"code spans: {sum(r['code_spans'] for r in doc_rows)}, "
             f"{sum(r['code_chars'] for r in doc_rows)} of {sum(r['chars'] for r in doc_rows)} chars", ""]
    lines.append("distributions: " + ", ".join(f"{d['name']}=={d['version']}" for d in docs))
    lines.append("")
    for mode, title in (("real", "REAL (assemble_names(text, detect_rules(text), [], {}): rules + name rules + "
                                 "taggers, no model)"),
                        ("upper", "UPPER BOUND (the same + every name candidate kept as if confirmed/unasked)")):
        t = totals[mode]
        lines += [title,
                  f"  entities before: {sum(t['before'].values())}  by type {dict(sorted(t['before'].items()))}",
                  f"  entities after:  {sum(t['after'].values())}  by type {dict(sorted(t['after'].items()))}",
                  f"  dropped:         {sum(t['dropped'].values())}  by type {dict(sorted(t['dropped'].items()))}"
                  f"  by source {dict(sorted(t['dropped_src'].items()))}",
                  f"  docs with a drop: {sum(1 for r in doc_rows if r[mode]['dropped'])}"]
        kept = [r for r in kept_rows if r["mode"] == mode]
        drops = [r for r in dropped_rows if r["mode"] == mode]
        lines.append(f"  dropped by where in the code: {dict(Counter(r['where'] for r in drops).most_common())}")
        lines.append(f"  PERSON/ADDRESS/ORG kept inside code spans (not dropped): {len(kept)}  by reason "
                     f"{dict(Counter(r['why_kept'] for r in kept).most_common())}")
        lines.append(f"    by where: {dict(Counter(r['where'] for r in kept).most_common())}; the 'no code shape' ones "
                     f"by where: "
                     f"{dict(Counter(r['where'] for r in kept if r['why_kept'].startswith('no code')).most_common())}")
        lines.append("")
    lines.append("per document (real: before/after/dropped | upper: before/after/dropped)")
    for r in doc_rows:
        lines.append(f"  {r['name']:32} {r['real']['before']:4} {r['real']['after']:4} {r['real']['dropped']:3} | "
                     f"{r['upper']['before']:4} {r['upper']['after']:4} {r['upper']['dropped']:3}  "
                     f"{r['real']['dropped_by_type'] or ''}")
    lines.append("")
    rng = random.Random(args.seed)
    for mode in ("real", "upper"):
        kept = [r for r in kept_rows if r["mode"] == mode]
        sample = rng.sample(kept, min(args.sample, len(kept)))
        lines.append(f"sample of {len(sample)} PERSON/ADDRESS/ORG kept inside code ({mode}, seed {args.seed}):")
        for r in sample:
            lines.append(f"  [{r['type']}/{r['source']}] {r['text']!r} ({r['why_kept']}) in {r['doc']}: "
                         f"{r['context']!r}")
        lines.append("")
    misses = [r for r in kept_rows if r["mode"] == "real" and r["where"] in ("code", "inline")
              and r["why_kept"].startswith("no code")]
    lines.append(f"every capitalised one-word PERSON/ADDRESS/ORG kept in code proper or inline code (real; not a "
                 f"comment or string): {len(misses)}")
    for r in misses:
        lines.append(f"  [{r['type']}/{r['source']}; {r['where']}] {r['text']!r} in {r['doc']}: {r['context']!r}")
    lines.append("")
    if args.handcheck:
        lines.append(Path(args.handcheck).read_text())
    (out / "summary.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:6] + lines[8:30]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
