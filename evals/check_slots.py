"""Does batching change the numbers? The same prompt alone and batched with three others on one 4-slot engine
(prompt cache off), comparing the generated text and every token's log-probability.

    .venv/bin/python evals/check_slots.py [--model smollm2-135m-instruct:q4_1] [--threads 2]

llama.cpp's server documentation warns that logits are not guaranteed to be bit-for-bit identical for
different batch sizes, depending on the backend; this measures it for the local build. See docs/evals.md.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import httpx

from tiankong.engine import EngineConfig, EngineProcess
from tiankong.models import TEST_MODEL, model_path

PROMPTS = ["Write two sentences about the sea.", "List three fruits and their colours.",
           "Explain what a compiler does in one sentence.", "Describe a cat in two sentences."]


async def ask(client: httpx.AsyncClient, url: str, prompt: str) -> tuple[str, list[float]]:
    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": 40, "temperature": 0, "seed": 42,
            "logprobs": True, "top_logprobs": 1, "cache_prompt": False}
    answer: Any = (await client.post(url + "/v1/chat/completions", json=body, timeout=600)).json()
    choice = answer["choices"][0]
    return choice["message"]["content"], [token["logprob"] for token in choice["logprobs"]["content"]]


async def main(model: str, threads: int) -> None:
    engine = EngineProcess(EngineConfig(model=model_path(model), ctx=4096, slots=4, threads=threads,
                                        extra_args=["--no-cache-prompt"])).start()
    try:
        async with httpx.AsyncClient() as client:
            solo = [await ask(client, engine.url, PROMPTS[0]) for _ in range(2)]
            batched = [(await asyncio.gather(*(ask(client, engine.url, p) for p in PROMPTS)))[0] for _ in range(2)]
    finally:
        engine.stop()
    print(f"{model}: alone twice identical: {solo[0] == solo[1]}")
    for k, (text, logprobs) in enumerate(batched):
        delta = max((abs(a - b) for a, b in zip(logprobs, solo[0][1], strict=False)), default=0.0)
        print(f"batched with 3 others, run {k + 1}: same text {text == solo[0][0]}, same logprobs "
              f"{logprobs == solo[0][1]}, max |Δ logprob| {delta:.2e}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=TEST_MODEL)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    asyncio.run(main(args.model, args.threads))
