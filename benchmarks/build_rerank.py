"""Build the shipped rerank decider (``src/tiankong/deciders/builtin/rerank.json``) from the *dev* halves only.

    .venv/bin/python benchmarks/build_rerank.py [--chatterbot-queries N]

Rows: ACLSum ``val`` (query = aspect summary, passages = the paper's sentences, relevant = highlighted), the whole
dev halves of chatterbot-corpus English and Chinese (query = first turn, passages = its reply and 19, 49, 99 or 199
others in turn: a pipeline reranks 20–200 candidates, and the list's size moves every within-list feature — a
decider built on 40-candidate lists alone lost 0.015–0.08 to the embedding part on 200-candidate lists); the frozen
test splits (docs/tasks.md) are never read here. ``tune_rerank`` scores the methods by repeated query-fold CV and
the one-standard-error rule picks one; the printed table and the artifact's sha256 go to
benchmarks/results/retrieval/build-rerank.txt.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent / "tasks"))

from retrieval import Item, aclsum, chatterbot  # noqa: E402

from tiankong.engine.parts import stop_parts  # noqa: E402
from tiankong.models.catalog import embedding_part  # noqa: E402
from tiankong.tuning.rerank import tune_rerank  # noqa: E402

TARGET = Path(__file__).resolve().parents[1] / "src" / "tiankong" / "deciders" / "builtin" / "rerank.json"


LIST_SIZES = (20, 50, 100, 200)


def sized(items: list[Item]) -> list[Item]:
    """The n-th query keeps its relevant replies and the first ``LIST_SIZES[n % 4] - 1`` others (already shuffled)."""
    out = []
    for n, (query, docs, rel) in enumerate(items):
        room, keep = LIST_SIZES[n % len(LIST_SIZES)] - sum(rel), []
        for i, r in enumerate(rel):
            if r or room > 0:
                keep.append(i)
                room -= 0 if r else 1
        out.append((query, [docs[i] for i in keep], [rel[i] for i in keep]))
    return out


def rows(chatterbot_queries: int | None) -> list[dict[str, object]]:
    items = aclsum(None, "dev")
    items += sized(chatterbot("english", max(LIST_SIZES), chatterbot_queries, "dev"))
    items += sized(chatterbot("chinese", max(LIST_SIZES), chatterbot_queries, "dev"))
    return [{"query": q, "passage": d, "relevant": r} for q, docs, rel in items for d, r in zip(docs, rel, strict=True)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chatterbot-queries", type=int, default=None, help="default: every dev query")
    args = parser.parse_args()
    try:
        report = tune_rerank(rows(args.chatterbot_queries), name="rerank", save=False, log=print)
    finally:
        stop_parts()
    assert report.decider is not None
    report.decider.version = 1
    report.decider.created = "2026-12-06T00:00:00+00:00"
    report.decider.params = {"sources": ["aclsum==0.1.2 val.jsonl (CC BY 4.0)",
                                         "chatterbot-corpus==1.3.3 english/chinese dev halves, 20-200 candidates "
                                         "(BSD-3-Clause)"],
                             "built_by": "benchmarks/build_rerank.py",
                             # the cosine feature comes from the catalog's part for the query's language
                             "parts": {"en": embedding_part("en"), "zh": embedding_part("zh")}}
    text = json.dumps(report.decider.to_json(), ensure_ascii=False, sort_keys=True)
    TARGET.write_text(text, encoding="utf-8")
    print(report.table())
    print(f"wrote {TARGET} sha256 {hashlib.sha256(text.encode()).hexdigest()}")


if __name__ == "__main__":
    main()
