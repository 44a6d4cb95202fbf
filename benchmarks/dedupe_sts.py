"""Dedupe on paraphrase pairs, Chinese and English (issue 42): STS-B sentence pairs scored 0–5 by people, a pair
scored 4 or 5 ("mostly" or "completely equivalent") counted as a duplicate — the Chinese set is CNSD's STS-B (a
translation of STS-B), the English one STS-B itself, both inside the ``text2vec==1.0.4`` sdist (Apache-2.0 package;
CNSD: academic research use only; STS-B: its sources' terms). Read at run time from the package index, never
committed.

    .venv/bin/python benchmarks/dedupe_sts.py --freeze                  # the splits' sha256 (before any choice)
    .venv/bin/python benchmarks/dedupe_sts.py --langs zh en --out benchmarks/results/dedupe/sts.json

Records: every distinct sentence of a split; entities: the sentences joined by a duplicate pair (union-find), so a
pair scored under 4 is two entities unless other duplicates join them. Pair precision / recall / F1 of the clusters
(``dedupe_febrl.score``): a merge of two sentences from different STS pairs counts as false — they were not judged,
and are different items in all but a few cases. Systems, every setting chosen on the dev split (STS-B dev / CNSD
valid), the test split read once: datasketch MinHash LSH alone (k, threshold), the embedding part alone (cosine;
Chinese: multilingual-e5-small, English: MiniLM — the catalog's part per language), tiankong's stages (exact +
near + semantic) through the library, and the same with the uncertain band decided by a pair decider tuned with
``tune_dedupe`` on the dev split's candidate pairs (``dedupe_decider.decided``).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dedupe_decider  # noqa: E402
import dedupe_febrl as febrl  # noqa: E402
import public_gold  # noqa: E402

PACKAGE = "text2vec==1.0.4"
SAME_AT = 4.0
FILES = {"zh": {"dev": "STS-B/STS-B.valid.data", "test": "STS-B/STS-B.test.data"},
         "en": {"dev": "English-STS-B/stsbenchmark.tsv.gz", "test": "English-STS-B/stsbenchmark.tsv.gz"}}
KS = {"zh": (2, 3), "en": (3, 5)}


def pairs(lang: str, split: str) -> list[tuple[str, str, float]]:
    """(sentence a, sentence b, score) of one split."""
    archive = public_gold._download(PACKAGE, sdist=True)
    with tarfile.open(archive) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith(FILES[lang][split]))
        handle = tar.extractfile(member)
        assert handle is not None
        raw = handle.read()
    if lang == "zh":
        rows = [line.split("\t") for line in raw.decode("utf-8").splitlines() if line.strip()]
        return [(a.strip(), b.strip(), float(s)) for a, b, s in rows]
    text = gzip.GzipFile(fileobj=io.BytesIO(raw)).read().decode("utf-8")
    out = []
    for line in text.splitlines()[1:]:
        cells = line.split("\t")
        if cells[0] == split:
            out.append((cells[6].strip(), cells[7].strip(), float(cells[5])))
    return out


def records(rows: list[tuple[str, str, float]]) -> list[tuple[str, str, str]]:
    """(id, entity, text) of every distinct sentence; an entity is a union-find root over the duplicate pairs."""
    index: dict[str, int] = {}
    for a, b, _ in rows:
        for s in (a, b):
            index.setdefault(s, len(index))
    parent = list(range(len(index)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for a, b, score in rows:
        if score >= SAME_AT:
            ra, rb = find(index[a]), find(index[b])
            parent[max(ra, rb)] = min(ra, rb)
    return [(f"s{i}", f"e{find(i)}", s) for s, i in index.items()]


def digest(rows: list[tuple[str, str, float]]) -> str:
    return hashlib.sha256("".join(f"{a}\t{b}\t{s}\n" for a, b, s in rows).encode("utf-8")).hexdigest()


def run(langs: list[str], out: str, freeze: bool) -> None:
    from tiankong.models.catalog import embedding_part

    archive = public_gold._download(PACKAGE, sdist=True)
    results: dict[str, Any] = {"package": PACKAGE, "sdist_sha256": public_gold.sha256_file(archive),
                               "same_at": SAME_AT, "languages": {}}
    for lang in langs:
        dev_rows, test_rows = pairs(lang, "dev"), pairs(lang, "test")
        entry: dict[str, Any] = {"dev_pairs": len(dev_rows), "test_pairs": len(test_rows),
                                 "test_sha256": digest(test_rows),
                                 "test_duplicates": sum(s >= SAME_AT for *_, s in test_rows)}
        results["languages"][lang] = entry
        print(lang, entry, flush=True)
        if freeze:
            continue
        part = embedding_part(lang)
        dev_records, test_records = records(dev_rows), records(test_rows)
        entry["part"], entry["dev_records"], entry["test_records"] = part, len(dev_records), len(test_records)
        dev = febrl.Scores(dev_records, part=part, ks=KS[lang])
        test = febrl.Scores(test_records, part=part, ks=KS[lang])
        ds_grid = [(k, t) for k in KS[lang] for t in febrl.GRID]
        ds_setting, ds_dev = max(((x, febrl.score(dev_records, febrl.datasketch_pairs(dev.norm, *x)))
                                  for x in ds_grid), key=lambda x: (x[1]["f1"], str(x[0])))
        start = time.perf_counter()
        ds_pairs = febrl.datasketch_pairs(test.norm, *ds_setting)
        ds_s = time.perf_counter() - start
        emb_t, emb_dev = febrl.best(dev, lambda s, t: [(a, b) for a, b, c in s.semantic if c >= t], febrl.COS_GRID)
        combo = [(k, n, c) for k in KS[lang] for n in febrl.GRID for c in febrl.COS_GRID]
        tk_setting, tk_dev = febrl.best(dev, lambda s, x: s.system(*x), combo)
        n = len(test_records)
        systems: dict[str, Any] = {
            "datasketch": {"setting": {"k": ds_setting[0], "threshold": ds_setting[1]}, "dev": ds_dev,
                           "test": febrl.score(test_records, ds_pairs), "records_per_s": round(n / ds_s)},
            "embeddings": {"setting": {"cosine": emb_t}, "dev": emb_dev,
                           "test": febrl.score(test_records, [(a, b) for a, b, c in test.semantic if c >= emb_t]),
                           "records_per_s": round(n / test.semantic_s)},
            "tiankong_stages": {"setting": {"k": tk_setting[0], "near": tk_setting[1], "semantic": tk_setting[2]},
                                "dev": tk_dev, "test": dedupe_decider.library(test_records, tk_setting, part=part)},
        }
        print(lang, json.dumps(systems), flush=True)
        with tempfile.TemporaryDirectory() as folder:
            systems["tiankong_decided"] = dedupe_decider.decided(dev_records, test_records, tk_setting,
                                                                 f"sts-{lang}", Path(folder), part=part)
        print(lang, json.dumps(systems["tiankong_decided"]), flush=True)
        entry["systems"] = systems
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--langs", nargs="+", default=["zh", "en"], choices=("zh", "en"))
    parser.add_argument("--out", default="benchmarks/results/dedupe/sts.json")
    parser.add_argument("--freeze", action="store_true", help="only print the test splits' sha256")
    args = parser.parse_args()
    run(args.langs, args.out, args.freeze)


if __name__ == "__main__":
    main()
