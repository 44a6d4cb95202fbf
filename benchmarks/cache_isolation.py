"""What cross-key prompt-cache isolation costs and what it closes (issue 46, docs/security.md): two keyed
gateways (keys A and B) in front of one engine, side by side in one run — the default (isolated: two keys, so
``cache_prompt`` is off for every call that does not continue its own pinned slot) and ``share_prompt_cache =
true``.

Per ACLSum paper (public, ≥ 1,000 characters of abstract + introduction), key A holds a three-turn chat about it
(each turn sends the whole history, as chat clients do); right after A's first turn key B sends a guess — the
first half of A's message — and the figure is what B's answer says was cached (and how fast it came). The
gateways take turns paper by paper (the sharing one first, so it never reuses what the other read), so machine
load falls on both alike.

    .venv/bin/python benchmarks/cache_isolation.py --papers 10 \
        --out benchmarks/results/tenant-isolation-2026-12-04/cache-isolation.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).parent))
import datasets  # noqa: E402
import inproc_gateway  # noqa: E402

from tiankong.config import BatchesSettings  # noqa: E402
from tiankong.engine import EngineConfig, EngineProcess, locate_engine  # noqa: E402
from tiankong.gateway import GatewayState  # noqa: E402
from tiankong.gateway.keys import ApiKey, hash_key  # noqa: E402
from tiankong.models import TEST_MODEL, model_path  # noqa: E402

KEY_A, KEY_B = "bench-key-a-0123456789", "bench-key-b-0123456789"
FOLLOW_UPS = ["Which method does it propose? One sentence.", "On which data is it evaluated? One sentence."]


def post(url: str, key: str, messages: list[dict[str, str]], max_tokens: int) -> tuple[dict[str, Any], float]:
    start = time.perf_counter()
    answer = httpx.post(f"{url}/v1/chat/completions", headers={"Authorization": f"Bearer {key}"}, timeout=600,
                        json={"messages": messages, "max_tokens": max_tokens, "temperature": 0})
    answer.raise_for_status()
    return answer.json(), time.perf_counter() - start


def cached(answer: dict[str, Any]) -> int:
    return int((answer.get("usage", {}).get("prompt_tokens_details") or {}).get("cached_tokens", 0))


def conversation(url: str, text: str) -> dict[str, Any]:
    first = f"Here is a paper.\n\n{text}\n\nSummarise it in one sentence."
    messages = [{"role": "user", "content": first}]
    turns: list[dict[str, Any]] = []
    guess: dict[str, Any] = {}
    for index in range(1 + len(FOLLOW_UPS)):
        answer, seconds = post(url, KEY_A, messages, 24)
        timings = answer.get("timings", {})
        turns.append({"seconds": round(seconds, 3), "prompt_tokens": answer["usage"]["prompt_tokens"],
                      "evaluated": timings.get("prompt_n"), "cached": cached(answer)})
        if index == 0:
            probe, probe_s = post(url, KEY_B, [{"role": "user", "content": first[:len(first) // 2]}], 1)
            guess = {"prompt_tokens": probe["usage"]["prompt_tokens"], "cached": cached(probe),
                     "seconds": round(probe_s, 3)}
        if index < len(FOLLOW_UPS):
            messages += [{"role": "assistant", "content": answer["choices"][0]["message"]["content"]},
                         {"role": "user", "content": FOLLOW_UPS[index]}]
    return {"turns": turns, "guess": guess}


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    later = [t for r in runs for t in r["turns"][1:]]
    return {
        "first_turn_s_median": statistics.median(r["turns"][0]["seconds"] for r in runs),
        "follow_up_s_median": statistics.median(t["seconds"] for t in later),
        "follow_up_evaluated_share": round(sum(t["evaluated"] or 0 for t in later)
                                           / sum(t["prompt_tokens"] for t in later), 3),
        "guess_cached_tokens_max": max(r["guess"]["cached"] for r in runs),
        "guess_cached_share_mean": round(statistics.mean(r["guess"]["cached"] / r["guess"]["prompt_tokens"]
                                                         for r in runs), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=TEST_MODEL)
    parser.add_argument("--papers", type=int, default=10)
    parser.add_argument("--out", default="benchmarks/results/tenant-isolation-2026-12-04/cache-isolation.json")
    args = parser.parse_args()
    texts = [" ".join(d["sentences"][:12]) for d in datasets.aclsum_documents("test", limit=60)]
    texts = [t[:2400] for t in texts if len(t) >= 1000][:args.papers]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    engine = EngineProcess(EngineConfig(model=model_path(args.model), ctx=8192, slots=2, alias=args.model),
                           locate_engine())
    engine.start()
    served = {}
    try:
        keys = [ApiKey(hash_key(KEY_A), "a"), ApiKey(hash_key(KEY_B), "b")]
        # the sharing gateway reads each paper first, so its first turn cannot reuse what the isolated one read
        for name, share in (("shared (share_prompt_cache = true)", True), ("isolated (default)", None)):
            state = GatewayState.for_engine(engine, args.model, api_keys=keys, share_prompt_cache=share,
                                            batches=BatchesSettings(dir=str(out.parent / f"batches-{len(served)}")))
            served[name] = inproc_gateway.serve(state)
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in served}
        for number, text in enumerate(texts):
            for name, (_, _, url) in served.items():  # side by side: each paper on each gateway in turn
                runs[name].append(conversation(url, text))
                print(f"paper {number + 1}/{len(texts)} {name}: {runs[name][-1]}", flush=True)
    finally:
        for item in served.values():
            inproc_gateway.stop(item)
        engine.stop()
    result = {"args": vars(args), "chars": [len(t) for t in texts],
              "summary": {name: summary(r) for name, r in runs.items()}, "runs": runs}
    out.write_text(json.dumps(result, indent=2), encoding="utf-8")
    for name, figures in result["summary"].items():
        print(f"{name}: {figures}")
    shared, iso = (result["summary"][n]["follow_up_s_median"] for n in runs)
    print(f"follow-up turn latency, isolated / shared: {iso / shared:.2f}x")


if __name__ == "__main__":
    main()
