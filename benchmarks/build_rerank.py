"""Build the shipped rerank decider (``src/tiankong/deciders/builtin/rerank.json``) from the *dev* halves only.

    .venv/bin/python benchmarks/build_rerank.py [--chatterbot-queries N]

Rows: ACLSum ``val`` (query = aspect summary, passages = the paper's sentences, relevant = highlighted), the whole
dev halves of chatterbot-corpus English and Chinese (query = first turn, passages = its reply and 19, 49, 99 or 199
others in turn: a pipeline reranks 20–200 candidates, and the list's size moves every within-list feature — a
decider built on 40-candidate lists alone lost 0.015–0.08 to the embedding part on 200-candidate lists), and the dev
halves of its 17 other languages at 40 candidates (e5 reads them as it reads Chinese: with them its weight set scored
0.352 / 0.521 on chatterbot-zh / the other languages in dev CV, 0.346 / 0.509 without —
benchmarks/results/retrieval/languages/e5-weights-dev-2026-12-06.txt); the frozen test splits (docs/tasks.md) are
never read here. One candidate list per conversation (``qid``). ``tune_rerank`` scores the methods by repeated
query-fold CV (the shipped decider is ``lr-fusion`` whatever the pooled one-standard-error rule picks: see ``main``);
the printed table and the artifact's sha256 go to benchmarks/results/retrieval/build-rerank.txt.
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
#: chatterbot-corpus's other languages with dev halves (40 candidates: the smaller ones have fewer replies than 200)
OTHER_LANGUAGES = ("bengali", "dutch", "french", "german", "indonesian", "italian", "japanese", "korean", "persian",
                   "portuguese", "spanish", "traditionalchinese", "turkish", "ukrainian", "russian", "hebrew", "hindi")


def sized(items: list[Item]) -> list[Item]:
    """The n-th query keeps its relevant replies and the first ``LIST_SIZES[n % 4] - 1`` others (already shuffled)."""
    out = []
    for n, (query, docs, rel) in enumerate(items):
        others = [i for i, r in enumerate(rel) if not r][:LIST_SIZES[n % len(LIST_SIZES)] - sum(rel)]
        keep = sorted([i for i, r in enumerate(rel) if r] + others)
        out.append((query, [docs[i] for i in keep], [rel[i] for i in keep]))
    return out


def rows(chatterbot_queries: int | None) -> list[dict[str, object]]:
    items = aclsum(None, "dev")
    items += sized(chatterbot("english", max(LIST_SIZES), chatterbot_queries, "dev"))
    items += sized(chatterbot("chinese", max(LIST_SIZES), chatterbot_queries, "dev"))
    for language in OTHER_LANGUAGES:  # read by e5 like Chinese (part_for): they train its weight set too
        items += chatterbot(language, 40, chatterbot_queries, "dev")
    # one candidate list per conversation (qid): chatterbot repeats first turns ("My printer is not printing." heads
    # 121 English dev conversations), and lists glued by query text would not be the lists a rerank sees
    return [{"qid": n, "query": q, "passage": d, "relevant": r}
            for n, (q, docs, rel) in enumerate(items) for d, r in zip(docs, rel, strict=True)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chatterbot-queries", type=int, default=None, help="default: every dev query")
    args = parser.parse_args()
    try:
        # lr-fusion, not the pooled one-SE pick: the pooled CV is 96 % chatterbot lists, where the embedding part
        # alone is within one SE of the fusion and so is picked — and it loses 0.11 nDCG@10 to BM25 on ACLSum-like
        # text (docs/tasks.md); a default must serve both kinds, and per set the fusion is within 0.01 of the best
        report = tune_rerank(rows(args.chatterbot_queries), name="rerank", save=False, log=print, method="lr-fusion")
    finally:
        stop_parts()
    assert report.decider is not None
    report.decider.version = 1
    report.decider.created = "2026-12-06T00:00:00+00:00"
    report.decider.params = {"sources": ["aclsum==0.1.2 val.jsonl (CC BY 4.0)",
                                         "chatterbot-corpus==1.3.3 english/chinese dev halves, 20-200 candidates, "
                                         "and 17 other languages' dev halves, 40 candidates (BSD-3-Clause)"],
                             "built_by": "benchmarks/build_rerank.py",
                             # the cosine feature comes from the catalog's part for the query's language
                             "parts": {"en": embedding_part("en"), "zh": embedding_part("zh")}}
    text = json.dumps(report.decider.to_json(), ensure_ascii=False, sort_keys=True)
    TARGET.write_text(text, encoding="utf-8")
    print(report.table())
    print(f"wrote {TARGET} sha256 {hashlib.sha256(text.encode()).hexdigest()}")


if __name__ == "__main__":
    main()
