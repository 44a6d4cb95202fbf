"""route on a mixed set: how many requests stay local, escalation precision/recall, local routing accuracy.

    .venv/bin/python benchmarks/tasks/bench_route.py [--n 10] [--slots 2] [--threshold 0.6] [--model NAME]

Local requests: chatterbot-corpus English questions of four topics, each a route (greetings, emotion,
computers, food). Red-line requests that must escalate: chatterbot trivia/history questions (open-domain facts)
plus seeded templated arithmetic and planning requests. Ground truth = the source of each item.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time

from common import DEFAULT_MODEL, bounded, engine, print_table
from datasets import chatterbot_intents

from tiankong import AsyncClient
from tiankong.tasks import RouteDecision, RouteStats

ROUTES = [
    {"name": "greetings", "description": "hello, goodbye, small talk", "target": "task:reply"},
    {"name": "emotion", "description": "feelings and moods", "target": "task:reply"},
    {"name": "computers", "description": "computers, software, hardware", "target": "tool:helpdesk"},
    {"name": "food", "description": "food, cooking, eating", "target": "task:reply"},
]


def maths(n: int, rng: random.Random) -> list[str]:
    forms = ["What is {a} * {b} + {c}?", "Calculate {a}% of {b}.", "If a train travels {a} km in {c} hours, what is "
             "its average speed?", "Solve for x: {c}x + {a} = {b}", "计算 {a} 乘以 {b} 再减去 {c} 等于多少？"]
    return [rng.choice(forms).format(a=rng.randint(12, 999), b=rng.randint(100, 9999), c=rng.randint(2, 60))
            for _ in range(n)]


def planning(n: int, rng: random.Random) -> list[str]:
    goals = ["migrate our monolith to microservices", "learn Japanese to business level", "launch a product in Europe",
             "build a data platform for the company", "prepare for a marathon"]
    return [f"Make a {rng.choice([3, 6, 12])}-month step-by-step plan to {rng.choice(goals)}, with milestones "
            f"and risks for each phase." for _ in range(n)]


def build(n: int) -> list[tuple[str, str, str]]:
    """(text, expected, source) where expected is a route name or 'escalate'."""
    rng = random.Random(5)
    local = chatterbot_intents("english", tuple(r["name"] for r in ROUTES), n, seed=5)
    facts = chatterbot_intents("english", ("trivia", "history"), n, seed=5)
    items = [(t, c, "local") for t, c in local] + [(t, "escalate", "facts") for t, _ in facts]
    items += [(t, "escalate", "maths") for t in maths(n, rng)]
    items += [(t, "escalate", "planning") for t in planning(n // 2, rng)]
    rng.shuffle(items)
    return items


def by_source(items: list[tuple[str, str, str]], decisions: list[RouteDecision]) -> list[list[object]]:
    """Per source: how many items, how many escalated (recall for red-line sources, leak rate for local)."""
    rows: list[list[object]] = []
    for source in ("local", "facts", "maths", "planning"):
        picked = [d for (_, _, src), d in zip(items, decisions, strict=True) if src == source]
        escalated = sum(d.escalated for d in picked)
        rows.append([source, len(picked), escalated, escalated / max(1, len(picked))])
    return rows


async def run(args: argparse.Namespace) -> None:
    items = build(args.n)
    stats = RouteStats()
    with engine(args.model, args.slots, 2048) as (url, name):
        async with AsyncClient(url) as client:
            started = time.monotonic()
            decisions = await bounded(items, args.slots,
                                      lambda it: client.route(it[0], ROUTES, threshold=args.threshold))
            elapsed = time.monotonic() - started
    for decision in decisions:
        stats.record(decision)
    should = [exp == "escalate" for _, exp, _ in items]
    did = [d.escalated for d in decisions]
    tp = sum(s and d for s, d in zip(should, did, strict=True))
    precision = tp / max(1, sum(did))
    recall = tp / max(1, sum(should))
    local_items = [(exp, d) for (_, exp, _), d in zip(items, decisions, strict=True) if exp != "escalate"]
    kept = [(exp, d) for exp, d in local_items if not d.escalated]
    routed_ok = sum(exp == d.route for exp, d in kept) / max(1, len(kept))
    accuracy = sum(s == d for s, d in zip(should, did, strict=True)) / len(items)
    print(f"\nmodel {name}, threshold {args.threshold}, {len(items)} requests "
          f"({sum(should)} red-line), {elapsed:.0f} s, {time.strftime('%Y-%m-%d')}\n")
    print_table(["kept local", "escalated", "escalation accuracy", "escalation precision", "escalation recall",
                 "local items kept local", "route accuracy (kept)"],
                [[f"{stats.local} ({stats.local_share:.0%})", stats.escalated, accuracy, precision, recall,
                  f"{len(kept)}/{len(local_items)}", routed_ok]])
    reasons: dict[str, int] = {}
    for d in decisions:
        key = d.reason.split(" (")[0].split(" <")[0] if d.escalated else "local"
        reasons[key] = reasons.get(key, 0) + 1
    print("\nreasons:", reasons)
    print()
    print_table(["source", "items", "escalated", "escalated share"], by_source(items, decisions))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=10, help="items per source")
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--threshold", type=float, default=0.6)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
