"""Draft then replace (issue 43): the draft's first token vs the quality model's, the final answer's time vs the
quality model alone, and whether the final answer is identical, on ~1,000-token prompts.

Two engines (the draft and the quality model, one slot each) behind one in-process gateway with ``[cascade]``.
Every prompt is a distinct ~1,000-token slice of the project's docs with a short question, sent twice, streamed:
once without the draft option (the quality model alone: its TTFT and end time) and once with
``"tiankong": {"draft": true}`` (the draft's TTFT, the quality model's TTFT after the replace, the end time).
``cache_prompt`` is off so neither run reads the other's prompt from the engine's cache. Raw per-prompt rows and
a summary go to ``benchmarks/results/draft/``.

Targets: draft TTFT <= 0.3x quality TTFT; final answer identical at temperature 0; final time <= 1.25x
quality-only.

    nice .venv/bin/python benchmarks/draft_replace.py [--prompts 6] [--max-tokens 48]
        [--draft smollm2-135m-instruct:q4_1] [--quality qwen2.5-coder-0.5b-instruct:q4_k_m] [--threads 2]
        [--quality-starts draft_token|draft_end]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).parent))

from inproc_gateway import serve, stop  # noqa: E402

from tiankong.config import CascadeSettings  # noqa: E402
from tiankong.engine import EngineConfig, EngineProcess, locate_engine  # noqa: E402
from tiankong.engine.pool import EnginePool, PoolEntry, Replica  # noqa: E402
from tiankong.gateway import GatewayState  # noqa: E402
from tiankong.models import DEFAULT_MODEL, TEST_MODEL, model_path  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results" / "draft"
QUESTION = "\n\nIn two sentences: what does the text above describe?"


def prompts(count: int, chars: int = 4000) -> list[str]:
    """Distinct ~1,000-token slices (about 4 characters a token) of the docs, each with the question."""
    text = "\n".join(p.read_text(encoding="utf-8") for p in sorted((ROOT / "docs").glob("*.md")))
    step = max(chars, (len(text) - chars) // max(count, 1))
    return [text[i * step:i * step + chars] + QUESTION for i in range(count)]


def timed_stream(url: str, body: dict[str, Any]) -> dict[str, Any]:
    """One streamed chat: time to the first draft / quality content, end time, the final (quality) text."""
    started = time.perf_counter()
    phase = "draft" if body.get("tiankong") else "quality"
    first: dict[str, float] = {}
    texts: dict[str, list[str]] = {"draft": [], "quality": []}
    usage: dict[str, Any] = {}
    event = ""
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=900) as answer:
        answer.raise_for_status()
        for line in answer.iter_lines():
            if line.startswith("event: "):
                event = line[7:]
                continue
            if not line.startswith("data: {"):
                continue
            data = json.loads(line[6:])
            if event == "replace":
                phase = "quality"
            elif event == "final":
                phase = "final"
            event = ""
            for choice in data.get("choices") or []:
                piece = (choice.get("delta") or {}).get("content") or ""
                if piece and phase in texts:
                    first.setdefault(phase, time.perf_counter() - started)
                    texts[phase].append(piece)
            if isinstance(data.get("usage"), dict):
                usage = data["usage"]
    return {"draft_ttft_s": first.get("draft"), "quality_ttft_s": first.get("quality"),
            "end_s": time.perf_counter() - started, "text": "".join(texts["quality"]),
            "draft_text": "".join(texts["draft"]), "prompt_tokens": usage.get("prompt_tokens"),
            "final": phase}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=6)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--draft", default=TEST_MODEL)
    parser.add_argument("--quality", default=DEFAULT_MODEL)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quality-starts", choices=["draft_token", "draft_end"], default="draft_token",
                        help="[cascade] quality_starts: at the draft's first token or at its end")
    args = parser.parse_args()
    binary = locate_engine()

    def engine(model: str, alias: str) -> EngineProcess:
        return EngineProcess(EngineConfig(model=model_path(model), ctx=2048, slots=1, threads=args.threads,
                                          alias=alias), binary)

    draft, quality = engine(args.draft, "draft"), engine(args.quality, "quality")
    rows: list[dict[str, Any]] = []
    OUT.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y-%m-%d-%H%M")
    raw = OUT / f"{stamp}.jsonl"  # a row per prompt as it is measured (a run cut short keeps its rows)
    load_before = os.getloadavg()
    try:
        draft.start()
        quality.start()
        pool = EnginePool([PoolEntry("draft", [Replica("draft#0", draft)], on_demand=False),
                           PoolEntry("quality", [Replica("quality#0", quality)], on_demand=False)])
        state = GatewayState(model_name="quality", pool=pool,
                             cascade=CascadeSettings(draft_model="draft", quality_model="quality",
                                                     quality_starts=args.quality_starts),
                             request_timeout_s=900)
        served = serve(state)
        url = served[2]
        try:
            warm = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "temperature": 0}
            timed_stream(url, {**warm, "stream": True, "tiankong": {"draft": True}})  # engines' first batch
            for index, prompt in enumerate(prompts(args.prompts)):
                body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": args.max_tokens,
                        "temperature": 0, "stream": True, "stream_options": {"include_usage": True},
                        "cache_prompt": False}
                alone = timed_stream(url, body)
                both = timed_stream(url, {**body, "tiankong": {"draft": True}})
                row = {"prompt": index, "prompt_tokens": alone["prompt_tokens"],
                       "quality_only_ttft_s": alone["quality_ttft_s"], "quality_only_end_s": alone["end_s"],
                       "draft_ttft_s": both["draft_ttft_s"], "quality_ttft_s": both["quality_ttft_s"],
                       "end_s": both["end_s"], "identical": both["text"] == alone["text"],
                       "final": both["final"], "draft_chars": len(both["draft_text"]),
                       "answer": alone["text"], "draft": both["draft_text"]}
                row["load_avg_1m"] = os.getloadavg()[0]
                rows.append(row)
                with raw.open("a", encoding="utf-8") as out:
                    out.write(json.dumps(row) + "\n")
                print(json.dumps({k: v for k, v in row.items() if k not in ("answer", "draft")}), flush=True)
        finally:
            stop(served)
    finally:
        draft.stop()
        quality.stop()

    def median(key: str) -> float:
        return statistics.median(r[key] for r in rows if r[key] is not None)

    summary = {
        "prompts": len(rows), "max_tokens": args.max_tokens, "threads": args.threads,
        "quality_starts": args.quality_starts, "draft": args.draft, "quality": args.quality,
        "median_prompt_tokens": median("prompt_tokens"),
        "median_draft_ttft_s": median("draft_ttft_s"), "median_quality_only_ttft_s": median("quality_only_ttft_s"),
        "median_cascade_quality_ttft_s": median("quality_ttft_s"),
        "median_end_s": median("end_s"), "median_quality_only_end_s": median("quality_only_end_s"),
        "draft_ttft_ratio": median("draft_ttft_s") / median("quality_only_ttft_s"),
        "final_time_ratio": statistics.median(r["end_s"] / r["quality_only_end_s"] for r in rows),
        "identical": sum(r["identical"] for r in rows),
        "load_avg_1m_before": load_before[0], "load_avg_1m_after": os.getloadavg()[0],
    }
    summary["targets"] = {"draft_ttft_ratio<=0.3": summary["draft_ttft_ratio"] <= 0.3,
                          "final_time_ratio<=1.25": summary["final_time_ratio"] <= 1.25,
                          "identical": summary["identical"] == len(rows)}
    (OUT / f"{stamp}-summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
