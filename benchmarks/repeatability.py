"""Do the same requests give the same probabilities? ``classify`` and ``sentiment`` on three texts, three rounds,
through one embedded engine of ``--slots`` slots (sequential requests; a task's own calls run side by side).

    .venv/bin/python benchmarks/repeatability.py --slots 1
    .venv/bin/python benchmarks/repeatability.py --slots 4

Prints each text's P(positive) per round and whether the rounds agree bit for bit (to 6 decimals), and the wall
time. llama.cpp does not promise equal logits for different batch sizes; several slots (a task's calls batched
together) and the prompt cache (a request evaluating only what its slot has not cached) change them.
"""

from __future__ import annotations

import argparse
import time

from tiankong import Client
from tiankong.models import TEST_MODEL

TEXTS = ["I hate this", "The delivery was late but the support team fixed it quickly, thanks!",
         "Refund my order 12345 now, the product arrived broken and nobody answers my e-mails."]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slots", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--model", default=TEST_MODEL)
    args = parser.parse_args()
    found: dict[str, list[float]] = {}
    with Client(model=args.model, slots=args.slots, ctx=4096) as client:
        started = time.perf_counter()
        for _ in range(args.rounds):
            for text in TEXTS:
                found.setdefault(f"classify: {text[:40]}", []).append(
                    round(client.classify(text, ["positive", "negative", "neutral"]).scores["positive"], 6))
                found.setdefault(f"sentiment: {text[:40]}", []).append(
                    round(client.task("sentiment", text=text).scores["positive"], 6))
        seconds = time.perf_counter() - started
    print(f"model {args.model}, {args.slots} slot(s), {args.rounds} rounds, {seconds:.1f} s")
    for key, values in found.items():
        print(f"{'same' if len(set(values)) == 1 else 'DIFFERS':8} {values} {key}")
    print(f"repeated bit for bit: {sum(len(set(v)) == 1 for v in found.values())} of {len(found)}")


if __name__ == "__main__":
    main()
