"""Development check of the tool-call decision, on BFCL splits the benchmark does not score.

    .venv/bin/python benchmarks/tool_calls_dev.py > benchmarks/results/structured/tool-calls/dev-….txt

12 seeded questions each from ``BFCL_v4_live_simple``, ``BFCL_v4_live_multiple`` (categories that
``tool_calls.py`` does not use) and ``BFCL_v4_parallel`` questions outside ``tool_calls.py``'s seeded sample, run
through ``Client.call`` (auto) on the default model. Every question needs a call. Prints per question (category,
decision, P(reply), calls made, calls wanted, BFCL AST verdict, seconds) and per category the counts. Used to
choose how the decision is made (results/structured/tool-calls/dev-2026-12-02-*.txt), never tool_calls.py's
sample.
"""

from __future__ import annotations

import random
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tiankong import Client
from tiankong.engine import EngineConfig, EngineProcess, locate_engine
from tiankong.models import DEFAULT_MODEL, resolve_installed

sys.path.insert(0, str(Path(__file__).parent))
import tool_calls as bench  # noqa: E402

DEV = {"live_simple": "BFCL_v4_live_simple", "live_multiple": "BFCL_v4_live_multiple"}


def rows() -> list[dict[str, Any]]:
    bench.CATEGORIES.update(DEV)
    held = {r["id"] for r in bench.load("parallel", 100)}  # tool_calls.py's sample (its --n ≤ 100)
    parallel = [r for r in bench.load("parallel", 1000) if r["id"] not in held]
    return (bench.load("live_simple", 12, seed=3) + bench.load("live_multiple", 12, seed=3)
            + random.Random(3).sample(parallel, 12))


def main() -> None:
    check = bench.checker()
    from bfcl_eval.constants.enums import Language  # type: ignore[import-not-found]

    items = rows()
    engine = EngineProcess(EngineConfig(model=resolve_installed(DEFAULT_MODEL).path, ctx=2 * 4096, slots=2),
                           locate_engine()).start()
    try:
        with Client(engine.url) as client:
            def one(row: dict[str, Any]) -> tuple[Any, ...]:
                started = time.monotonic()
                result = client.call(row["question"][0], bench.to_tools(row["function"]))
                output = [{c.name: c.arguments} for c in result.calls]
                kind = "parallel" if row["category"] == "parallel" else \
                    "multiple" if "multiple" in row["category"] else "simple"
                ok = bool(output) and check(row["function"], output, row["ground_truth"], Language.PYTHON, kind,
                                            "gpt-4o-FC")["valid"]
                return (row["category"], result.decision, round(result.probabilities.get("reply", 0.0), 2),
                        len(result.calls), len(row["ground_truth"]), ok, round(time.monotonic() - started, 1))

            with ThreadPoolExecutor(2) as pool:
                results = list(pool.map(one, items))
    finally:
        engine.stop()
    for result in results:
        print(result)
    for category in ("live_simple", "live_multiple", "parallel"):
        chosen = [r for r in results if r[0] == category]
        print(category, "call", sum(r[1] == "call" for r in chosen), "/", len(chosen),
              "count ok", sum(r[3] == r[4] for r in chosen), "ast", sum(r[5] for r in chosen))


if __name__ == "__main__":
    main()
