"""Validate ``tiankong plan``: predicted vs. measured resident memory of a real llama-server.

    .venv/bin/python benchmarks/plan_accuracy.py [--quick] [--json] [--models NAME,NAME] [--threads N]

For each installed model and each (ctx, slots, KV type, unified) configuration it starts llama-server
(``-lv 4`` so the log shows llama.cpp's own buffer sizes), measures VmRSS/Pss after load, fills one slot
to ~95% of its context through ``/completion`` (so the compute buffer and the attention mask are touched at
their largest; the KV cache is zeroed — hence resident — at load), sends one short request to every slot at
once, measures again and prints predicted total vs. measured VmRSS with the error. Target: within 10%.
The second table compares each component with the size llama.cpp logs. Every engine is stopped in a
``finally``.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from tiankong.engine import EngineBinary, EngineConfig, EngineProcess, locate_engine
from tiankong.models import DEFAULT_MODEL, TEST_MODEL, resolve_installed
from tiankong.plan import MemoryPlan, PlanConfig, load_spec, plan_memory

MiB = 2**20
#: (ctx, slots, kv_type, kv_unified, ubatch) per model. Per-slot contexts stay at 1024 so that filling them
#: takes seconds, not minutes, on 2 busy cores (the KV cache is resident at load whatever the fill).
#: --quick runs three smaller points.
CONFIGS: list[tuple[int, int, str, bool, int]] = [
    (1024, 1, "f16", False, 512), (8192, 8, "q8_0", False, 512), (16384, 16, "q4_0", False, 512),
    (1024, 2, "f16", True, 512),
]
QUICK_CONFIGS: list[tuple[int, int, str, bool, int]] = [
    (512, 1, "f16", False, 512), (4096, 16, "q8_0", False, 512), (1536, 3, "q4_0", False, 256),
]
_BUFFER = re.compile(r"(\w+)\s+(model|output|KV|compute) buffer size =\s+([\d.]+) MiB")


@dataclass
class Sample:
    model: str
    ctx: int
    slots: int
    kv_type: str
    unified: bool
    ubatch: int
    predicted: int
    load_rss: int
    fill_rss: int
    fill_pss: int
    hwm: int
    fill_tokens: int
    fill_s: float
    logged: dict[str, float]
    components: dict[str, int]

    @property
    def error(self) -> float:
        return (self.predicted - self.fill_rss) / self.fill_rss


def proc_memory(pid: int) -> dict[str, int]:
    """VmRSS, VmHWM, RssAnon, RssFile from /proc/PID/status and Pss from smaps_rollup, in bytes."""
    values: dict[str, int] = {}
    for source in (f"/proc/{pid}/status", f"/proc/{pid}/smaps_rollup"):
        for line in Path(source).read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "Pss") and rest.strip().endswith("kB"):
                values[key] = int(rest.split()[0]) * 1024
    return values


def logged_buffers(log: str) -> dict[str, float]:
    sizes: dict[str, float] = {}
    for match in _BUFFER.finditer(log):
        kind = "repack" if match.group(1) == "CPU_REPACK" else match.group(2).lower()
        sizes[kind] = sizes.get(kind, 0.0) + float(match.group(3)) * MiB
    return sizes


def fill_slot(url: str, tokens: int, timeout_s: float) -> float:
    """Process a ``tokens``-long prompt (token ids, no tokenizer ambiguity) and generate one token."""
    prompt = [100 + (i * 7919) % 20000 for i in range(tokens)]
    started = time.monotonic()
    body = {"prompt": prompt, "n_predict": 1, "cache_prompt": False, "temperature": 0}
    response = httpx.post(f"{url}/completion", json=body, timeout=timeout_s)
    response.raise_for_status()
    return time.monotonic() - started


def touch_slots(url: str, slots: int, timeout_s: float) -> None:
    """A short request on every slot at once, so each slot's sampler and buffers are in use too."""
    def one(slot: int) -> None:
        body = {"prompt": [100 + (i * 31) % 5000 for i in range(16)], "n_predict": 4, "id_slot": slot,
                "cache_prompt": False, "temperature": 0}
        httpx.post(f"{url}/completion", json=body, timeout=timeout_s).raise_for_status()

    with ThreadPoolExecutor(max_workers=slots) as pool:
        list(pool.map(one, range(slots)))


def measure(name: str, config: PlanConfig, plan: MemoryPlan, binary: EngineBinary, threads: int) -> Sample:
    extra = ["-lv", "4"] + (["--kv-unified"] if config.kv_unified else [])
    engine_config = EngineConfig(model=resolve_installed(name).path, ctx=config.ctx, slots=config.slots,
                                 kv_type=config.kv_type, threads=threads, ubatch=config.ubatch, extra_args=extra)
    engine = EngineProcess(engine_config, binary, startup_timeout_s=300)
    try:
        engine.start()
        assert engine.pid is not None
        time.sleep(0.5)
        loaded = proc_memory(engine.pid)
        usable = min(plan.ctx_per_slot, plan.model.context_length or plan.ctx_per_slot)
        tokens = int(usable * 0.95)
        fill_s = fill_slot(engine.url, tokens, timeout_s=600)
        touch_slots(engine.url, config.slots, timeout_s=300)
        filled = proc_memory(engine.pid)
        log = engine.log_path.read_text(errors="replace") if engine.log_path else ""
    finally:
        engine.stop()
    return Sample(
        model=name, ctx=config.ctx, slots=config.slots, kv_type=config.kv_type, unified=config.kv_unified,
        ubatch=config.n_ubatch, predicted=plan.total_bytes, load_rss=loaded["VmRSS"], fill_rss=filled["VmRSS"],
        fill_pss=filled["Pss"], hwm=filled["VmHWM"], fill_tokens=tokens, fill_s=fill_s, logged=logged_buffers(log),
        components={"weights": plan.target.weights_bytes, "repack": plan.target.repack_bytes,
                    "kv": plan.target.kv_bytes, "compute": plan.target.compute_bytes,
                    "output": plan.target.output_bytes, "overhead": plan.overhead_bytes},
    )


def print_tables(samples: list[Sample]) -> None:
    print(f"{'model':<36} {'ctx':>6} {'np':>3} {'kv':>5} {'uni':>3} {'ub':>4} {'predicted':>10} {'load RSS':>9} "
          f"{'fill RSS':>9} {'fill Pss':>9} {'error':>7}")
    for s in samples:
        print(f"{s.model:<36} {s.ctx:>6} {s.slots:>3} {s.kv_type:>5} {'yes' if s.unified else 'no':>3} {s.ubatch:>4} "
              f"{s.predicted / MiB:>6.1f} MiB {s.load_rss / MiB:>5.1f} MiB {s.fill_rss / MiB:>5.1f} MiB "
              f"{s.fill_pss / MiB:>5.1f} MiB {s.error:>+7.1%}")
    worst = max(abs(s.error) for s in samples)
    print(f"worst error {worst:.1%} ({'within' if worst <= 0.10 else 'OUTSIDE'} the 10% target)\n")
    print("components, predicted / llama.cpp log (MiB); residual = fill RSS - logged buffers:")
    for s in samples:
        c, lg = s.components, s.logged
        logged_total = sum(lg.values())
        print(f"  {s.model[:24]:<24} {s.ctx:>6}/{s.slots} {s.kv_type:<5} weights {c['weights'] / MiB:.1f}/"
              f"{lg.get('model', 0) / MiB:.1f} repack {c['repack'] / MiB:.1f}/{lg.get('repack', 0) / MiB:.1f} "
              f"kv {c['kv'] / MiB:.1f}/{lg.get('kv', 0) / MiB:.1f} compute {c['compute'] / MiB:.2f}/"
              f"{lg.get('compute', 0) / MiB:.2f} output {c['output'] / MiB:.2f}/{lg.get('output', 0) / MiB:.2f} "
              f"overhead {c['overhead'] / MiB:.1f} residual {(s.fill_rss - logged_total) / MiB:.1f}"
              f" (fill {s.fill_tokens} tok in {s.fill_s:.0f} s)")


def configs(quick: bool) -> list[PlanConfig]:
    return [PlanConfig(ctx=ctx, slots=slots, kv_type=kv, kv_unified=unified, ubatch=ubatch)
            for ctx, slots, kv, unified, ubatch in (QUICK_CONFIGS if quick else CONFIGS)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="3 smaller (held-out) configurations per model")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--models", default=f"{TEST_MODEL},{DEFAULT_MODEL}")
    parser.add_argument("--threads", type=int, default=None, help="llama-server -t (default: all usable CPUs)")
    args = parser.parse_args()
    binary = locate_engine()
    threads = args.threads or EngineConfig(model=Path("x")).threads
    samples: list[Sample] = []
    started = time.monotonic()
    for name in args.models.split(","):
        spec = load_spec(name)
        for config in configs(args.quick):
            samples.append(measure(name, config, plan_memory(spec, config), binary, threads))
    if args.json:
        rows: list[dict[str, Any]] = [{**asdict(s), "error": s.error} for s in samples]
        print(json.dumps({"engine": f"{binary.version} ({binary.commit})", "samples": rows}, indent=2))
        return
    print(f"engine {binary.version} ({binary.commit}), {threads} threads, {time.monotonic() - started:.0f} s\n")
    print_tables(samples)


if __name__ == "__main__":
    main()
