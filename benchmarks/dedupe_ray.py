"""A dedupe job's scale-out on Ray (issue 42: 2 nodes ≥ 1.7× one node), side by side in one run: the MinHash
signatures on this machine (one core), on a Ray cluster of one node (one core) and of two nodes (a core each), and
the whole ``kind = "dedupe"`` job (exact + near stages, OUT written once by the driver; ``--stages
exact,near,semantic`` adds the semantic stage, its vectors embedded on the nodes) on one and on two nodes.
``same_bytes`` says which outputs are the same bytes (the last run of each; ``job_s_runs``: every run's time).

    .venv/bin/python benchmarks/dedupe_ray.py --records 40000 --out benchmarks/results/dedupe/ray-DATE.json

Each node is a raylet pinned to its own core (``benchmarks/ray_nodes.py``, as for benchmarks/batch_ray.py).
The records are benchmarks/dedupe.py's: 500 characters, 10 % near copies. The driver (this process: reading the
records, the exact stage, the clusters, writing OUT) runs on both cores, beside the nodes. Every figure is the best
of ``--repeats`` runs; the outputs of exact and near stages are the same bytes everywhere (the semantic stage's
up to float noise). Loopback only; the cluster is shut down at the end.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from dedupe import make_records  # noqa: E402
from ray_nodes import add_pinned_node, pinned, pinned_cluster, two_cores  # noqa: E402

from tiankong.batch import make_job, run  # noqa: E402
from tiankong.batch.ray_dedupe import RaySpread  # noqa: E402
from tiankong.dedupe.near import band_ranges, candidate_pairs, signatures  # noqa: E402

ARGS = {"stages": ["exact", "near"]}
SHINGLE, PERMUTATIONS, LOW = 5, 128, 0.7  # the job's defaults (near = 0.7, no band)


def best_of(repeats: int, work: Any, times: list[float] | None = None) -> float:
    """The best time of ``repeats`` runs of ``work``; every run's time appended to ``times``."""
    times = [] if times is None else times
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return min(times)


def fresh(out: Path) -> Path:
    """A new output path each repeat (a finished OUT is not run again); the last one is ``out`` itself."""
    if out.exists():
        out.rename(out.with_suffix(f".{time.monotonic_ns()}.jsonl"))
        for side in out.parent.glob(out.name + ".*"):
            side.unlink()
    return out


def measure(address: str, texts: list[str], source: Path, out: Path, repeats: int) -> dict[str, Any]:
    start = time.perf_counter()
    spread = RaySpread(address)
    connect_s = time.perf_counter() - start
    try:
        spread.signatures(texts[:2000], SHINGLE, PERMUTATIONS)  # the workers started, the function shipped: untimed
        sign_s = best_of(repeats, lambda: spread.signatures(texts, SHINGLE, PERMUTATIONS))
        rows = spread.signatures(texts, SHINGLE, PERMUTATIONS)
        bands_s = best_of(repeats, lambda: spread.bands(rows, band_ranges(LOW, PERMUTATIONS)))
        described = spread.describe()
    finally:
        start = time.perf_counter()
        spread.close()
        close_s = time.perf_counter() - start
    reports: list[Any] = []
    runs: list[float] = []
    job_s = best_of(repeats, lambda: reports.append(run(make_job(input=str(source), output=str(fresh(out)),
                                                                 kind="dedupe", args=ARGS, ray=address))), runs)
    job_ray = reports[-1].step["ray"] if reports and reports[-1].step else {}
    return {"connect_s": round(connect_s, 3), "close_s": round(close_s, 3), "bands_s": round(bands_s, 3),
            "sign_s": round(sign_s, 3), "sign_records_per_s": round(len(texts) / sign_s),
            "job_s": round(job_s, 3), "job_s_runs": [round(t, 3) for t in runs],
            "job_records_per_s": round(len(texts) / job_s), **described,
            "job_partitions": job_ray.get("partitions", {})}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=40000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=None)
    parser.add_argument("--stages", default="exact,near", help="the job's stages; with semantic, each node embeds "
                        "its partition with its own embedding part (use fewer --records: ~10 records/s a core)")
    args = parser.parse_args()
    ARGS["stages"] = args.stages.split(",")
    cores = two_cores()
    work = Path(tempfile.mkdtemp(prefix="tk-dedupe-ray-"))
    texts = make_records(args.records, 500, 0)
    source = work / "in.jsonl"
    source.write_text("".join(json.dumps({"id": f"r{i}", "text": t}) + "\n" for i, t in enumerate(texts)),
                      encoding="utf-8")

    with pinned(cores[0]):
        local_sign_s = best_of(args.repeats, lambda: signatures(texts, SHINGLE, PERMUTATIONS))
        rows = signatures(texts, SHINGLE, PERMUTATIONS)
        local_bands_s = best_of(args.repeats, lambda: candidate_pairs(rows, band_ranges(LOW, PERMUTATIONS)))
        local_job_s = best_of(args.repeats, lambda: run(make_job(
            input=str(source), output=str(fresh(work / "local.jsonl")), kind="dedupe", args=ARGS)))
    print(f"this machine, one core: signatures {args.records / local_sign_s:,.0f} records/s; bands "
          f"{local_bands_s:.2f} s; whole job {args.records / local_job_s:,.0f} records/s", flush=True)

    with pinned_cluster(cores[0]) as cluster:
        one = measure(cluster.address, texts, source, work / "ray1.jsonl", args.repeats)
        print(f"ray, 1 node: {one}", flush=True)
        add_pinned_node(cluster, cores[1])
        two = measure(cluster.address, texts, source, work / "ray2.jsonl", args.repeats)
        print(f"ray, 2 nodes: {two}", flush=True)
    outputs = {name: (work / f"{name}.jsonl").read_bytes() for name in ("local", "ray1", "ray2")}
    same = len(set(outputs.values())) == 1
    result = {
        "args": vars(args), "same_output": same,
        # with the semantic stage, a node's part batches its own requests: cosines can differ at float noise
        "same_bytes": {"local_ray1": outputs["local"] == outputs["ray1"],
                       "ray1_ray2": outputs["ray1"] == outputs["ray2"]},
        "local_one_core": {"bands_s": round(local_bands_s, 3),
                           "sign_s": round(local_sign_s, 3), "sign_records_per_s": round(args.records / local_sign_s),
                           "job_s": round(local_job_s, 3), "job_records_per_s": round(args.records / local_job_s)},
        "ray_1_node": one, "ray_2_nodes": two,
        "signatures_2_vs_1": round(one["sign_s"] / two["sign_s"], 3),
        "job_2_vs_1": round(one["job_s"] / two["job_s"], 3),
    }
    if "semantic" in ARGS["stages"]:
        result["vectors_partitions"] = {"ray_1_node": one["job_partitions"].get("vectors"),
                                        "ray_2_nodes": two["job_partitions"].get("vectors")}
    print(f"2 nodes / 1 node: signatures {result['signatures_2_vs_1']:.2f}x, whole job {result['job_2_vs_1']:.2f}x "
          f"(target >= 1.7); same output everywhere: {same}", flush=True)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
