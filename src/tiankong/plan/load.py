"""The only I/O of ``tiankong.plan``: resolve a model name and read its GGUF metadata."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..models.gguf_meta import GGUFInfo, read_gguf
from ..models.registry import resolve_installed
from .budget import BudgetFit, fit_budget, parse_size
from .formula import ModelSpec, PlanConfig, estimate_ffn_length
from .memory import MemoryPlan, plan_memory, validate_config
from .tensors import matmul_bytes_by_type


def spec_from_info(info: GGUFInfo, *, name: str | None = None,
                   matmul_bytes: dict[str, int] | None = None) -> ModelSpec:
    """The memory-relevant shape of a model from its GGUF metadata (pure)."""
    window = info.sliding_window if info.sliding_window and any(info.sliding_window_pattern) else None
    return ModelSpec(
        name=name or info.name, path=info.path, architecture=info.architecture, file_type=info.file_type,
        weights_bytes=info.tensor_bytes, layers=info.layers, kv_heads=info.kv_heads, head_dim=info.head_dim,
        head_dim_v=info.head_dim_v, embedding=info.embedding,
        ffn_length=estimate_ffn_length(info.parameters, info.layers, info.embedding, info.vocab_size, info.heads,
                                       info.kv_heads, info.head_dim, info.head_dim_v),
        vocab_size=info.vocab_size, context_length=info.context_length, sliding_window=window,
        swa_layers=sum(info.sliding_window_pattern) if window else 0, matmul_bytes_by_type=dict(matmul_bytes or {}),
    )


def load_spec(model: str) -> ModelSpec:
    """A catalog/registry name or a GGUF path → its ``ModelSpec`` (``InvalidModelFile`` for a non-GGUF file)."""
    local = Path(model).expanduser()
    record = resolve_installed(str(local.resolve()) if local.is_file() else model)
    info = read_gguf(record.path)
    return spec_from_info(info, name=record.name, matmul_bytes=matmul_bytes_by_type(record.path))


@dataclass
class PlanReport:
    """One plan per model (with a budget: the best fit, or the smallest configuration when nothing fits)."""

    plans: list[MemoryPlan]
    fits: list[BudgetFit] | None = None

    @property
    def warnings(self) -> list[str]:
        return [warning for plan in self.plans for warning in plan.warnings]

    @property
    def nothing_fits(self) -> list[BudgetFit]:
        return [fit for fit in self.fits or [] if not fit.fits]

    def to_json(self) -> list[dict[str, Any]]:
        rows = [plan.to_json() for plan in self.plans]
        for row, fit in zip(rows, self.fits or [], strict=False):
            row["budget"] = fit.to_json()
        return rows


def plan_models(
    models: Sequence[str], config: PlanConfig, *, draft: str | None = None, budget: str | int | None = None,
) -> PlanReport:
    """Plan each model for ``config``; with ``budget``, the largest context per KV type that fits instead."""
    validate_config(config)
    budget_bytes = parse_size(budget) if isinstance(budget, str) else budget
    draft_spec = load_spec(draft) if draft else None
    specs = [load_spec(model) for model in models]
    if budget_bytes is None:
        return PlanReport(plans=[plan_memory(spec, config, draft_spec) for spec in specs])
    fits = [fit_budget(spec, budget_bytes, config, draft_spec) for spec in specs]
    plans = [fit.best or fit.smallest for fit in fits]
    return PlanReport(plans=[plan for plan in plans if plan is not None], fits=fits)
