"""The inverse: the largest context × slots (and KV type) that fits a memory budget; sizes in and out."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError
from .formula import CTX_PAD, PLAN_KV_TYPES, ModelSpec, PlanConfig
from .memory import MemoryPlan, plan_memory

_UNITS = {
    "": 1, "b": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
}
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")
#: Upper bound for the per-slot search when a model does not state its trained context.
MAX_SEARCH_CTX = 1 << 20


def parse_size(text: str) -> int:
    """``"2GiB"``, ``"512MB"``, ``"1.5g"``, ``"800M"`` or plain bytes. GiB/MiB/KiB and bare G/M/K are binary,
    GB/MB/KB decimal."""
    match = _SIZE.match(text)
    unit = match.group(2).lower() if match else ""
    if not match or unit not in _UNITS:
        raise ConfigError(f"cannot read the size {text!r}", hint="write it like 2GiB, 512MB, 1.5G or 800000000")
    value = int(float(match.group(1)) * _UNITS[unit])
    if value <= 0:
        raise ConfigError(f"the size {text!r} must be larger than zero")
    return value


def format_bytes(value: float) -> str:
    """Binary units, three significant digits: ``852 MiB``, ``1.62 GiB``."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(value) >= scale:
            scaled = value / scale
            return f"{scaled:.3g} {unit}" if scaled < 1000 else f"{scaled:.0f} {unit}"
    return f"{value:.0f} B"


@dataclass
class BudgetFit:
    """For each KV type, the largest context that fits; ``best`` is the one with the most tokens."""

    budget_bytes: int
    slots: int
    options: list[MemoryPlan] = field(default_factory=list)
    smallest: MemoryPlan | None = None

    @property
    def fits(self) -> bool:
        return bool(self.options)

    @property
    def best(self) -> MemoryPlan | None:
        if not self.options:
            return None
        order = {kv: i for i, kv in enumerate(PLAN_KV_TYPES)}
        return max(self.options, key=lambda p: (p.target.layout.n_ctx, -order.get(p.config.kv_type, 99)))

    @property
    def message(self) -> str:
        best = self.best
        if best is not None:
            return (f"{best.model.name}: fits {format_bytes(self.budget_bytes)} with ctx {best.config.ctx} "
                    f"({best.config.slots} × {best.ctx_per_slot}), {best.config.kv_type} KV, "
                    f"{format_bytes(best.total_bytes)}")
        smallest = self.smallest
        assert smallest is not None
        return (f"{smallest.model.name}: nothing fits in {format_bytes(self.budget_bytes)}; the smallest configuration "
                f"(ctx {smallest.config.ctx}, {smallest.config.slots} slot(s), {smallest.config.kv_type} KV, ubatch "
                f"{smallest.config.n_ubatch}) needs {format_bytes(smallest.total_bytes)}")

    def to_json(self) -> dict[str, Any]:
        best = self.best
        return {
            "budget_bytes": self.budget_bytes, "fits": self.fits, "message": self.message,
            "best": {"ctx": best.config.ctx, "slots": best.config.slots, "kv_type": best.config.kv_type} if best
            else None,
            "options": [{"kv_type": p.config.kv_type, "ctx": p.config.ctx, "ctx_per_slot": p.ctx_per_slot,
                         "total_bytes": p.total_bytes} for p in self.options],
            "smallest": self.smallest.to_json() if self.smallest else None,
        }


def fit_budget(
    spec: ModelSpec, budget_bytes: int, config: PlanConfig, draft: ModelSpec | None = None,
    kv_types: tuple[str, ...] = PLAN_KV_TYPES,
) -> BudgetFit:
    """The largest per-slot context (a multiple of 256, at most the trained context) for each KV type."""
    fit = BudgetFit(budget_bytes=budget_bytes, slots=config.slots)
    for kv_type in kv_types:
        option = _largest(spec, budget_bytes, config.with_(kv_type=kv_type), draft)
        if option is not None:
            fit.options.append(option)
    if not fit.options:
        smallest = config.with_(ctx=CTX_PAD * config.slots, kv_type=kv_types[-1])
        fit.smallest = plan_memory(spec, smallest, draft)
    return fit


def _largest(spec: ModelSpec, budget: int, config: PlanConfig, draft: ModelSpec | None) -> MemoryPlan | None:
    def plan(units: int) -> MemoryPlan:
        return plan_memory(spec, config.with_(ctx=units * CTX_PAD * config.slots), draft)

    limit = spec.context_length or MAX_SEARCH_CTX
    low, high = 0, max(1, limit // CTX_PAD)
    while low < high:  # the largest number of 256-token units per slot that fits
        middle = (low + high + 1) // 2
        if plan(middle).total_bytes <= budget:
            low = middle
        else:
            high = middle - 1
    return plan(low) if low else None
