"""Where a fast-forwarded answer's time goes: llama-server's own timings of every engine call, beside raw.

One engine (default model, 4 slots, as ``extract_speed.py``), one item at a time: for ``--items`` log-event texts
(``extract_speed.py``'s generator), a fast-forwarded ``AsyncClient.extract_result`` and a raw llama-server
json_schema chat, each followed by the ``prompt eval`` / ``eval`` lines the engine logged for it (tokens and ms per
call). A warm-up item per path comes first and is not printed.

    .venv/bin/python benchmarks/ff_profile.py [--schema log_event] [--items 3] > ff-profile.txt
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import time
from pathlib import Path
from typing import Any

import httpx
from extract_speed import SCHEMAS, raw_one, text_for

from tiankong import AsyncClient
from tiankong.engine import EngineConfig, EngineProcess
from tiankong.models import DEFAULT_MODEL, model_path

TIMINGS = re.compile(r"prompt eval time =\s*([\d.]+) ms /\s*(\d+) tokens.*?\n.*?eval time =\s*([\d.]+) ms /\s*(\d+) "
                     r"(?:tokens|runs)")


def calls(log: Path, mark: int) -> list[str]:
    chunk = log.read_text(errors="replace")[mark:]
    line = "   prompt {} ms / {} tokens; decode {} ms / {} tokens"
    return [line.format(*m.groups()) for m in TIMINGS.finditer(chunk)]


async def profile(url: str, log: Path, schema_name: str, items: int) -> None:
    rng = random.Random(5)
    schema: dict[str, Any] = SCHEMAS[schema_name]
    async with AsyncClient(url, timeout_s=600) as client, httpx.AsyncClient(timeout=600) as http:
        await client.extract_result("warm-up: " + text_for(schema_name, rng, 99), schema)
        await raw_one(http, url, schema, "warm-up: " + text_for(schema_name, rng, 98))
        await asyncio.sleep(0.5)
        for i in range(items):
            mark = log.stat().st_size
            began = time.perf_counter()
            result = await client.extract_result(text_for(schema_name, rng, i), schema)
            took = time.perf_counter() - began
            await asyncio.sleep(0.5)  # the engine's log lines are written after the answer
            print(f"fast-forward {took * 1000:.0f} ms, path {result.path}, decoded {result.decoded_tokens}, "
                  f"forced {result.forced_tokens}", *calls(log, mark), sep="\n", flush=True)
            mark = log.stat().st_size
            began = time.perf_counter()
            await raw_one(http, url, schema, text_for(schema_name, rng, 50 + i))
            took = time.perf_counter() - began
            await asyncio.sleep(0.5)
            print(f"raw {took * 1000:.0f} ms", *calls(log, mark), sep="\n", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--schema", default="log_event", choices=sorted(SCHEMAS))
    parser.add_argument("--items", type=int, default=3)
    args = parser.parse_args()
    print(f"$ benchmarks/ff_profile.py --schema {args.schema} --items {args.items}  (model {DEFAULT_MODEL}, 4 slots)")
    with EngineProcess(EngineConfig(model=model_path(DEFAULT_MODEL), ctx=8192, slots=4)) as engine:
        asyncio.run(profile(engine.url, engine.log_path, args.schema, args.items))


if __name__ == "__main__":
    main()
