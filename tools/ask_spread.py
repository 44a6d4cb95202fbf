#!/usr/bin/env python3
"""The spread behind test_ask's BATCH_NOISE: how far a label probability moves between asking a question with the
others (``ask`` reads the text once and the questions from the prompt cache, in other batch shapes) and asking it
alone, cold and warm, over several rounds on the test engine (SmolLM2-135M, the suite's 2 slots and 4096 ctx).

    PYTHONPATH=src python tools/ask_spread.py --rounds 4 > benchmarks/results/tolerances/ask-spread.txt
    taskset -c 0 …  (one core, one engine thread: how `make test` runs it, a worker per core)
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

from tiankong import Client
from tiankong.engine import EngineConfig, EngineProcess, locate_engine
from tiankong.models import TEST_MODEL, model_path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "tests"))
    spec = importlib.util.spec_from_file_location("test_ask", ROOT / "tests" / "engine" / "test_ask.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text, questions = module.TEXT, [q for q in module.QUESTIONS if q["type"] != "extract"]
    engine = EngineProcess(EngineConfig(model=model_path(TEST_MODEL), ctx=4096, slots=2, alias=TEST_MODEL),
                           locate_engine())
    engine.start()
    worst, worst_alone = 0.0, 0.0
    try:
        with Client(engine.url) as client:
            first_alone: dict[str, dict[str, float]] = {}
            for round_ in range(1, args.rounds + 1):
                together = client.ask(text, questions).by_id()
                for question in questions:
                    alone = client.ask(text, [question]).answers[0].scores or {}
                    theirs = together[question["id"]].scores or {}
                    gap = max(abs(p - theirs[label]) for label, p in alone.items())
                    repeat = max(abs(p - first_alone.setdefault(question["id"], alone)[label])
                                 for label, p in alone.items())
                    worst, worst_alone = max(worst, gap), max(worst_alone, repeat)
                    print(f"round {round_} {question['id']:<8} |alone - together| max {gap:.4f}  "
                          f"|alone - alone(round 1)| max {repeat:.4f}  alone {sorted(alone.items())}", flush=True)
    finally:
        engine.stop()
    print(f"largest |alone - together| over {args.rounds} rounds: {worst:.4f}; "
          f"largest |alone - alone(round 1)|: {worst_alone:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
