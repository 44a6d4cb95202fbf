"""How sure is the model that another call follows the first? A development probe for BFCL parallel calls.

    .venv/bin/python benchmarks/parallel_probe.py [--start 100] [--n 50] [--out FILE]

Development only: BFCL questions at positions ``--start`` … ``--start + --n`` of ``tool_calls.load``'s seeded
order (the held-out figures of docs/benchmarks.md use positions 0–99; these are never among them). For each
question the model's first call is written as the gateway writes it (``tool_template``: its own template, under the
grammar), closed, and then one forward pass gives P(another ``<tool_call>``) against P(the end of the turn) — the
decision a parallel answer turns on. Printed per category with the number of calls BFCL's answer holds.
``--categories`` may add ``irrelevance`` (BFCL's questions that no given function answers: only P(call) is read,
the decision ``auto`` turns on; its positions in a seeded order, as for the others).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path
from typing import Any

import httpx

from tiankong.engine import EngineConfig, EngineProcess, locate_engine
from tiankong.models import DEFAULT_MODEL, resolve_installed
from tiankong.structured.drivers import run_sync
from tiankong.structured.tool_template import (
    MORE_PROBS,
    OPENERS,
    first_step,
    goes_on,
    next_token_body,
    template_calls,
    template_prompt,
)
from tiankong.structured.tools import Tool

sys.path.insert(0, str(Path(__file__).parent))
from tool_calls import bfcl_dir, load, to_tools  # noqa: E402


def irrelevant(category: str, n: int, seed: int = 7) -> list[dict[str, Any]]:
    """BFCL's irrelevance questions (no answer file: the right answer is no call), in a seeded order."""
    path = bfcl_dir() / "bfcl_eval" / "data" / "BFCL_v4_irrelevance.json"
    rows = [{**json.loads(line), "category": category, "ground_truth": []}
            for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    random.Random(seed).shuffle(rows)
    return rows[:n]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--start", type=int, default=100)
    parser.add_argument("--n", type=int, default=50)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--categories", default="parallel,simple,multiple",
                        help="comma-separated: parallel, simple, multiple, irrelevance")
    args = parser.parse_args()
    categories = args.categories.split(",")
    record = resolve_installed(DEFAULT_MODEL)
    engine = EngineProcess(EngineConfig(model=record.path, ctx=8192, slots=1), locate_engine())
    engine.start()
    rows_out: list[dict[str, Any]] = []
    try:
        http = httpx.Client(timeout=600)

        def request(method: str, path: str, body: dict[str, Any] | None) -> Any:
            return http.request(method, engine.url + path, json=body).json()

        def probs(text: str) -> tuple[dict[str, Any], list[tuple[str, float]]]:
            answer = request("POST", "/completion", next_token_body(text, MORE_PROBS, seed=42))
            top = answer["completion_probabilities"][0]["top_probs"]
            return answer, [(str(t["token"]), float(t["prob"])) for t in top]

        for category in categories:
            rows = (irrelevant if category == "irrelevance" else load)(category, args.start + args.n)[args.start:]
            for row in rows:
                tools = [Tool(t["function"]["name"], t["function"].get("description", ""), t["function"]["parameters"])
                         for t in to_tools(row["function"])]
                messages = row["question"][0]
                prompt = run_sync(template_prompt(messages, tools), request)
                if prompt is None:
                    continue
                p_call, opener = run_sync(first_step(prompt), request)
                if category == "irrelevance":
                    item = {"category": category, "id": row["id"], "gold_calls": 0, "p_call": round(p_call, 4)}
                    rows_out.append(item)
                    print(json.dumps(item, ensure_ascii=False), flush=True)
                    continue
                calls, written, _, _, errors = run_sync(template_calls(
                    prompt, tools, opener, parallel=False, max_tokens=None, options={"temperature": 0}), request)
                opener_text, closer_text = OPENERS[opener]
                text = written[len(opener_text):-len(closer_text)] if written.endswith(closer_text) else ""
                # (a) right after the call's closer: the end of the turn, or anything else (another call, words)
                _, after = probs(prompt + written)
                end = sum(p for token, p in after if token in ("", "<|im_end|>", "<|endoftext|>"))
                # (b) the calls written as one JSON list: after the first element, "," / "{" (another) or "]" (the
                # end) — the gateway's own reading (tool_template.goes_on)
                answer, listed = probs(prompt + opener_text + "[" + text)
                item = {"category": category, "id": row["id"], "gold_calls": len(row["ground_truth"]),
                        "p_call": round(p_call, 4), "opener": opener, "calls": len(calls), "errors": bool(errors),
                        "p_go_on": round(1 - end, 4), "p_list_more": round(goes_on(answer), 4),
                        "after": [(t, round(p, 4)) for t, p in after[:4]],
                        "listed": [(t, round(p, 4)) for t, p in listed[:4]]}
                rows_out.append(item)
                print(json.dumps(item, ensure_ascii=False), flush=True)
    finally:
        engine.stop()
    for key in ("p_call", "p_go_on", "p_list_more"):
        for category in categories:
            ps = [r[key] for r in rows_out if r["category"] == category and r.get(key) is not None]
            if len(ps) > 1:
                print(f"{key} {category}: n={len(ps)} median {statistics.median(ps):.4f} deciles "
                      + " ".join(f"{q:.4f}" for q in statistics.quantiles(ps, n=10)))
    if args.out:
        args.out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows_out))


if __name__ == "__main__":
    main()
