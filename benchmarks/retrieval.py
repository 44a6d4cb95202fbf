"""Rerank quality and speed on public labelled sets: every method side by side in one run.

    .venv/bin/python benchmarks/retrieval.py [--sets aclsum,chatterbot-en,chatterbot-zh] [--queries N]
        [--candidates 200] [--pointwise-queries 4] [--out benchmarks/results/retrieval]

Sets (public data the project did not write, fetched from the package index into the user cache):

* ``aclsum`` (``aclsum==0.1.2``, its own ``test`` split): query = a paper's aspect summary written by annotators
  (challenge / approach / outcome); candidates = every sentence of that paper (abstract, introduction,
  conclusion); relevant = the sentences the annotators highlighted for that aspect (graded 0/1).
* ``chatterbot-en`` / ``chatterbot-zh`` (``chatterbot-corpus==1.3.3``): query = the first turn of a conversation
  written by the corpus's authors, relevant = its reply (and any identical reply); candidates = the reply plus
  ``--candidates - 1`` other replies of the same language drawn with a fixed seed. Test split = the conversations
  whose sha256(query) starts with an even hex digit (frozen: docs/tasks.md names its sha256). Any other language of
  the corpus by its folder name: ``chatterbot-german``, ``chatterbot-korean``, … (``--candidates 40``: the smaller
  languages have fewer than 200 replies; frozen the same way, docs/tasks.md).

Methods: BM25 (bm25s, our CJK-aware tokens), the embedding part alone (the catalog's part for the set's language, as
rerank picks it: all-minilm-l6-v2 for English, multilingual-e5-small for Chinese; with its prefixes), RRF of the
two, the default ``rerank`` (the shipped decider, built by build_rerank.py on the dev halves only), and the chat
model's pointwise P(yes) (the old default) on the first ``--pointwise-queries`` ACLSum queries only (1-4 s a
candidate on 2 cores). nDCG@10 and recall@100 per query, averaged; seconds per query of the real
``Client.rerank`` (mode fusion), 20 candidates of about 100 tokens.
Embeddings come from the part engine once per distinct text (the same calls ``rerank`` makes, deduplicated).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent / "tasks"))

import yaml  # noqa: E402
from common import engine, ndcg_at, print_table  # noqa: E402
from datasets import CHATTERBOT, aclsum_documents, unpacked_wheel  # noqa: E402

from tiankong import Client  # noqa: E402
from tiankong.deciders.registry import load_decider  # noqa: E402
from tiankong.deciders.rerank_fusion import fused_probabilities  # noqa: E402
from tiankong.engine.parts import stop_parts  # noqa: E402
from tiankong.models import DEFAULT_MODEL  # noqa: E402
from tiankong.structured.drivers import run_sync  # noqa: E402
from tiankong.structured.part_flows import fit_texts, part_for, prefixed  # noqa: E402
from tiankong.tasks.retrieval import bm25_retrieved, bm25_scores, cosine, part_reads, rrf  # noqa: E402

Item = tuple[str, list[str], list[int]]  # query, candidates, relevance per candidate


def in_split(text: str, split: str) -> bool:
    """chatterbot: test = sha256(query) starts with an even hex digit, dev = the rest."""
    return (hashlib.sha256(text.encode("utf-8")).hexdigest()[0] in "02468ace") == (split == "test")


def aclsum(limit: int | None, split: str = "test") -> list[Item]:
    items = []
    for doc in aclsum_documents("test" if split == "test" else "val"):
        for aspect, summary in doc["summary"].items():
            rel = doc["highlights"][aspect]
            if any(rel):
                items.append((summary, doc["sentences"], rel))
    return items[:limit]


def chatterbot(language: str, candidates: int, limit: int | None, split: str = "test") -> list[Item]:
    root = unpacked_wheel(CHATTERBOT) / "chatterbot_corpus" / "data" / language
    if not root.is_dir():
        raise SystemExit(f"chatterbot-corpus has no language {language!r}: one of "
                         + ", ".join(sorted(p.name for p in root.parent.iterdir())))
    pairs = []
    for path in sorted(root.glob("*.yml")):
        for conv in yaml.safe_load(path.read_text("utf-8")).get("conversations") or []:
            if len(conv) >= 2 and isinstance(conv[0], str) and isinstance(conv[1], str) and conv[1].strip():
                pairs.append((conv[0].strip(), conv[1].strip()))
    replies = sorted({r for _, r in pairs})
    rng = random.Random(7)
    items = []
    for query, reply in pairs:
        if not in_split(query, split):
            continue
        others = [r for r in rng.sample(replies, min(len(replies), candidates + 5)) if r != reply][: candidates - 1]
        docs = [reply, *others]
        rng.shuffle(docs)
        items.append((query, docs, [int(d == reply) for d in docs]))
    return items[:limit]


def split_sha256(items: list[Item]) -> str:
    return hashlib.sha256(json.dumps([q for q, _, _ in items], ensure_ascii=False).encode()).hexdigest()


def embed_all(texts: list[str], part: str) -> dict[str, list[float]]:
    """Every distinct text's vector from the part engine (after the part's prefixes, cut to its context, as rerank
    does). ``texts`` are already prefixed (``prefixed``): a query and a passage of the same words differ."""
    from tiankong.engine.parts import PARTS

    unique = sorted(set(texts))
    vectors: dict[str, list[float]] = {}
    for start in range(0, len(unique), 256):
        chunk = unique[start:start + 256]
        fitted, _ = run_sync(fit_texts(chunk, part), _no_engine)
        assert fitted is not None, "the embedding part is not installed: tiankong models pull " + part
        for b in range(0, len(fitted), 32):
            answer = PARTS.send(part, "POST", "/v1/embeddings", {"input": fitted[b:b + 32]})
            for item in answer["data"]:
                vectors[chunk[b + item["index"]]] = item["embedding"]
    return vectors


def _no_engine(*_: Any) -> Any:
    raise RuntimeError("only the embedding part is asked here")


def ranked_relevance(scores: list[float], rel: list[int]) -> list[int]:
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    return [rel[i] for i in order]


def recall_at(ranked: list[int], k: int) -> float:
    total = sum(ranked)
    return sum(ranked[:k]) / total if total else 0.0


def evaluate(items: list[Item], part: str) -> dict[str, dict[str, float]]:
    def query(text: str) -> str:
        return prefixed([text], part, queries=1)[0]

    def passage(text: str) -> str:
        return prefixed([text], part, queries=0)[0]

    vectors = embed_all([query(q) for q, _, _ in items] + [passage(d) for _, docs, _ in items for d in docs], part)
    methods = ("bm25", "embedding", "rrf", "rerank-default")
    shipped = load_decider("rerank")
    per: dict[str, dict[str, list[float]]] = {m: {"ndcg@10": [], "recall@100": []} for m in methods}
    for q, docs, rel in items:
        bm = bm25_scores(q, docs)
        emb = [cosine(vectors[query(q)], vectors[passage(d)]) for d in docs]
        fused = rrf([bm, emb], retrieved=[bm25_retrieved(bm), None])
        # what rerank's default does: the shipped decider over BM25 and (when it reads the language) the part
        default = fused_probabilities(shipped, bm, None if part_reads(part, [q, *docs]) else emb, part)
        for method, scores in (("bm25", bm), ("embedding", emb), ("rrf", fused), ("rerank-default", default)):
            ranked = ranked_relevance(scores, rel)
            per[method]["ndcg@10"].append(ndcg_at(ranked, 10))
            per[method]["recall@100"].append(recall_at(ranked, 100))
    return {m: {k: statistics.mean(v) for k, v in d.items()} for m, d in per.items()}


def pointwise(items: list[Item], model: str, limit: int) -> dict[str, float]:
    """The chat model's P(yes) per candidate (candidates capped at 50 as that mode is), vs the others on the same."""
    out: dict[str, list[float]] = {"pointwise": [], "bm25": [], "rrf": []}
    seconds = []
    with engine(model, slots=2) as (url, _), Client(url) as client:
        for query, docs, rel in items[:limit]:
            docs, rel = docs[:50], rel[:50]
            started = time.monotonic()
            point = client.rerank(query, docs, mode="pointwise").scores
            seconds.append((time.monotonic() - started) / len(docs))
            fused = client.rerank(query, docs).scores
            for method, scores in (("pointwise", point), ("bm25", bm25_scores(query, docs)), ("rrf", fused)):
                out[method].append(ndcg_at(ranked_relevance(scores, rel), 10))
    result = {m: statistics.mean(v) for m, v in out.items()}
    result["s_per_candidate"] = statistics.mean(seconds)
    result["queries"] = float(len(seconds))
    return result


def timing(items: list[Item], queries: int = 20) -> dict[str, float]:
    """The real ``Client.rerank`` (fusion) over 20 candidates of ≈ 100 tokens (ACLSum sentence triples)."""
    with engine("smollm2-135m-instruct", slots=2) as (url, _), Client(url) as client:
        client.rerank("warm up", ["a", "b"])
        times = []
        for query, docs, _ in [it for it in items if len(it[1]) >= 60][:queries]:
            cands = [" ".join(docs[i:i + 3]) for i in range(0, 60, 3)]
            started = time.monotonic()
            client.rerank(query, cands)
            times.append(time.monotonic() - started)
    return {"median_s": statistics.median(times), "p90_s": sorted(times)[int(0.9 * len(times)) - 1],
            "queries": float(len(times)),
            "candidate_chars_mean": statistics.mean(len(" ".join(d[i:i + 3])) for _, d, _ in items
                                                    if len(d) >= 60 for i in range(0, 60, 3))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default="aclsum,chatterbot-en,chatterbot-zh")
    parser.add_argument("--queries", type=int, default=None, help="at most this many test queries per set")
    parser.add_argument("--candidates", type=int, default=200)
    parser.add_argument("--split", choices=("test", "dev"), default="test",
                        help="dev: ACLSum val, chatterbot's odd-digit half (develop there; test is frozen)")
    parser.add_argument("--pointwise-queries", type=int, default=4)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--out", default="benchmarks/results/retrieval")
    args = parser.parse_args()
    report: dict[str, Any] = {"command": " ".join(sys.argv), "split": args.split, "sets": {}}
    rows = []
    try:
        for name in args.sets.split(","):
            if name == "aclsum":
                items = aclsum(args.queries, args.split)
            else:
                short = name.removeprefix("chatterbot-")
                items = chatterbot({"en": "english", "zh": "chinese"}.get(short, short), args.candidates,
                                   args.queries, args.split)
            started = time.monotonic()
            part = part_for([text for q, docs, _ in items[:50] for text in (q, *docs[:1])])
            scores = evaluate(items, part)
            report["sets"][name] = {"queries": len(items), "split_sha256": split_sha256(items), "part": part,
                                    "candidates_mean": statistics.mean(len(d) for _, d, _ in items),
                                    "scores": scores, "seconds": time.monotonic() - started}
            for method, figures in scores.items():
                rows.append([name, len(items), method, figures["ndcg@10"], figures["recall@100"]])
        if "aclsum" in args.sets:
            items = aclsum(None, args.split)
            report["timing_20_candidates"] = timing(items)
            if args.pointwise_queries:
                report["pointwise_aclsum"] = pointwise(items, args.model, args.pointwise_queries)
    finally:
        stop_parts()
    print_table(["set", "queries", "method", "nDCG@10", "recall@100"], rows)
    print(json.dumps({k: v for k, v in report.items() if k != "sets"}, indent=1))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y-%m-%d-%H%M")
    (out / f"retrieval-{args.split}-{stamp}.json").write_text(json.dumps(report, indent=1, ensure_ascii=False))
    print(f"raw: {out / f'retrieval-{args.split}-{stamp}.json'}")


if __name__ == "__main__":
    main()
