"""Pool several ``gateway_overhead.py --json`` runs: throughput ratio gateway/direct per concurrency over all
runs (total requests / total wall time per mode) and the canned-upstream added p50 of each run.

    .venv/bin/python benchmarks/gateway_overhead_pooled.py benchmarks/results/gateway/overhead-runs.txt

The file holds the runs' JSON documents (lines starting with ``#`` are comments). Targets (issue 20): ratio
>= 0.97 at every concurrency, added p50 <= 2 ms.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def documents(text: str) -> list[dict[str, Any]]:
    decoder, found, at = json.JSONDecoder(), [], 0
    body = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    while (start := body.find("{", at)) != -1:
        doc, at = decoder.raw_decode(body, start)
        found.append(doc)
    return found


def main() -> None:
    runs = [doc for path in sys.argv[1:] for doc in documents(Path(path).read_text(encoding="utf-8"))]
    levels = sorted({int(k) for run in runs for k in run if k.isdigit()})
    print(f"{len(runs)} runs pooled")
    print(f"{'conc':>4} {'direct r/s':>10} {'gateway r/s':>11} {'ratio':>6}  per run")
    for level in levels:
        rows = [run[str(level)] for run in runs if str(level) in run]
        rate = {}
        for mode in ("direct", "gateway"):
            n = sum(r[mode]["n"] for r in rows)
            wall = sum(r[mode]["n"] / r[mode]["req_per_s"] for r in rows)
            rate[mode] = n / wall
        each = " ".join(f"{r['throughput_ratio']:.3f}" for r in rows)
        print(f"{level:>4} {rate['direct']:>10.2f} {rate['gateway']:>11.2f} {rate['gateway'] / rate['direct']:>6.3f}"
              f"  {each}")
    for index, run in enumerate(runs, 1):
        if "canned" in run:
            canned = run["canned"]
            print(f"run {index} canned upstream: added p50 {canned['added_p50_ms']:.2f} ms, added p99 "
                  f"{canned['added_p99_ms']:.2f} ms (direct p50 {canned['direct_p50_ms']:.2f} ms)")


if __name__ == "__main__":
    main()
