"""Deciders at run time: the registry of versioned decider artifacts and how a decider answers.

A decider is made by ``tiankong.tuning`` (``tune_classify("emails.jsonl", name="spam", model=…)`` scores every
candidate method by stratified k-fold CV, keeps the best by a stated rule and registers it); afterwards
``Client.classify(text, decider="spam")``, ``tiankong classify --decider spam``, ``POST /v1/tasks/classify
{"text", "decider"}`` and ``tiankong batch run --decider spam`` all answer with it through this package.

Layers: ``deciders`` sits below ``tasks`` (the tasks import it) and imports neither ``tasks`` nor the client;
``tuning`` sits above the client (it builds a ``Client``) and imports ``deciders``, never the reverse.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .registry import (
    Decider,
    DeciderNotFound,
    InvalidDecider,
    list_deciders,
    load_decider,
    remove_decider,
    save_decider,
)

if TYPE_CHECKING:
    from .features import DeciderEngineError, engine_model_flow  # noqa: F401
    from .runtime import DeciderModelMismatch, EngineNeeds, engine_needs, scores_flow

#: names served from submodules on first use: scoring pulls in numpy, scipy and scikit-learn, which a
#: command that only names a decider (or none) should not pay for at start-up
_LAZY = {
    "DeciderEngineError": "features", "engine_model_flow": "features", "DeciderModelMismatch": "runtime",
    "EngineNeeds": "runtime", "engine_needs": "runtime", "scores_flow": "runtime",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Decider", "DeciderEngineError", "DeciderModelMismatch", "DeciderNotFound", "EngineNeeds", "InvalidDecider",
    "engine_model_flow", "engine_needs", "list_deciders", "load_decider", "remove_decider", "save_decider",
    "scores_flow",
]
