"""Capacity planning: how much memory a llama-server needs for a model and configuration, and the inverse.

Pure maths over GGUF metadata (``formula``, ``memory``, ``budget``); ``load`` is the only module that reads
files. See ``docs/plan.md`` for the formula and ``benchmarks/plan_accuracy.py`` for its validation.
"""

from .budget import BudgetFit, fit_budget, format_bytes, parse_size
from .formula import KV_BYTES_PER_ELEMENT, PLAN_KV_TYPES, REPACK_TYPES, ModelSpec, PlanConfig, kv_bytes_per_token
from .load import PlanReport, load_spec, plan_models, spec_from_info
from .memory import MemoryPlan, plan_memory

__all__ = [
    "KV_BYTES_PER_ELEMENT", "PLAN_KV_TYPES", "REPACK_TYPES", "BudgetFit", "MemoryPlan", "ModelSpec", "PlanConfig",
    "PlanReport", "fit_budget", "format_bytes", "kv_bytes_per_token", "load_spec", "parse_size", "plan_memory",
    "plan_models", "spec_from_info",
]
