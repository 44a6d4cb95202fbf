"""The ``lora`` decider at run time: a LoRA fine-tune of the chat model, served as an adapter, answers with the
label's word (training it is ``tiankong/tuning/adapter.py``).

* Answering: the engine is started with the adapter loaded unapplied; each request applies it through
  llama-server's per-request ``lora`` field (its id from ``GET /lora-adapters``), and the label probabilities
  come from label-constrained decoding (``choose_flow``) — one engine pass over the text, no sampling.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from ..structured.combine import gather
from ..structured.flow import Call, Flow
from .features import DeciderEngineError, label_probability_flow

T = TypeVar("T")
#: characters of a text in the adapter's prompt (training and answering alike)
LORA_CHARS = 600
COMPLETION_PATHS = ("/completion", "/completions", "/v1/completions")


def with_adapter(flow: Flow[T], adapter_id: int) -> Flow[T]:
    """``flow`` with adapter ``adapter_id`` applied (scale 1) to every completion it asks the engine for."""
    try:
        calls = flow.send(None)  # type: ignore[arg-type]
        while True:
            applied = [Call(c.method, c.path, {**c.body, "lora": [{"id": adapter_id, "scale": 1.0}]})
                       if c.body is not None and c.path in COMPLETION_PATHS else c for c in calls]
            answers = yield applied
            calls = flow.send(answers)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


def adapter_ids_flow(files: list[Path]) -> Flow[list[int]]:
    """The engine's ids of these adapter files (``GET /lora-adapters``); a clear error when one is not loaded."""
    from ..lora.selection import parse_loaded

    (answer,) = yield [Call("GET", "/lora-adapters")]
    if isinstance(answer, Exception):
        raise DeciderEngineError(f"the engine lists no LoRA adapters ({answer})",
                                 hint="start it with the decider's adapter loaded (engine config lora = [NAME])")
    loaded = {str(Path(a.path).resolve()): a.id for a in parse_loaded(answer)}
    ids = []
    for file in files:
        found = loaded.get(str(file.resolve()))
        if found is None:
            raise DeciderEngineError(f"the engine has not loaded the decider's adapter {file}",
                                     hint=f"start it with that adapter: engine config lora = [{file.parent.name!r}] "
                                          "(tiankong classify --decider starts one itself)")
        ids.append(found)
    return ids


def adapter_scores_flow(files: list[Path], texts: list[str], words: list[str],
                        which: list[int] | None = None) -> Flow[np.ndarray]:
    """Label probabilities of each text under adapter ``files[which[i]]`` (default: the first for every text)."""
    ids = yield from adapter_ids_flow(files)
    picks = which or [0] * len(texts)
    found = yield from gather([with_adapter(label_probability_flow(t[:LORA_CHARS], words), ids[k])
                               for t, k in zip(texts, picks, strict=True)])
    return np.asarray(found)


def decider_adapter_file(state: dict[str, Any]) -> Path:
    """The registered adapter of a ``lora`` decider, checked against the sha256 it was saved with."""
    from ..lora.registry import resolve_adapter

    record = resolve_adapter(str(state["adapter"]))
    if state.get("adapter_sha256") and record.sha256 != state["adapter_sha256"]:
        raise DeciderEngineError(f"adapter {record.name} changed since the decider was tuned (sha256 differs)",
                                 hint="tune the decider again")
    return record.path
