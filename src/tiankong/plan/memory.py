"""``plan_memory``: the whole server process — target model, optional draft model, process overhead."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError
from .formula import (
    KV_BYTES_PER_ELEMENT,
    MAX_CTX,
    MAX_SLOTS,
    MIN_CTX,
    REPACK_TYPES,
    ModelMemory,
    ModelSpec,
    PlanConfig,
    model_memory,
    overhead_bytes,
)


@dataclass
class MemoryPlan:
    """Predicted resident memory of one llama-server process (after its context has been filled)."""

    model: ModelSpec
    config: PlanConfig
    target: ModelMemory
    draft_model: ModelSpec | None
    draft: ModelMemory | None
    overhead_bytes: int
    warnings: list[str] = field(default_factory=list)

    @property
    def weights_bytes(self) -> int:
        return self.target.weights_bytes + self.target.repack_bytes + self._draft("weights_bytes", "repack_bytes")

    @property
    def kv_bytes(self) -> int:
        return self.target.kv_bytes + self._draft("kv_bytes")

    @property
    def compute_bytes(self) -> int:
        return self.target.compute_bytes + self.target.output_bytes + self._draft("compute_bytes", "output_bytes")

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.kv_bytes + self.compute_bytes + self.overhead_bytes

    @property
    def ctx_per_slot(self) -> int:
        return self.target.layout.ctx_per_slot

    def _draft(self, *names: str) -> int:
        return sum(int(getattr(self.draft, name)) for name in names) if self.draft else 0

    def to_json(self) -> dict[str, Any]:
        config = self.config
        data: dict[str, Any] = {
            "model": self.model.name, "path": self.model.path, "file_type": self.model.file_type,
            "ctx": config.ctx, "slots": config.slots, "kv_type": config.kv_type, "kv_unified": config.kv_unified,
            "ubatch": config.n_ubatch, "repack": config.repack, "n_ctx": self.target.layout.n_ctx,
            "ctx_per_slot": self.ctx_per_slot,
            "trained_ctx": self.model.context_length, "kv_bytes_per_token": self.target.kv_bytes_per_token,
            "kv_cells": {"full": self.target.layout.cells_full, "swa": self.target.layout.cells_swa,
                         "streams": self.target.layout.streams},
            "weights_bytes": self.weights_bytes, "tensor_bytes": self.model.weights_bytes,
            "repack_bytes": self.target.repack_bytes,
            "kv_bytes": self.kv_bytes, "compute_bytes": self.compute_bytes, "overhead_bytes": self.overhead_bytes,
            "total_bytes": self.total_bytes, "draft": None, "warnings": list(self.warnings),
        }
        if self.draft and self.draft_model:
            data["draft"] = {"model": self.draft_model.name, "weights_bytes": self.draft.weights_bytes,
                             "repack_bytes": self.draft.repack_bytes, "kv_bytes": self.draft.kv_bytes,
                             "compute_bytes": self.draft.compute_bytes + self.draft.output_bytes}
        return data


def validate_config(config: PlanConfig) -> None:
    for name, value, minimum in (("ctx", config.ctx, MIN_CTX), ("slots", config.slots, 1),
                                 ("ubatch", config.ubatch, 1), ("batch", config.batch, 1)):
        if value < minimum:
            raise ConfigError(f"{name} must be ≥ {minimum}, not {value}")
    for name, value, maximum in (("ctx", config.ctx, MAX_CTX), ("slots", config.slots, MAX_SLOTS)):
        if value > maximum:
            raise ConfigError(f"{name} must be ≤ {maximum}, not {value} (tiankong serve refuses more)")
    for kv_type in (config.kv_type, config.draft_kv_type):
        if kv_type not in KV_BYTES_PER_ELEMENT:
            raise ConfigError(f"unknown KV-cache type {kv_type!r}",
                              hint=f"use one of {', '.join(KV_BYTES_PER_ELEMENT)}")
    if config.repack not in REPACK_TYPES:
        raise ConfigError(f"unknown repack family {config.repack!r}", hint=f"use one of {', '.join(REPACK_TYPES)}")


def plan_memory(spec: ModelSpec, config: PlanConfig, draft: ModelSpec | None = None) -> MemoryPlan:
    """Weights, KV cache, compute buffers and overhead of one llama-server for ``config``."""
    validate_config(config)
    target = model_memory(spec, config, config.kv_type)
    draft_memory = model_memory(draft, config, config.draft_kv_type) if draft else None
    plan = MemoryPlan(model=spec, config=config, target=target, draft_model=draft, draft=draft_memory,
                      overhead_bytes=overhead_bytes(spec, config.slots, draft))
    plan.warnings = plan_warnings(plan)
    return plan


def plan_warnings(plan: MemoryPlan) -> list[str]:
    warnings = []
    trained, per_slot = plan.model.context_length, plan.ctx_per_slot
    if trained and plan.config.kv_unified and plan.target.layout.n_ctx > trained * plan.config.slots:
        warnings.append(f"{plan.model.name}: the unified context {plan.target.layout.n_ctx} exceeds slots × trained "
                        f"context ({plan.config.slots} × {trained}); llama-server caps each slot at {trained}, so "
                        "part of the pool can never be used")
    elif trained and not plan.config.kv_unified and per_slot > trained:
        warnings.append(f"{plan.model.name}: context per slot {per_slot} exceeds the trained context {trained}; "
                        f"llama-server caps each slot at {trained}, the extra cells are allocated but never used")
    if plan.config.ctx % plan.config.slots and not plan.config.kv_unified:
        warnings.append(f"ctx {plan.config.ctx} is not divisible by {plan.config.slots} slots; "
                        "`tiankong serve` refuses it (llama-server would round it)")
    return warnings
