"""ask: eight yes/no questions about one text against one question, and against asking them the naive way.

Texts: the first ~600 characters (whole sentences) of ACL paper abstracts and introductions (aclsum 0.1.2),
one per item; default model, one client, sequential calls (concurrency 1). Per text, three conditions, each
on its own copy of the text (a different first line, so no condition reads another's prompt cache):

* ``one``   — ``ask`` with one yes/no question;
* ``eight`` — ``ask`` with eight yes/no questions (text first, one slot: the text prefilled once);
* ``naive`` — the eight questions as eight separate one-question requests whose text the engine cannot reuse
  (question first, as ``classify`` prompts: every request prefills the text again).

Prints seconds per text for each, the ratios eight/one (target ≤ 1.5) and naive/one, and the prompt tokens
the engine evaluated.

    .venv/bin/python benchmarks/ask_speed.py [--texts 12] [--model NAME]
        [--out benchmarks/results/tasks/ask-speed.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import datasets  # noqa: E402

from tiankong import Client  # noqa: E402
from tiankong.engine import EngineConfig, EngineProcess  # noqa: E402
from tiankong.models import DEFAULT_MODEL, model_path  # noqa: E402
from tiankong.structured.drivers import run_sync  # noqa: E402
from tiankong.structured.flow import choose_flow  # noqa: E402
from tiankong.structured.slots import SlotPin  # noqa: E402

QUESTIONS = ["Does the text mention a number?", "Is the text about natural language processing?",
             "Does the text describe an experiment?", "Is the text written in the first person plural?",
             "Does the text name a dataset?", "Does the text propose a new method?",
             "Does the text compare against earlier work?", "Does the text report a result?"]


def excerpt(sentences: list[str], size: int = 600) -> str:
    text = ""
    for sentence in sentences:
        if len(text) + len(sentence) > size and text:
            break
        text = (text + " " + sentence).strip()
    return text


def naive_messages(text: str, question: str) -> list[dict[str, Any]]:
    """Question first (a system line carrying the question, then the text): every question prefills the text."""
    return [{"role": "system", "content": f"Question: {question}\nAnswer yes or no about the user's text."},
            {"role": "user", "content": text}]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--texts", type=int, default=12)
    parser.add_argument("--out", default="benchmarks/results/tasks/ask-speed.json")
    args = parser.parse_args()
    documents = datasets.aclsum_documents("test", limit=args.texts)
    texts = [excerpt(d["sentences"]) for d in documents]
    questions = [{"id": f"q{i}", "type": "yes_no", "question": q} for i, q in enumerate(QUESTIONS)]
    rows: list[dict[str, Any]] = []
    config = EngineConfig(model=model_path(args.model), ctx=4096 * 2, slots=2)
    with EngineProcess(config) as engine, Client(engine.url) as client:
        client.ask("Warm-up text.", questions[:1])
        for index, text in enumerate(texts):
            start = time.perf_counter()
            one = client.ask(f"Document {index}-a.\n{text}", questions[:1])
            one_s = time.perf_counter() - start
            start = time.perf_counter()
            eight = client.ask(f"Document {index}-b.\n{text}", questions)
            eight_s = time.perf_counter() - start
            pin, start = SlotPin(), time.perf_counter()
            for q in QUESTIONS:
                run_sync(choose_flow(naive_messages(f"Document {index}-c.\n{text}", q), ["yes", "no"], pin=pin),
                         client._request)
            naive_s = time.perf_counter() - start
            row = {"chars": len(text), "one_s": one_s, "eight_s": eight_s, "naive_s": naive_s,
                   "one_evaluated": one.evaluated_tokens, "eight_evaluated": eight.evaluated_tokens,
                   "eight_prompt_tokens": eight.prompt_tokens, "naive_evaluated": pin.evaluated}
            rows.append(row)
            print(f"text {index:2d} {len(text):4d} chars  one {one_s:5.2f}s  eight {eight_s:5.2f}s "
                  f"({eight_s / one_s:4.2f}x)  naive {naive_s:5.2f}s ({naive_s / one_s:4.2f}x)  evaluated "
                  f"{one.evaluated_tokens}/{eight.evaluated_tokens}/{pin.evaluated} tokens", flush=True)
    one_total = sum(r["one_s"] for r in rows)
    summary = {"model": args.model, "texts": len(rows), "questions": len(QUESTIONS),
               "mean_chars": statistics.mean(r["chars"] for r in rows),
               "eight_vs_one": sum(r["eight_s"] for r in rows) / one_total,
               "naive_vs_one": sum(r["naive_s"] for r in rows) / one_total,
               "evaluated_tokens": {key: statistics.mean(r[f"{key}_evaluated"] for r in rows)
                                    for key in ("one", "eight", "naive")},
               "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(summary, indent=1))
    text = (f"model {args.model}, {len(rows)} texts of ~{summary['mean_chars']:.0f} characters, 8 yes/no questions\n"
            f"time, eight questions with ask / one question: {summary['eight_vs_one']:.2f}x (target <= 1.5)\n"
            f"time, eight naive requests (question first) / one question: {summary['naive_vs_one']:.2f}x\n"
            f"prompt tokens evaluated per text: one {summary['evaluated_tokens']['one']:.0f}, eight "
            f"{summary['evaluated_tokens']['eight']:.0f}, naive {summary['evaluated_tokens']['naive']:.0f}\n")
    Path(args.out).with_suffix(".txt").write_text(text)
    print(text)


if __name__ == "__main__":
    sys.exit(main())
