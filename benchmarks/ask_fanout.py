"""ask's schedule against the best one llama-server allows: is "eight questions ≤ 1.5× one" reachable here?

``ask`` (``tasks/ask.py``) reads the text once on one slot and asks the questions one after another; each later
question prefills only its own ~15 tokens. On this CPU a prefill costs about the same per token at any batch size,
so that schedule cannot reach 1.5× when eight questions' own tokens are as many as the text's. This benchmark
measures the alternative that makes every later question nearly free where prefill is memory-bound (a GPU): read
the text and the first question on one slot, copy that slot's cache to six more (llama-server ``/slots`` save and
restore, ``--slot-save-path``), and send the other seven questions at once, one per slot, so the engine reads all
their tokens in one batch.

Per text (the first ~600 characters of ACL abstracts, aclsum 0.1.2, as ``ask_speed.py``), each condition on its
own copy of the text (a different first line: no condition reads another's cache), on one engine (default model,
8 slots), with ``ask``'s prompts and its yes/no probability request (``choose_flow``'s body):

* ``one``        — the first question alone;
* ``sequential`` — the eight questions one after another on one slot (``ask`` today);
* ``fan-out``    — the first question, then the slot copied to six others and the other seven at once.

Prints seconds per text for each, the ratios to ``one`` (the issue's target: eight ≤ 1.5× one), the prompt tokens
the engine evaluated, and the largest difference in P(yes) between fan-out and sequential (batching must not
change an answer: ``ask`` promises the answers of the questions asked one by one).

    .venv/bin/python benchmarks/ask_fanout.py [--texts 12] [--out benchmarks/results/tasks/ask-fanout.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).parent))
import datasets  # noqa: E402
from ask_speed import QUESTIONS, excerpt  # noqa: E402

from tiankong.engine import EngineConfig, EngineProcess  # noqa: E402
from tiankong.models import DEFAULT_MODEL, model_path  # noqa: E402
from tiankong.structured.flow import _next_token_body  # noqa: E402
from tiankong.tasks.ask import Question, question_messages  # noqa: E402

SLOTS = 8


class Engine:
    def __init__(self, url: str) -> None:
        self.http = httpx.Client(base_url=url, timeout=600)
        ids = [self.http.post("/tokenize", json={"content": w, "add_special": False}).json()["tokens"]
               for w in ("yes", "no")]
        assert all(len(t) == 1 for t in ids), ids
        self.yes, self.no = ids[0][0], ids[1][0]
        self.evaluated = 0

    def prompt(self, text: str, question: str) -> str:
        messages = question_messages(text, Question("q", "yes_no", question))
        return str(self.http.post("/apply-template", json={"messages": messages}).json()["prompt"])

    def p_yes(self, prompt: str, slot: int) -> float:
        body = {**_next_token_body(prompt, (), {self.yes, self.no}, None), "id_slot": slot}
        answer = self.http.post("/completion", json=body).json()
        self.evaluated += int(answer["timings"]["prompt_n"])
        top = {int(t["id"]): float(t["prob"]) for t in answer["completion_probabilities"][0]["top_probs"]}
        return top.get(self.yes, 0.0) / max(top.get(self.yes, 0.0) + top.get(self.no, 0.0), 1e-12)

    def copy(self, source: int, targets: list[int], name: str) -> None:
        assert self.http.post(f"/slots/{source}?action=save", json={"filename": name}).status_code == 200
        for target in targets:
            answer = self.http.post(f"/slots/{target}?action=restore", json={"filename": name})
            assert answer.status_code == 200, answer.text


def run_text(engine: Engine, pool: ThreadPoolExecutor, index: int, text: str) -> dict[str, Any]:
    row: dict[str, Any] = {"chars": len(text)}
    for name in ("one", "sequential", "fanout"):
        prompts = [engine.prompt(f"Document {index}-{name}.\n{text}", q) for q in QUESTIONS]
        engine.evaluated = 0
        began = time.perf_counter()
        if name == "one":
            probs = [engine.p_yes(prompts[0], 0)]
        elif name == "sequential":
            probs = [engine.p_yes(p, 0) for p in prompts]
        else:
            probs = [engine.p_yes(prompts[0], 0)]
            engine.copy(0, list(range(1, SLOTS - 1)), f"ask-{index}.bin")
            probs += list(pool.map(lambda item: engine.p_yes(item[1], item[0]), enumerate(prompts[1:])))
        row[f"{name}_s"] = time.perf_counter() - began
        row[f"{name}_evaluated"] = engine.evaluated
        row[f"{name}_p_yes"] = probs
    row["max_diff"] = max(abs(a - b) for a, b in zip(row["sequential_p_yes"], row["fanout_p_yes"], strict=True))
    return row


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--texts", type=int, default=12)
    parser.add_argument("--out", default="benchmarks/results/tasks/ask-fanout.json")
    args = parser.parse_args()
    texts = [excerpt(d["sentences"]) for d in datasets.aclsum_documents("test", limit=args.texts)]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as saved:
        config = EngineConfig(model=model_path(args.model), ctx=2048 * SLOTS, slots=SLOTS,
                              extra_args=["--slot-save-path", saved + "/"])
        with EngineProcess(config) as process, ThreadPoolExecutor(SLOTS) as pool:
            engine = Engine(process.url)
            run_text(engine, pool, -1, "Warm-up text about nothing in particular.")
            for index, text in enumerate(texts):
                row = run_text(engine, pool, index, text)
                rows.append(row)
                print(f"text {index:2d} {row['chars']:4d} chars  one {row['one_s']:5.2f}s  sequential "
                      f"{row['sequential_s']:5.2f}s ({row['sequential_s'] / row['one_s']:4.2f}x)  fan-out "
                      f"{row['fanout_s']:5.2f}s ({row['fanout_s'] / row['one_s']:4.2f}x)  evaluated "
                      f"{row['one_evaluated']}/{row['sequential_evaluated']}/{row['fanout_evaluated']}  "
                      f"max |dP| {row['max_diff']:.2e}", flush=True)
    one = sum(r["one_s"] for r in rows)
    summary = {"model": args.model, "texts": len(rows), "slots": SLOTS,
               "sequential_vs_one": sum(r["sequential_s"] for r in rows) / one,
               "fanout_vs_one": sum(r["fanout_s"] for r in rows) / one,
               "evaluated": {k: statistics.mean(r[f"{k}_evaluated"] for r in rows)
                             for k in ("one", "sequential", "fanout")},
               "max_diff": max(r["max_diff"] for r in rows), "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(summary, indent=1))
    ev = summary["evaluated"]
    report = (f"model {args.model}, {len(rows)} texts, 8 yes/no questions, {SLOTS} slots\n"
              f"time / one question: sequential (ask today) {summary['sequential_vs_one']:.2f}x, "
              f"fan-out {summary['fanout_vs_one']:.2f}x (target <= 1.5)\n"
              f"prompt tokens evaluated per text: one {ev['one']:.0f}, sequential {ev['sequential']:.0f}, "
              f"fan-out {ev['fanout']:.0f} (eight/one {ev['sequential'] / ev['one']:.2f})\n"
              f"largest |P(yes) fan-out - P(yes) sequential|: {summary['max_diff']:.2e}\n")
    Path(args.out).with_suffix(".txt").write_text(report)
    print(report)


if __name__ == "__main__":
    main()
