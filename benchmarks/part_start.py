"""Wall time of commands that read a GGUF file's metadata, before and after the header reader.

Each command run ``--runs`` times in a fresh process on one core, with the source tree given by ``--before`` (a
checkout of an earlier commit, put first on ``PYTHONPATH``) and with this checkout; median seconds. The commands
are the README's ``tune classify --no-engine`` (the embedding part reads 36 tickets) and ``classify --decider``
(the tuned probe answers one text) — each starts the embedding parts —, ``plan`` of the default model, and ``run``
on the default model (its context sized by the memory plan), in a data dir of their own that links the models.

    git worktree add /tmp/before fac8c0e
    .venv/bin/python benchmarks/part_start.py --before /tmp/before/src \\
        | tee benchmarks/results/models/part-start-2026-12-07.txt
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tiankong.paths import models_dir

ROOT = Path(__file__).parents[1]
TIANKONG = str(Path(sys.executable).parent / "tiankong")
COMMANDS = [
    [TIANKONG, "tune", "classify", "--data", "examples/tickets-labelled.jsonl", "--name", "tickets", "--no-engine"],
    [TIANKONG, "classify", "--decider", "tickets", "I was charged twice, please refund"],
    [TIANKONG, "plan", "qwen2.5-coder-0.5b-instruct:q4_k_m"],
    [TIANKONG, "run", "--max-tokens", "1", "hi"],  # the default model, its context sized by the memory plan
]


def timed(command: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    proc = subprocess.run(["taskset", "-c", "0", *command], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed: {proc.stderr[-400:]}")
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="src/ of the earlier checkout")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print("| command | before (s, median) | now (s, median) |")
    print("| --- | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "models").symlink_to(models_dir(), target_is_directory=True)
        base = {**os.environ, "TIANKONG_DATA_DIR": tmp}
        for command in COMMANDS:
            times = {}
            for side, env in (("before", {**base, "PYTHONPATH": args.before}), ("now", base)):
                times[side] = statistics.median(timed(command, env) for _ in range(args.runs))
            shown = " ".join(command[1:3] if "--no-engine" not in command else [*command[1:3], "--no-engine"])
            print(f"| tiankong {shown} | {times['before']:.1f} | {times['now']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
