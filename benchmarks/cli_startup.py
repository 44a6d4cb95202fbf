"""CLI start-up: wall time of ``tiankong --help``, ``tiankong classify --help`` and ``import tiankong``, median of
``--runs`` fresh processes each (issue 23: ``tiankong --help`` under 0.5 s).

    .venv/bin/python benchmarks/cli_startup.py --runs 7

``tiankong --help`` lists the commands from a table (``tiankong.cli.COMMANDS``) and the package's names load on
first use, so neither scikit-learn nor jsonschema's format checkers are imported; a command's own ``--help``
imports that command's module.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

TIANKONG = str(Path(sys.executable).parent / "tiankong")
CASES = {
    "tiankong --help": [TIANKONG, "--help"],
    "tiankong classify --help": [TIANKONG, "classify", "--help"],
    "python -c 'import tiankong'": [sys.executable, "-c", "import tiankong"],
    "python -c 'from tiankong import Client'": [sys.executable, "-c", "from tiankong import Client"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    times: dict[str, list[float]] = {name: [] for name in CASES}
    for _ in range(args.runs):  # interleaved, so machine noise hits every case alike
        for name, argv in CASES.items():
            started = time.perf_counter()
            subprocess.run(argv, capture_output=True, check=True)
            times[name].append(time.perf_counter() - started)
    print(f"{args.runs} runs each, cores {os.cpu_count()}, load avg {os.getloadavg()[0]:.1f}")
    for name, values in times.items():
        print(f"{name:<42} median {statistics.median(values):.3f} s  (min {min(values):.3f}, max {max(values):.3f})")


if __name__ == "__main__":
    main()
