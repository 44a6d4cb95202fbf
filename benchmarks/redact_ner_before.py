import json, sys
sys.path.insert(0, "benchmarks")
import redact_ner as rn
from tiankong.tasks import redact as R
from tiankong.tasks.pii_rules import detect_rules
from tiankong.tasks.pii_names import name_entities
path = sys.argv[1]
rows = [json.loads(l) for l in open(path)]
for r in rows:
    t = r["text"]; tr = r["trace"]
    asked = {(c["start"], c["end"]): c["p"] for c in tr["candidates"]}
    listed = [tuple(x) for x in tr["listed"]]
    rules = detect_rules(t)
    ents = R.merge(rules, [*R.locate(t, listed), *name_entities(t)])
    cands = R.candidate_spans(t, ents, None)
    kept = [R.Entity(c.start, c.end, "PERSON", c.text, "rule+model", 0.5) for c in cands
            if asked.get((c.start, c.end)) is None or asked[(c.start, c.end)] >= R.CONFIRM_AT]
    final = R.merge(ents, kept)
    r["score"] = rn.score(r, [rn.entity_json(e) for e in final])
text, table = rn.report(rows, f"before the fix (old logic: the listing taken whole), {len(rows)} sentences of {path}")
print(text)
open(sys.argv[2], "w").write(text + "\n")
