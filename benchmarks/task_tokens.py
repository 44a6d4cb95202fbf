"""Tokens per item for every task: what each registered task sends the engine for one item (issue 22's prompt
budget: a prompt that grows shows here).

Every task in ``tiankong.tasks.SPECS`` runs once on the same customer e-mail (each item on a fresh slot state:
the text carries the task's name, so no task reads another's prompt cache) through a request function that
counts, for every engine call: prompt tokens sent, prompt tokens the engine evaluated (``timings.prompt_n``;
the rest came from its cache) and tokens generated. Printed per task, with the calls it made.

    .venv/bin/python benchmarks/task_tokens.py [--model NAME] [--out benchmarks/results/tasks/task-tokens.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from tiankong import Client
from tiankong.engine import EngineConfig, EngineProcess
from tiankong.models import DEFAULT_MODEL, model_path
from tiankong.structured.drivers import run_sync
from tiankong.tasks import SPECS

EMAIL = ("Hello support, this is Maria Gomez from Lyon. I was charged twice for my March subscription (invoice "
         "4471) and the second charge of 19.90 EUR still shows on my card. I already wrote last week and nobody "
         "answered. Please refund the duplicate charge and confirm by e-mail to maria.gomez@example.org.")
ARGS: dict[str, dict[str, Any]] = {
    "classify": {"labels": ["billing", "bug", "account", "other"]},
    "route": {"routes": [{"name": "billing", "description": "payments, invoices, refunds", "target": "task:billing"},
                         {"name": "support", "description": "bugs and how-to questions", "target": "task:support"}]},
    "rewrite": {"query": "refund a duplicate subscription charge"},
    "rerank": {"query": "refund a duplicate charge", "documents": [
        "How to request a refund for a double charge.", "Changing your password.", "Invoice numbering explained."]},
    "redact": {}, "guard": {"policies": ["asks for legal advice"], "use_model": True}, "compress": {},
    "summarize": {"words": 30}, "tag": {},
    "ask": {"questions": [{"id": "refund", "type": "yes_no", "question": "Is a refund requested?"},
                          {"id": "team", "type": "choice", "question": "Which team?", "labels": ["billing", "support"]},
                          {"id": "urgency", "type": "score", "question": "How urgent is it?"}]},
}


class Counter:
    def __init__(self, client: Client) -> None:
        self.client = client
        self.calls = self.sent = self.evaluated = self.generated = 0

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        answer = self.client._request(method, path, body)
        if path in ("/completion", "/v1/chat/completions", "/v1/completions") and isinstance(answer, dict):
            self.calls += 1
            usage = answer.get("usage") or {}
            timings = answer.get("timings") or {}
            self.sent += int(answer.get("tokens_evaluated") or usage.get("prompt_tokens") or 0)
            self.evaluated += int(timings.get("prompt_n") or 0)
            self.generated += int(answer.get("tokens_predicted") or usage.get("completion_tokens") or 0)
        return answer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--out", default="benchmarks/results/tasks/task-tokens.json")
    args = parser.parse_args()
    rows = []
    with EngineProcess(EngineConfig(model=model_path(args.model), ctx=8192, slots=2)) as engine, \
            Client(engine.url) as client:
        for name, spec in SPECS.items():
            counter = Counter(client)
            task_args = {spec.text: f"[{name}] {EMAIL}", **ARGS.get(name, {})}
            if spec.text != "text" and "text" in spec.args.model_fields:
                task_args["text"] = f"[{name}] {EMAIL}"
            run_sync(spec.flow(task_args, None), counter.request)
            rows.append({"task": name, "calls": counter.calls, "prompt_tokens": counter.sent,
                         "evaluated_tokens": counter.evaluated, "generated_tokens": counter.generated})
            print(f"{name:10} calls {counter.calls:3d}  prompt {counter.sent:5d}  evaluated {counter.evaluated:5d}  "
                  f"generated {counter.generated:4d}", flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"model": args.model, "text_chars": len(EMAIL), "rows": rows}, indent=1))
    lines = [f"{args.model}, one {len(EMAIL)}-character e-mail per task", f"{'task':10} {'calls':>5} {'prompt':>7} "
             f"{'evaluated':>9} {'generated':>9}"]
    lines += [f"{r['task']:10} {r['calls']:5d} {r['prompt_tokens']:7d} {r['evaluated_tokens']:9d} "
              f"{r['generated_tokens']:9d}" for r in rows]
    Path(args.out).with_suffix(".txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
