"""CLI start-up: wall time of ``tiankong --help``, every verb's ``--help``, one command that needs no engine
(``tiankong redact --no-model …``) and ``import tiankong``, median of ``--runs`` fresh processes each (issue 23:
``tiankong --help`` under 0.5 s; issue 45: every verb and a no-engine command under 0.5 s on 2 cores).

    .venv/bin/python benchmarks/cli_startup.py --runs 5

Writes the raw times to ``benchmarks/results/cli/startup-<UTC date>.json`` (``--out`` to change) and prints a
table. ``tiankong --help`` lists the commands from a table (``tiankong.cli.COMMANDS``); a verb's own ``--help``
imports that verb's module, which must not import scikit-learn/scipy (deciders load them when one answers) or
jsonschema (its format checkers build an RFC 3987 grammar at import: loaded when a schema is first checked).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from tiankong.cli import COMMANDS

TIANKONG = str(Path(sys.executable).parent / "tiankong")
TARGET_S = 0.5
RESULTS = Path(__file__).parent / "results" / "cli"


def cases() -> dict[str, list[str]]:
    found = {"tiankong --help": [TIANKONG, "--help"]}
    found.update({f"tiankong {verb} --help": [TIANKONG, verb, "--help"] for verb in COMMANDS})
    found["tiankong redact --no-model TEXT"] = [TIANKONG, "redact", "--no-model", "Call me at 13800138000."]
    found["python -c 'import tiankong'"] = [sys.executable, "-c", "import tiankong"]
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None, help="JSON file for the raw times")
    args = parser.parse_args()
    argvs = cases()
    times: dict[str, list[float]] = {name: [] for name in argvs}
    for _ in range(args.runs):  # interleaved, so machine noise hits every case alike
        for name, argv in argvs.items():
            started = time.perf_counter()
            subprocess.run(argv, capture_output=True, check=True)
            times[name].append(time.perf_counter() - started)
    now = datetime.now(UTC)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    summary = {name: {"median_s": round(statistics.median(v), 4), "min_s": round(min(v), 4),
                      "max_s": round(max(v), 4)} for name, v in times.items()}
    record = {"when": now.isoformat(timespec="seconds"), "commit": commit, "runs": args.runs, "cores": os.cpu_count(),
              "load_avg_1m": round(os.getloadavg()[0], 2), "target_s": TARGET_S, "summary": summary,
              "raw_s": {name: [round(x, 4) for x in v] for name, v in times.items()}}
    out = args.out or RESULTS / f"startup-{now.date().isoformat()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(f"{args.runs} runs each, cores {os.cpu_count()}, load avg {record['load_avg_1m']}, commit {commit}")
    for name, row in summary.items():
        mark = "" if row["median_s"] <= TARGET_S else f"  > {TARGET_S} s"
        print(f"{name:<42} median {row['median_s']:.3f} s  (min {row['min_s']:.3f}, max {row['max_s']:.3f}){mark}")
    worst = max(summary, key=lambda name: summary[name]["median_s"])
    print(f"slowest: {worst} {summary[worst]['median_s']:.3f} s; raw: {out}")


if __name__ == "__main__":
    main()
