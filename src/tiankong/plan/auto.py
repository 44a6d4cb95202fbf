"""``auto_ctx``: the default context of a served engine, sized by the memory plan (issue 45).

A fixed default (it was 4,096 for 2 slots: 2,048 tokens per slot) refuses long prompts that a small model,
trained for 8k–32k, reads fine and that the machine has memory for. When ``engine.ctx`` is unset, each slot gets
the largest context — in steps of 256, at most ``PER_SLOT_CAP`` and at most the model's trained context — whose
whole-process plan (``plan_memory``: weights, KV cache, compute buffers, overhead) fits in ``MEMORY_SHARE`` of
the memory available now; never less than ``PER_SLOT_FLOOR``. The cap keeps start-up and the KV allocation of a
small machine modest: 8,192 per slot costs SmolLM2-135M about 0.2 GB of KV more than 2,048 (``tiankong plan``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .formula import CTX_PAD, PlanConfig
from .load import load_spec
from .memory import plan_memory

PER_SLOT_CAP = 8192
PER_SLOT_FLOOR = 2048
MEMORY_SHARE = 0.5  # of MemAvailable: the rest is the OS's, the gateway's and other engines'


@dataclass(frozen=True)
class AutoCtx:
    ctx: int  # total (llama-server -c): per_slot × slots
    per_slot: int
    planned_bytes: int
    available_bytes: int | None


def available_bytes() -> int | None:
    """``MemAvailable`` (Linux), else physical memory; None when neither can be read."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def auto_ctx(model: Path | str, slots: int, kv_type: str = "f16", available: int | None = None) -> AutoCtx:
    spec = load_spec(str(model))
    room = available if available is not None else available_bytes()
    cap = min(PER_SLOT_CAP, spec.context_length or PER_SLOT_CAP)
    per_slot = max(CTX_PAD, cap - cap % CTX_PAD)
    floor = min(PER_SLOT_FLOOR, per_slot)
    while True:
        plan = plan_memory(spec, PlanConfig(ctx=per_slot * slots, slots=slots, kv_type=kv_type))
        if room is None or plan.total_bytes <= room * MEMORY_SHARE or per_slot <= floor:
            return AutoCtx(per_slot * slots, per_slot, plan.total_bytes, room)
        per_slot = max(floor, per_slot - CTX_PAD)
