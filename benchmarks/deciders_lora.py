"""The ``lora`` decider beside TF-IDF + logistic regression on the four corpora of ``deciders.py``, one run.

Same corpora, test sets and training samples as ``benchmarks/deciders.py`` (same seed). For each training size one
adapter is fine-tuned with the settings ``tiankong tune`` uses (``tiankong.tuning.adapter.settings()``: rank 8 on
q/v of the top 8 blocks, ≤ 40 steps, early stopping on a held-out fifth), converted to GGUF, loaded into one engine
beside the others, and the test texts are answered with it per request (label probabilities, one pass). Rows:
``sklearn-default`` (TfidfVectorizer() + LogisticRegression()), tiankong's ``tfidf`` and ``lora``; training seconds
per adapter and answering ms per item are printed. (``tune`` scores lora by k-fold CV the same way, per fold.)

    .venv/bin/python benchmarks/deciders_lora.py --model qwen2.5-coder-0.5b-instruct:q4_k_m \\
        --out benchmarks/results/deciders/qwen2.5-coder-0.5b-lora
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from deciders import SIZES, corpus, sklearn_default  # noqa: E402

from tiankong import Client  # noqa: E402
from tiankong.deciders import methods as M  # noqa: E402
from tiankong.deciders.adapter import adapter_scores_flow  # noqa: E402
from tiankong.lora.train import train_adapters  # noqa: E402
from tiankong.tuning.adapter import label_examples, settings  # noqa: E402
from tiankong.tuning.classify import stratified_subset, verbalise  # noqa: E402


def run_corpus(name: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    pool, test = corpus(name, args.test, args.seed)
    labels = sorted({lab for _, lab in pool + test})
    words = verbalise(labels)
    pool_x = [t for t, _ in pool]
    y_pool = np.asarray([labels.index(lab) for _, lab in pool])
    test_x = [t for t, _ in test]
    y_test = np.asarray([labels.index(lab) for _, lab in test])
    rows: list[dict[str, Any]] = []
    subsets = [stratified_subset(y_pool, s, args.seed) if s < len(y_pool) else np.arange(len(y_pool)) for s in SIZES]
    for subset in subsets:
        train_x, train_y = [pool_x[i] for i in subset], y_pool[subset]
        rows.append({"method": "sklearn-default", "size": len(subset),
                     "accuracy": float((sklearn_default(train_x, train_y.tolist(), test_x) == y_test).mean())})
        state = M.fit("tfidf", M.FeatureSet(train_x), train_y, len(labels))
        predicted = M.predict("tfidf", state, M.FeatureSet(test_x)).argmax(axis=1)
        rows.append({"method": "tfidf", "size": len(subset), "accuracy": float((predicted == y_test).mean())})
    datasets = [label_examples([pool_x[i] for i in subset], y_pool[subset], words) for subset in subsets]
    start = time.perf_counter()
    trained = train_adapters(args.model, datasets, work / name, settings(), log=lambda m: print(f"[{name}] {m}",
                                                                                                 flush=True))
    train_s = time.perf_counter() - start
    files = [t.path for t in trained]
    with Client(model=args.model, slots=args.slots, ctx=4096 * args.slots, adapters=[str(f) for f in files]) as client:
        for k, (subset, one) in enumerate(zip(subsets, trained, strict=True)):
            start = time.perf_counter()
            found = client._run(adapter_scores_flow(files, test_x, words, [k] * len(test_x)))
            ms = 1000 * (time.perf_counter() - start) / len(test_x)
            rows.append({"method": "lora", "size": len(subset),
                         "accuracy": float((found.argmax(axis=1) == y_test).mean()), "ms_per_item": round(ms, 1),
                         "train_s": one.report.train_s, "steps": one.report.steps,
                         "stopped_early": one.report.stopped_early})
    print(f"[{name}] done: {train_s:.0f} s training in all", flush=True)
    return {"corpus": name, "labels": labels, "test": len(test), "pool": len(pool), "rows": rows,
            "train_s_total": round(train_s, 1)}


def table(results: list[dict[str, Any]], model: str) -> str:
    lines = [f"model {model}; accuracy on each corpus' held-out test set (training sizes = labelled examples)", ""]
    for result in results:
        lines.append(f"## {result['corpus']}: {len(result['labels'])} labels, test {result['test']}, "
                     f"pool {result['pool']}; {result['train_s_total']} s of LoRA training")
        lines.append(f"{'method':<16} " + " ".join(f"{'n=' + str(s):>8}" for s in SIZES))
        for method in ("sklearn-default", "tfidf", "lora"):
            cells = [r for r in result["rows"] if r["method"] == method]
            line = f"{method:<16} " + " ".join(f"{r['accuracy']:>8.3f}" for r in cells)
            if method == "lora":
                line += "  (train s: " + ", ".join(f"{r['train_s']:.0f}" for r in cells) + "; answer ms/item: " + \
                        ", ".join(f"{r['ms_per_item']:.0f}" for r in cells) + ")"
            lines.append(line)
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b-instruct:q4_k_m")
    parser.add_argument("--corpora", default="spam,intent,zh,injection")
    parser.add_argument("--test", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--out", default="benchmarks/results/deciders/lora")
    args = parser.parse_args()
    results = []
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tiankong-bench-lora-") as tmp:
        for name in args.corpora.split(","):
            results.append(run_corpus(name, args, Path(tmp)))
            Path(f"{out}.json").write_text(json.dumps({"model": args.model, "args": vars(args), "results": results},
                                                      indent=1), encoding="utf-8")
            report = table(results, args.model)
            Path(f"{out}.txt").write_text(f"$ {' '.join(sys.argv)}\n{report}\n", encoding="utf-8")
    print(report)


if __name__ == "__main__":
    main()
