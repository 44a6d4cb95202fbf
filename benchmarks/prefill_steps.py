"""What smaller engine steps cost a long prompt: llama-server's prompt-read time per token at ``-b N -ub N``.

``-b 16`` makes a batch line that steps aside notice an interactive arrival within one short step
(``gateway/preempt.py``, ``benchmarks/batch_idle.py`` mode ``+bN``), but every prompt is then read in pieces of N
tokens. This measures that price side by side in one run: for each setting, one engine (SmolLM2 by default, one
slot), distinct prompts of ``--lengths`` tokens (no cache reuse), ``--reps`` each, one token generated; the
engine's own ``timings.prompt_ms`` / ``prompt_n``.

    .venv/bin/python benchmarks/prefill_steps.py --out benchmarks/results/tasks/prefill-steps-DATE.txt
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from pathlib import Path

import httpx

from tiankong.engine import EngineConfig, EngineProcess
from tiankong.models import model_path

WORDS = ["invoice", "refund", "order", "parcel", "delivery", "late", "broken", "screen", "battery", "login", "account",
         "charge", "support", "ticket", "urgent", "printer", "network", "outage", "server", "disk", "backup", "report"]


def prompt(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def measure(model: str, step: int | None, lengths: list[int], reps: int, seed: int) -> dict[int, float]:
    """ms per prompt token for each length (median over ``reps``)."""
    config = EngineConfig(model=model_path(model), ctx=4096, slots=1, batch=step, ubatch=step)
    rng = random.Random(seed)
    found: dict[int, float] = {}
    with EngineProcess(config) as engine, httpx.Client(base_url=engine.url, timeout=600) as http:
        http.post("/completion", json={"prompt": prompt(rng, 50), "n_predict": 1, "cache_prompt": False})  # warm-up
        for length in lengths:
            per_token = []
            for _ in range(reps):
                answer = http.post("/completion", json={"prompt": prompt(rng, length), "n_predict": 1,
                                                        "cache_prompt": False, "temperature": 0})
                timings = answer.json()["timings"]
                per_token.append(timings["prompt_ms"] / timings["prompt_n"])
            found[length] = statistics.median(per_token)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct:q4_1")
    parser.add_argument("--steps", default="default,64,16,8", help="-b/-ub values; default = llama-server's own")
    parser.add_argument("--lengths", default="40,200,800", help="prompt lengths in words (about one token each)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    lengths = [int(x) for x in args.lengths.split(",")]
    steps = [None if x == "default" else int(x) for x in args.steps.split(",")]
    results = {step: measure(args.model, step, lengths, args.reps, seed=7) for step in steps}
    base = results[steps[0]]
    lines = [f"$ {' '.join(sys.argv)}", f"model {args.model}, 1 slot; ms per prompt token (median of {args.reps}), "
             f"and the ratio to -b {steps[0] or 'default'}"]
    for step, found in results.items():
        cells = [f"{length} words {ms:.2f} ms ({ms / base[length]:.2f}x)" for length, ms in found.items()]
        lines.append(f"-b {step or 'default'}: " + "; ".join(cells))
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
