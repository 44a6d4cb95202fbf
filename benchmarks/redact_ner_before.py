"""The development figure before the issue-40 fix, from a trace of ``redact_ner.py --mode trace``: the old logic
(the model's listing of people taken whole; candidates kept at P(yes) >= CONFIRM_AT or unasked).

    .venv/bin/python benchmarks/redact_ner_before.py TRACE_ITEMS.jsonl SUMMARY.txt
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import redact_ner  # noqa: E402

from tiankong.tasks import redact  # noqa: E402
from tiankong.tasks.pii_names import name_entities  # noqa: E402
from tiankong.tasks.pii_rules import Entity, detect_rules  # noqa: E402


def main() -> None:
    path = Path(sys.argv[1])
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    for row in rows:
        text, trace = row["text"], row["trace"]
        asked = {(c["start"], c["end"]): c["p"] for c in trace["candidates"]}
        listed = [(kind, value) for kind, value in trace["listed"]]
        entities = redact.merge(detect_rules(text), [*redact.locate(text, listed), *name_entities(text)])
        kept = [Entity(c.start, c.end, "PERSON", c.text, "rule+model", 0.5)
                for c in redact.candidate_spans(text, entities, None)
                if asked.get((c.start, c.end)) is None or (asked[(c.start, c.end)] or 0.0) >= redact.CONFIRM_AT]
        row["score"] = redact_ner.score(row, [redact_ner.entity_json(e) for e in redact.merge(entities, kept)])
    report, _ = redact_ner.report(rows, f"before the fix (the listing taken whole), {len(rows)} sentences of {path}")
    print(report)
    Path(sys.argv[2]).write_text(report + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
