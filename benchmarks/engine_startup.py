"""Engine-ready time (process start → /health 200) for SmolLM2 and the default model, median of N.

    .venv/bin/python benchmarks/engine_startup.py [--runs 5] [--json]

Both models are measured in the same run, interleaved, so machine noise hits both alike; the ratio
default/SmolLM2 is printed next to the medians.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from tiankong.engine import EngineConfig, EngineProcess, locate_engine
from tiankong.engine.cpu import cpu_model
from tiankong.models import DEFAULT_MODEL, TEST_MODEL, model_path


def measure(name: str, binary: object) -> float:
    engine = EngineProcess(EngineConfig(model=model_path(name), ctx=4096, slots=2), binary)  # type: ignore[arg-type]
    started = time.monotonic()
    engine.start()
    elapsed = time.monotonic() - started
    engine.stop()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    binary = locate_engine()
    names = [TEST_MODEL, DEFAULT_MODEL]
    samples: dict[str, list[float]] = {name: [] for name in names}
    measure(TEST_MODEL, binary)  # warm the page cache once, not counted
    for _ in range(args.runs):
        for name in names:
            samples[name].append(measure(name, binary))
    medians = {name: statistics.median(values) for name, values in samples.items()}
    result = {
        "engine": f"{binary.version} ({binary.commit})", "cpu": cpu_model(), "runs": args.runs,
        "median_ready_s": medians, "samples_s": samples,
        "ratio_default_vs_smollm2": medians[DEFAULT_MODEL] / medians[TEST_MODEL],
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"engine {result['engine']} on {result['cpu']}, ctx 4096, 2 slots, {args.runs} runs each")
    print(f"{'model':<40} {'median ready (s)':>17} {'min':>7} {'max':>7}")
    for name in names:
        print(f"{name:<40} {medians[name]:>17.2f} {min(samples[name]):>7.2f} {max(samples[name]):>7.2f}")
    print(f"ratio default / SmolLM2: {result['ratio_default_vs_smollm2']:.2f}x")


if __name__ == "__main__":
    main()
