"""compress on ACLSum papers: highlight recall at one token budget, every method side by side (issue 39).

    .venv/bin/python benchmarks/compress_spread.py [--split val|test] [--docs N] [--budget 200]
        [--abstractive 2] [--model NAME] [--out benchmarks/results/compress/NAME.json]

A paper = abstract + introduction + conclusion (≈ 1,300 tokens, ≈ 38 sentences, ≈ 14 highlighted). A highlighted
sentence counts as recalled when one output sentence / point covers ≥ 50 % of its content words (the measure of
``bench_compress.py``). Every method gets the same budget, counted with the chat model's ``/tokenize`` on the
output as a caller gets it (lines joined by ``\\n``).

* without a question (gold: sentences highlighted for any aspect): lead-N; BM25 sentence selection (each sentence
  scored against the whole paper as the query); ``compress`` extractive (embedding centroid + TF centrality), the
  same without the embedding part (TF centrality alone), and — on ``--abstractive`` papers only, minutes each on
  2 cores — the old map-reduce key points (``mode="abstractive"``) and ``mode="hybrid"``.
* with a question (per aspect: question = the aspect's summary, gold = that aspect's highlights): lead-N; BM25
  selection against the question; ``compress`` extractive (BM25 + embedding, RRF) and the same without the part.

Two versions of every paper: "paper" (abstract first: the opening already summarises it, lead-N's best case)
and "spread" (the same paper without its abstract: introduction + conclusion, the key facts spread through it, the
highlights of the dropped abstract sentences dropped too). The test split is frozen (docs/tasks.md: sha256 of
the JSON list of ids).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent / "tasks"))

from common import DEFAULT_MODEL, content_words, engine, print_table  # noqa: E402
from datasets import aclsum_documents  # noqa: E402

from tiankong import Client  # noqa: E402
from tiankong.tasks.compress import compress_flow  # noqa: E402
from tiankong.tasks.extractive import lead, select  # noqa: E402
from tiankong.tasks.retrieval import bm25_scores  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "compress"


def covered(sentence: str, points: list[str], threshold: float = 0.5) -> bool:
    need = set(content_words(sentence))
    return bool(need) and max((len(need & set(content_words(p))) / len(need) for p in points),
                              default=0.0) >= threshold


def recall(gold: list[str], points: list[str]) -> float:
    return sum(covered(s, points) for s in gold) / len(gold) if gold else float("nan")


def abstract_sizes(split: str) -> dict[str, int]:
    """Sentences in each paper's abstract (``aclsum_documents`` concatenates the sections)."""
    import zipfile

    from datasets import ACLSUM, _fetch

    with zipfile.ZipFile(_fetch(ACLSUM)) as archive:
        lines = archive.read(f"aclsum/dataset/{split}.jsonl").decode("utf-8").splitlines()
    return {row["id"]: len(row["sentences"]["abstract"]) for row in map(json.loads, lines)}


def without_abstract(doc: dict[str, Any], size: int) -> dict[str, Any]:
    return {**doc, "sentences": doc["sentences"][size:],
            "highlights": {a: h[size:] for a, h in doc["highlights"].items()}}


class Runner:
    def __init__(self, client: Client, budget: int) -> None:
        self.client, self.budget = client, budget

    def tokens(self, text: str) -> int:
        return len(self.client.tokenize(text)) if text else 0

    def fit(self, picked: list[str]) -> list[str]:
        """Drop from the end until the joined lines fit the budget (sentence costs are counted one by one)."""
        while picked and self.tokens("\n".join(picked)) > self.budget:
            picked = picked[:-1]
        return picked

    def ours(self, text: str, question: str | None, *, part: bool = True, mode: str = "extractive") -> Any:
        if part and mode == "extractive":
            return self.client.compress(text, budget_tokens=self.budget, question=question, mode=mode)
        flow = compress_flow(text, budget_tokens=self.budget, question=question, mode=mode, chunk_tokens=512,
                             part=None if not part else "all-minilm-l6-v2:f16", model=self.client.model)
        return self.client._run(flow)


def one_paper(run: Runner, doc: dict[str, Any], slow: bool) -> dict[str, Any]:
    sentences = doc["sentences"]
    text = " ".join(sentences)
    costs = [run.tokens(s) + 1 for s in sentences]  # + the joining line break
    any_flags = [any(doc["highlights"][a][i] for a in doc["highlights"]) for i in range(len(sentences))]
    gold = [s for s, f in zip(sentences, any_flags, strict=True) if f]
    row: dict[str, Any] = {"id": doc["id"], "sentences": len(sentences), "highlighted": len(gold),
                           "input_tokens": run.tokens(text), "plain": {}, "question": {}}
    outputs: dict[str, list[str]] = {
        "lead-N": run.fit([sentences[i] for i in lead(costs, run.budget)]),
        "BM25 selection": run.fit([sentences[i] for i in select(bm25_scores(text, sentences), costs, run.budget)]),
    }
    timings: dict[str, float] = {}
    for name, kwargs in (("compress extractive", {}), ("compress extractive, no embedding part", {"part": False})):
        started = time.monotonic()
        result = run.ours(text, None, **kwargs)
        timings[name] = time.monotonic() - started
        outputs[name] = result.points
        row.setdefault("scoring", {})[name] = result.scoring
    if slow:
        for mode in ("abstractive", "hybrid"):
            started = time.monotonic()
            outputs[f"compress {mode}"] = run.ours(text, None, mode=mode).points
            timings[f"compress {mode}"] = time.monotonic() - started
    for name, points in outputs.items():
        row["plain"][name] = {"recall": recall(gold, points), "tokens": run.tokens("\n".join(points)),
                              "seconds": round(timings.get(name, 0.0), 3)}
    for aspect, question in doc["summary"].items():
        flags = doc["highlights"][aspect]
        aspect_gold = [s for s, f in zip(sentences, flags, strict=True) if f]
        if not aspect_gold:
            continue
        per: dict[str, list[str]] = {
            "lead-N": outputs["lead-N"],
            "BM25 selection": run.fit([sentences[i] for i in select(bm25_scores(question, sentences), costs,
                                                                    run.budget)]),
            "compress extractive": run.ours(text, question).points,
            "compress extractive, no embedding part": run.ours(text, question, part=False).points,
        }
        row["question"][aspect] = {name: {"recall": recall(aspect_gold, points),
                                          "tokens": run.tokens("\n".join(points))} for name, points in per.items()}
    return row


def table(rows: dict[str, list[dict[str, Any]]], setting: str) -> list[list[object]]:
    def values(subset: list[dict[str, Any]], name: str, key: str) -> list[float]:
        cells = [c for r in subset for c in (r[setting].values() if setting == "question" else [r[setting]])]
        return [c[name][key] for c in cells if name in c and not math.isnan(c[name]["recall"])]

    names: list[str] = []
    for row in rows["paper"]:
        for cell in (row[setting].values() if setting == "question" else [row[setting]]):
            names += [n for n in cell if n not in names]
    out: list[list[object]] = []
    for name in names:
        paper, spread = values(rows["paper"], name, "recall"), values(rows["spread"], name, "recall")
        out.append([name, len(paper), round(statistics.mean(paper), 3), len(spread),
                    round(statistics.mean(spread), 3) if spread else "–",
                    round(statistics.mean(values(rows["paper"] + rows["spread"], name, "tokens")), 1)])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--split", default="val", choices=("val", "test"))
    parser.add_argument("--docs", type=int, default=None)
    parser.add_argument("--budget", type=int, default=200)
    parser.add_argument("--abstractive", type=int, default=0, help="papers that also run the slow chat-model modes")
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    all_docs = aclsum_documents(args.split)
    split_sha = hashlib.sha256(json.dumps([d["id"] for d in all_docs]).encode()).hexdigest()
    docs = all_docs[: args.docs]
    started = time.time()
    with engine(args.model, 2, 4096) as (url, name), Client(url, timeout_s=3600.0) as client:
        run = Runner(client, args.budget)
        sizes = abstract_sizes(args.split)
        rows: dict[str, list[dict[str, Any]]] = {"paper": [], "spread": []}
        for index, doc in enumerate(docs):
            rows["paper"].append(one_paper(run, doc, index < args.abstractive))
            rows["spread"].append(one_paper(run, without_abstract(doc, sizes[doc["id"]]), index < args.abstractive))
            print(f"{index + 1}/{len(docs)} {doc['id']}", file=sys.stderr, flush=True)
    header = ["method", "n", "highlight recall: paper", "n", "spread (no abstract)", "output tokens"]
    plain, asked = table(rows, "plain"), table(rows, "question")
    print(f"\nmodel {name}, ACLSum {args.split} ({len(docs)} of {len(all_docs)} papers, split_sha256 {split_sha}), "
          f"budget {args.budget} tokens, {time.strftime('%Y-%m-%d')}\n")
    print("without a question (gold: any aspect's highlights)\n")
    print_table(header, plain)
    print("\nwith a question (the aspect summary; gold: that aspect's highlights; n = paper-aspects)\n")
    print_table(header, asked)
    out = args.out or RESULTS / f"compress_spread_{args.split}_{len(docs)}_b{args.budget}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"split": args.split, "split_sha256": split_sha, "papers": len(docs),
                               "budget": args.budget, "model": name, "argv": sys.argv[1:],
                               "seconds": round(time.time() - started, 1), "plain": plain, "question": asked,
                               "rows": rows}, indent=1))
    print(f"\nraw output: {out}")


if __name__ == "__main__":
    main()
