"""Dedupe stage speed (issue 42): records per second of the MinHash stage (shingle hashes and signatures in numpy
with datasketch's affine32 permutations, banding with datasketch's band ranges, the Jaccard estimate of every
candidate) and of the exact-key stage, for 500-character
records, with 10% planted near copies (a few words replaced) so LSH has real candidates.

    taskset -c 0,1 .venv/bin/python benchmarks/dedupe.py --records 20000 --out benchmarks/results/dedupe/speed.json

The records are generated from a fixed seed (quality against gold duplicate labels: benchmarks/dedupe_febrl.py).
Target: MinHash stage ≥ 2,000 records/s on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import time
from pathlib import Path

from tiankong.dedupe.keys import KeyOptions
from tiankong.dedupe.near import near_pairs

WORDS = tuple(str.split(
    "order refund printer invoice account password delivery shipping address support ticket customer "
    "billing report quarter revenue network server outage latency update release feature request bug crash "
    "login screen button email phone contract renewal discount price product warehouse stock supplier "
    "meeting schedule project deadline budget review approval policy security audit backup storage"))


def make_records(n: int, length: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    texts: list[str] = []
    for i in range(n):
        if i and rng.random() < 0.1:  # a near copy of an earlier record: three words replaced
            words = rng.choice(texts).split()
            for _ in range(3):
                words[rng.randrange(len(words))] = rng.choice(WORDS)
            texts.append(" ".join(words))
            continue
        words = []
        while sum(len(w) + 1 for w in words) < length:
            words.append(rng.choice(WORDS))
        texts.append(" ".join(words)[:length])
    return texts


def rss_mib() -> tuple[float, float]:
    """(current, peak) resident set size of this process, MiB (Linux /proc)."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return (int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024)


def tiny(n: int, seed: int, out: str) -> None:
    """Bounded memory for many tiny records: the whole flow (exact, near) over ``n`` records of ~30 characters."""
    from tiankong.dedupe import DedupeOptions, Record, dedupe_records

    rng = random.Random(seed)
    start_rss = rss_mib()[0]
    records: list[Record] = []
    for i in range(n):
        if i and rng.random() < 0.1:  # an exact copy (case, punctuation) or a one-word change of an earlier one
            earlier = records[rng.randrange(len(records))].text
            text = earlier.upper() + "!" if rng.random() < 0.5 else earlier.rsplit(" ", 1)[0] + " " + rng.choice(WORDS)
        else:
            text = f"{rng.choice(WORDS)} {rng.randrange(10**6)} {rng.choice(WORDS)} {rng.choice(WORDS)}"
        records.append(Record(i, text))
    input_rss = rss_mib()[0]
    started = time.perf_counter()
    result = dedupe_records(records, DedupeOptions(stages=("exact", "near")))
    seconds = time.perf_counter() - started
    now, peak = rss_mib()
    report = {"records": n, "mean_chars": round(sum(len(r.text) for r in records) / n, 1),
              "cpus_allowed": len(os.sched_getaffinity(0)), "python": platform.python_version(),
              "seconds": round(seconds, 2), "records_per_s": round(n / seconds),
              "rss_mib": {"before_input": round(start_rss), "after_input": round(input_rss), "after_run": round(now),
                          "peak": round(peak)},
              "run_peak_over_input_bytes_per_record": round((peak - input_rss) * 1024 * 1024 / n),
              "clusters": result.report["clusters"], "stages": result.report["stages"]}
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(report, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=20000)
    parser.add_argument("--length", type=int, default=500)
    parser.add_argument("--near", type=float, default=0.7)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="benchmarks/results/dedupe/speed.json")
    parser.add_argument("--tiny", type=int, default=0, help="instead: the exact and near stages of dedupe_records "
                        "over N tiny records (about 30 characters), with the peak RSS")
    args = parser.parse_args()
    if args.tiny:
        tiny(args.tiny, args.seed, args.out)
        return
    texts = make_records(args.records, args.length, args.seed)
    keys = KeyOptions()
    start = time.perf_counter()
    normalised = [keys.normalise(t) for t in texts]
    exact_keys = {keys.key(t) for t in texts}
    exact_s = time.perf_counter() - start
    start = time.perf_counter()
    pairs = near_pairs(normalised, low=args.near, k=5)
    near_s = time.perf_counter() - start
    result = {
        "records": args.records, "chars_per_record": args.length, "near_threshold": args.near, "shingle": 5,
        "cpus_allowed": len(os.sched_getaffinity(0)), "python": platform.python_version(),
        "exact": {"seconds": round(exact_s, 3), "records_per_s": round(args.records / exact_s),
                  "distinct_keys": len(exact_keys)},
        "minhash": {"seconds": round(near_s, 3), "records_per_s": round(args.records / near_s),
                    "pairs": len(pairs)},
        "target_minhash_records_per_s": 2000,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
