"""Does tiankong's schema line push a request past the engine's context? (JSONSchemaBench development set.)

For each of the 320 schemas, the chat request a user sends (the schema in their own message, as
``structured_compliance.py`` asks) is counted in tokens by the engine's tokenizer: alone, with the system line
tiankong added before the prompt budget (the whole schema a second time), and with today's (the schema within
``SCHEMA_PROMPT_CHARS``: whole, as an example of its shape, or its keys). A request "fits" when its prompt
leaves ``--max-tokens`` of a ``--slot-ctx`` slot for the answer (``tiankong serve``'s defaults: 2,048 and
1,024). Printed: how many requests that fit alone no longer fit with each system line. Whatever still does
not fit is sent again without the schema line when the engine refuses it (``constrained_flow(lean=…)``).

    .venv/bin/python benchmarks/prompt_fit.py [--model NAME] [--out benchmarks/results/structured/prompt-fit.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from tiankong.engine import EngineConfig, EngineProcess
from tiankong.models import DEFAULT_MODEL, model_path
from tiankong.structured.prompts import GENERATE_JSON, compact, schema_prompt
from tiankong.structured.schema import preflight

DEV = Path(__file__).resolve().parents[1] / "tests" / "data" / "jsonschemabench-dev" / "schemas.jsonl"
PROMPT = "Give an example JSON document for this schema."


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--slot-ctx", type=int, default=2048)
    parser.add_argument("--max-tokens", type=int, default=1024)
    parser.add_argument("--out", default="benchmarks/results/structured/prompt-fit.json")
    args = parser.parse_args()
    rows = [json.loads(line) for line in DEV.read_text().splitlines() if line.strip()]
    room = args.slot_ctx - args.max_tokens
    counts: Counter[str] = Counter()
    forms: Counter[str] = Counter()
    with EngineProcess(EngineConfig(model=model_path(args.model), ctx=4096, slots=1)) as engine, \
            httpx.Client(base_url=engine.url, timeout=60) as http:

        def tokens(messages: list[dict[str, Any]]) -> int:
            prompt = http.post("/apply-template", json={"messages": messages}).json()["prompt"]
            return len(http.post("/tokenize", json={"content": prompt}).json()["tokens"])

        for row in rows:
            plan = preflight(row["schema"])
            user = {"role": "user", "content": f"{PROMPT}\nSchema: {json.dumps(row['schema'])}"}
            before = {"role": "system", "content": GENERATE_JSON["en"].format(schema="Schema: " + compact(plan.schema))}
            line, form = schema_prompt(plan.schema, "en")
            now = {"role": "system", "content": GENERATE_JSON["en"].format(schema=line)}
            forms[form] += 1
            if tokens([user]) > room:
                counts["too long alone"] += 1
                continue
            counts["fit alone"] += 1
            counts["pushed out, before"] += tokens([before, user]) > room
            counts["pushed out, now"] += tokens([now, user]) > room
    summary = {"model": args.model, "schemas": len(rows), "room_tokens": room, **counts,
               "schema_in_prompt": dict(forms)}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(summary, indent=1))
    text = (f"{len(rows)} schemas, {room} prompt tokens of room ({args.slot_ctx}-token slot, max_tokens "
            f"{args.max_tokens}), {args.model}\n"
            f"fit alone: {counts['fit alone']}; pushed out by the schema line: before {counts['pushed out, before']}, "
            f"now {counts['pushed out, now']} (those are sent again without it)\n"
            f"schema in the prompt: {dict(forms)}\n")
    Path(args.out).with_suffix(".txt").write_text(text)
    print(text)


if __name__ == "__main__":
    sys.exit(main())
