"""A decider's label probabilities for texts, as a sans-I/O flow: at most one engine pass, no sampling.

The engine's model is checked against the decider's base model (sha256) before its features are read; a
decider that needs no engine (``tfidf``, the shipped ``guard``) runs without one. The probabilities of every
label come back calibrated by the method (logistic regression, or contextual calibration for zero-shot).
The tasks (``classify``, ``route``, ``guard``) turn them into their answers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import ConfigError
from ..structured.combine import gather
from ..structured.flow import Flow
from . import methods
from .adapter import adapter_scores_flow, decider_adapter_file
from .features import DeciderEngineError, embeddings_flow, engine_model_flow, label_probability_flow, part_vectors_flow
from .registry import Decider


class DeciderModelMismatch(ConfigError):
    """The engine runs another model than the one the decider was trained on."""


def _verify_model(decider: Decider) -> Flow[None]:
    base = decider.base_model or {}
    if not base.get("sha256"):
        return
    path, sha = yield from engine_model_flow()
    if sha is None:
        raise DeciderEngineError(f"cannot verify the engine's model for decider {decider.ref} ({path or 'no path'})",
                                 hint="run the decider against an engine whose model file is on this machine")
    if sha != base["sha256"]:
        raise DeciderModelMismatch(
            f"decider {decider.ref} was trained on {base.get('name')} (sha256 {base['sha256'][:12]}…), "
            f"but the engine runs {path} (sha256 {sha[:12]}…)",
            hint=f"use --model {base.get('name')}, or tune the decider again on this model")


def _state_part(decider: Decider) -> str:
    """The catalog embedding part a ``probe-part`` or ``probe-pair`` decider was fitted on (those saved before
    2026-12-05 / 2026-12-06 name none: the English one) — a catalog name, never a path."""
    from ..models.catalog import EMBEDDING_MODEL, find_entry

    name = str(decider.state.get("part") or EMBEDDING_MODEL)
    entry = find_entry(name)
    if entry is None or entry.kind != "embedding":
        raise DeciderEngineError(f"decider {decider.ref} names {name!r}, which is not an embedding part of the catalog",
                                 hint=f"tune the decider again (tiankong tune … --methods {decider.method})")
    return name


def pair_decider_part(decider: Decider) -> str | None:
    """The part a ``probe-pair`` decider's cosines were tuned with (None: tuned without one; saved before parts were
    recorded: MiniLM)."""
    return None if "part" in decider.state and decider.state["part"] is None else _state_part(decider)


def _verify_part(decider: Decider) -> str:
    """The registered fine-tuned part a ``setfit`` decider reads, checked by sha256."""
    from ..errors import ModelNotFound
    from ..models.registry import resolve

    name, sha = str(decider.state.get("part") or ""), str(decider.state.get("part_sha256") or "")
    hint = "tune the decider again on this machine (tiankong tune classify --methods setfit)"
    if not name.startswith("setfit-") or "/" in name or name.endswith(".gguf"):  # a registry name, never a path
        raise DeciderEngineError(f"decider {decider.ref} names no registered fine-tuned part ({name!r})", hint=hint)
    try:
        record = resolve(name)
    except ModelNotFound:
        record = None
    if record is None or not record.installed:
        raise DeciderEngineError(f"decider {decider.ref} reads the fine-tuned part {name}, which is not installed",
                                 hint=hint)
    if record.sha256 != sha:
        raise DeciderModelMismatch(f"decider {decider.ref} was fitted on {name} with sha256 {sha[:12]}…, but that "
                                   f"model now has sha256 {str(record.sha256)[:12]}…", hint=hint)
    return name


@dataclass(frozen=True)
class EngineNeeds:
    """What an engine must offer a decider: whether one is needed at all, embeddings, LoRA adapters, the model."""

    engine: bool = False
    embeddings: bool = False
    adapters: list[str] = field(default_factory=list)
    model: str | None = None


def engine_needs(decider: Decider | None) -> EngineNeeds:
    if decider is None:
        return EngineNeeds(engine=True)
    return EngineNeeds(engine=methods.needs_engine(decider.method, decider.state),
                       embeddings=methods.needs_embeddings(decider.method, decider.state),
                       adapters=[str(decider.state["adapter"])] if decider.method == "lora" else [],
                       model=(decider.base_model or {}).get("name"))


def features_flow(decider: Decider, texts: list[str]) -> Flow[methods.FeatureSet]:
    """The inputs ``decider``'s method reads for ``texts`` (one engine pass each at most)."""
    features = methods.FeatureSet(list(texts))
    if methods.needs_engine(decider.method, decider.state):
        yield from _verify_model(decider)
    if methods.needs_embeddings(decider.method, decider.state):
        features.embeddings = yield from embeddings_flow(texts)
    if decider.method == methods.PART_PROBE:
        features.embeddings = {"part": (yield from part_vectors_flow(texts, _state_part(decider)))}
    if decider.method == methods.SETFIT:
        features.embeddings = {"part": (yield from part_vectors_flow(texts, _verify_part(decider)))}
    if decider.method == methods.PAIR_PROBE:
        from ..dedupe.pairs import pair_features_flow

        features.embeddings = {"pair": np.asarray((yield from pair_features_flow(texts, pair_decider_part(decider))))}
    if decider.method == "zeroshot":
        found = yield from gather([label_probability_flow(t, decider.words) for t in texts])
        features.zeroshot = np.asarray(found)
    return features


def scores_flow(decider: Decider, texts: list[str]) -> Flow[np.ndarray]:
    features = yield from features_flow(decider, texts)
    if decider.method == "lora":
        found: np.ndarray = yield from adapter_scores_flow([decider_adapter_file(decider.state)], texts,
                                                           decider.words)
        return found
    if decider.method == "fewshot":
        index = decider.state["index"]
        shots = [methods.neighbour_shots(index, t, int(decider.params.get("k", 4))) for t in texts]
        answers = yield from gather([label_probability_flow(t, decider.words, s)
                                     for t, s in zip(texts, shots, strict=True)])
        return np.asarray(answers)
    return methods.predict(decider.method, decider.state, features)
