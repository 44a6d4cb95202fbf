"""The Ray executor's scaling and overhead, side by side in one run: the local executor on one core, Ray with one
node (one core), Ray with two nodes (each pinned to its own core), the same classify job each time.

    .venv/bin/python benchmarks/batch_ray.py --records 300 --out benchmarks/results/batch/ray-DATE.json

Each node is a raylet pinned to its own core (``benchmarks/ray_nodes.py``): the node's workers — the engine actor
and its llama-server (``-t 1``) — inherit the pin. The local baseline is
``taskset -c 0 tiankong batch run`` (its engine then also runs one thread on core 0). items/s come from each
run's report (engine start-up excluded in all three). Targets (issue 25): 2 nodes ≥ 1.7× one node; Ray with one
node ≥ 0.9× the local executor. Loopback only; the cluster is shut down at the end.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from ray_nodes import add_pinned_node, pinned_cluster, two_cores  # noqa: E402

TIANKONG = str(Path(sys.executable).parent / "tiankong")
BILLING = ["invoice", "refund", "charged", "payment", "receipt", "subscription", "price", "card"]
BUG = ["crash", "error", "freeze", "button", "login", "page", "upload", "timeout"]
FILLER = ["the", "my", "since", "yesterday", "please", "help", "again", "account", "today", "when", "after"]


def records(path: Path, n: int, seed: int = 7) -> None:
    rng = random.Random(seed)
    with path.open("w", encoding="utf-8") as out:
        for i in range(n):
            topic = BILLING if i % 2 else BUG
            words = [rng.choice(topic if rng.random() < 0.3 else FILLER) for _ in range(rng.randint(12, 24))]
            out.write(json.dumps({"id": f"r{i}", "text": " ".join(words)}) + "\n")


def ray_run(address: str, source: Path, output: Path, model: str, slots: int) -> dict[str, Any]:
    from tiankong.batch import make_job, run

    report = run(make_job(input=str(source), output=str(output), task="classify", labels=["billing", "bug"],
                          model=model, slots=slots, ray=address))
    assert report.complete, report
    return {"items_per_s": report.items_per_s, "elapsed_s": report.elapsed_s, "nodes": report.nodes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct:q4_1")
    parser.add_argument("--records", type=int, default=300)
    parser.add_argument("--slots", type=int, default=2, help="slots per engine (each node's, and the local one)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    cores = two_cores()
    work = Path(tempfile.mkdtemp(prefix="tk-batch-ray-"))
    source = work / "in.jsonl"
    records(source, args.records)

    local = subprocess.run(["taskset", "-c", str(cores[0]), TIANKONG, "batch", "run", "--task", "classify",
                            "--labels", "billing,bug", "--input", str(source), "--output", str(work / "local.jsonl"),
                            "--model", args.model, "--slots", str(args.slots), "--json", "--no-progress"],
                           capture_output=True, text=True)
    if local.returncode != 0:
        raise SystemExit(f"local run failed: {local.stderr[-500:]}")
    local_rate = json.loads(local.stdout)["items_per_s"]
    print(f"local executor (1 core): {local_rate:.3f} items/s", flush=True)

    with pinned_cluster(cores[0]) as cluster:
        one = ray_run(cluster.address, source, work / "ray1.jsonl", args.model, args.slots)
        print(f"ray, 1 node: {one['items_per_s']:.3f} items/s", flush=True)
        add_pinned_node(cluster, cores[1])
        two = ray_run(cluster.address, source, work / "ray2.jsonl", args.model, args.slots)
        print(f"ray, 2 nodes: {two['items_per_s']:.3f} items/s ({two['nodes']})", flush=True)
    result = {
        "args": vars(args), "local_items_per_s": local_rate, "ray_1_node": one, "ray_2_nodes": two,
        "scaling_2_vs_1": round(two["items_per_s"] / one["items_per_s"], 3),
        "ray_1_vs_local": round(one["items_per_s"] / local_rate, 3),
        "ray_overhead_ms_per_item": round(1000 * (1 / one["items_per_s"] - 1 / local_rate), 2),
    }
    print(f"2 nodes / 1 node: {result['scaling_2_vs_1']:.2f}x (target >= 1.7); ray 1 node / local: "
          f"{result['ray_1_vs_local']:.2f}x (target >= 0.9); Ray's overhead {result['ray_overhead_ms_per_item']:.1f} "
          "ms of wall time per item", flush=True)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
