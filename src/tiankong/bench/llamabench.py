"""``llama-bench`` (from the same build as llama-server) as a second source for ``bench speed``.

llama-bench measures the engine without HTTP, sampling or the server loop: ``-p`` prompt-processing rows
and ``-n`` generation rows, ``-r`` repetitions each. Its rows sit next to llama-server's in the report, so
the difference is the cost of the server path.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

from ..engine.build import locate_engine
from ..errors import EngineError
from ..models import resolve_installed
from .common import SpeedRow, median


def llama_bench_rows(model: str, prompt_lengths: list[int], gen_tokens: int, threads: list[int], repeats: int,
                     llama_server: str | None = None, timeout_s: float = 1800.0) -> list[SpeedRow]:
    binary = locate_engine(llama_server).sibling("llama-bench")
    if binary is None:
        raise EngineError("llama-bench is not next to llama-server",
                          hint="run `tiankong engine install` (it builds llama-bench too) or drop --llama-bench")
    path = resolve_installed(model).path
    argv = [str(binary), "-m", str(path), "-p", ",".join(map(str, prompt_lengths)), "-n", str(gen_tokens),
            "-t", ",".join(map(str, threads)), "-r", str(repeats), "-o", "json"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise EngineError(f"llama-bench ran longer than {timeout_s:.0f} s",
                          hint="use fewer lengths or repeats") from None
    if done.returncode != 0:
        raise EngineError(f"llama-bench exited with {done.returncode}", log_tail=done.stderr[-4000:],
                          hint="rerun as `tiankong -v bench …` to see its output")
    try:
        results: list[dict[str, Any]] = json.loads(done.stdout)
    except ValueError:
        raise EngineError("llama-bench did not print JSON", log_tail=done.stdout[-2000:]) from None
    return [parse_row(item) for item in results]


def parse_row(item: dict[str, Any]) -> SpeedRow:
    """One llama-bench JSON record → a row (a ``-p`` test fills pp_*, a ``-n`` test tg_*)."""
    samples = [float(x) for x in item.get("samples_ts") or [item.get("avg_ts", 0.0)]]
    stats = {"runs": len(samples)}
    prompt, gen = int(item.get("n_prompt", 0)), int(item.get("n_gen", 0))
    key = "tg" if gen else "pp"
    values = {f"{key}_tok_s": median(samples), f"{key}_tok_s_min": min(samples), f"{key}_tok_s_max": max(samples)}
    return SpeedRow(source="llama-bench", threads=int(item.get("n_threads", 0)) or None, ctx=None,
                    prompt_tokens=prompt, gen_tokens=gen, **stats, **values)
