"""Tuning: labelled examples → deciders, cross-validated, calibrated, registered (``tiankong tune``).

``tune_classify("emails.jsonl", name="spam", model="qwen2.5-coder-0.5b-instruct:q4_k_m")`` scores every
candidate method by stratified k-fold CV, keeps the best by a stated rule and registers it in the decider
registry (``tiankong.deciders``), which answers with it from then on; ``tune_rerank`` does the same for
rerank's fusion of the retrieval parts.

Layers: this package sits above the client (it starts a ``Client`` to read engine features) and imports the
run-time ``tiankong.deciders``; nothing below the client imports it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .adapter import AdapterCandidate
    from .classify import DEFAULT_METHODS, MethodScore, TuneReport, tune
    from .data import MIN_PER_LABEL, Examples, ExamplesError, check_examples, load_examples
    from .rerank import tune_rerank

#: names served from submodules on first use: tuning pulls in numpy, scipy and scikit-learn, which a command
#: that only names a decider (or none) should not pay for at start-up
_LAZY = {
    "AdapterCandidate": "adapter", "MIN_PER_LABEL": "data", "Examples": "data", "ExamplesError": "data",
    "check_examples": "data", "load_examples": "data", "DEFAULT_METHODS": "classify", "MethodScore": "classify",
    "TuneReport": "classify", "tune": "classify", "tune_rerank": "rerank",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_METHODS", "ENGINE_FREE", "MIN_PER_LABEL", "AdapterCandidate", "Examples", "ExamplesError", "MethodScore",
    "TuneReport", "check_examples", "load_examples", "tune", "tune_classify", "tune_rerank",
]


#: methods that read no chat engine (the part methods read the embedding part's own engine)
ENGINE_FREE = ("tfidf", "tfidf-rules", "probe-part", "probe-pair", "setfit")


def tune_classify(data: str | Path, *, name: str, model: str | None = None, url: str | None = None,
                  labels: Sequence[str] | None = None, methods: Sequence[str] | None = None, folds: int = 5,
                  descriptions: dict[str, str] | None = None, save: bool = True,
                  llama_server: str | None = None, log: Callable[[str], None] = lambda _: None,
                  cache_dir: Path | None = None) -> TuneReport:
    """Tune a classify decider from a JSONL/CSV file and register it (the ``tiankong tune classify`` verb).

    With ``model`` an engine is started for it (embeddings on); with ``url`` a running llama-server started
    with ``--embeddings --pooling none`` is used; with neither only engine-free methods are scored. The ``lora``
    method (asked for by name) fine-tunes ``model`` and needs the ``[lora]`` extra; ``setfit`` (asked for by name, no
    chat engine) fine-tunes the embedding part and needs the ``[retrieval]`` extra. Engine features are cached
    under ``cache_dir`` (default: the user cache dir) per model sha256, so a re-run resumes (``passes.py``).
    """
    from .. import paths
    from ..api import Client
    from ..structured.drivers import run_sync
    from .adapter import AdapterCandidate
    from .classify import tune
    from .data import load_examples
    from .passes import FeatureCache, retrying

    examples = load_examples(data, labels=labels)
    engine_free = bool(methods) and all(m in ENGINE_FREE for m in methods or ())
    if (model is None and url is None) or engine_free:  # no chat engine is started for methods that read none
        report = tune(examples, name=name, methods_wanted=methods, folds=folds, descriptions=descriptions, log=log,
                      register=save)
    else:
        # the engine's settings for one it starts; with url, llama_server is refused by the client, not ignored
        engine: dict[str, Any] = {"llama_server": llama_server} if url else \
            {"llama_server": llama_server, "slots": 2, "ctx": 8192, "embeddings": True}
        with Client(url, model=model, **engine) as client:
            base = _base_model(client, model)
            adapter = AdapterCandidate(base["name"], llama_server=llama_server, log=log) \
                if model is not None and "lora" in (methods or ()) else None
            request = retrying(client._limited, log)  # within the engine's slots; passing failures retried

            def run(flow: Any) -> Any:
                return run_sync(flow, request)

            report = tune(examples, name=name, run=run, base_model=base, methods_wanted=methods,
                          folds=folds, descriptions=descriptions, adapter=adapter,
                          cache=FeatureCache(cache_dir or paths.cache_dir(), base["sha256"]), log=log,
                          register=save)
    if save and report.decider is not None:
        from ..deciders.registry import save_decider

        save_decider(report.decider)
    return report


def _base_model(client: Any, model: str | None) -> dict[str, str]:
    from ..deciders.features import DeciderEngineError, engine_model_flow
    from ..models.registry import installed_models

    path, sha = client._run(engine_model_flow())
    if sha is None:
        raise DeciderEngineError(f"the engine's model file {path!r} is not on this machine, so it cannot be recorded",
                                 hint="tune against an engine started here (--model NAME)")
    known = {r.sha256: r.name for r in installed_models() if r.sha256}
    return {"name": known.get(sha) or model or Path(path).name, "sha256": sha}
