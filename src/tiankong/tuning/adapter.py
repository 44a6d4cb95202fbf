"""Training the ``lora`` decider (``tune``'s ``lora`` candidate; answering with it is ``deciders/adapter.py``).

* Training (the ``[lora]`` extra, ``lora.train``): each example becomes the prompt zero-shot uses (text first,
  then the question: ``label_messages``) with the label's word as the answer; the loss is on the answer tokens
  only, early stopping on a held-out fifth keeps the best weights, and the adapter sits on the top ``LAYERS``
  blocks (no backward pass below them: about 3× faster per step on a CPU than all blocks, measured on
  qwen2.5-0.5B, 2.8 s vs 8 s for a batch of four). It is converted to GGUF and registered in the LoRA registry.
* Cross-validation trains one adapter per fold (the model is loaded into ``transformers`` once), starts one
  engine with every fold's adapter, and scores each test fold with its own adapter. It is scored at the full
  training size only: each learning-curve point would cost another k trainings.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..deciders.adapter import LORA_CHARS, adapter_scores_flow
from ..deciders.features import label_messages

Log = Callable[[str], None]
LAYERS = 8


def settings() -> Any:
    from ..lora.train import TrainSettings

    return TrainSettings(rank=8, alpha=16.0, steps=40, lr=1e-3, batch_size=4, eval_every=10, patience=2,
                         layers=LAYERS, max_tokens=1024, seed=0)


def label_examples(texts: list[str], y: np.ndarray, words: list[str]) -> list[Any]:
    from ..lora.data import Example

    return [Example(label_messages(t[:LORA_CHARS], words), words[int(k)]) for t, k in zip(texts, y, strict=True)]


def adapter_name(decider: str, examples_sha256: str) -> str:
    """The registry name of a decider's adapter: one per decider name and training data."""
    return f"decider-{decider[:40]}-{examples_sha256[:12]}"


class AdapterCandidate:
    """Trains and scores the ``lora`` candidate for ``tune`` on the installed model ``base``."""

    def __init__(self, base: str, *, slots: int = 2, ctx: int = 8192, llama_server: str | None = None,
                 training: Any = None, log: Log = lambda _: None) -> None:
        """``training``: ``lora.train.TrainSettings`` (default: :func:`settings`)."""
        self.base, self.slots, self.ctx, self.llama_server, self.log = base, slots, ctx, llama_server, log
        self.training = training

    def base_model(self) -> dict[str, str]:
        """The decider's ``base_model`` record: the registry's name and sha256 of the fine-tuned model."""
        from ..models import resolve_installed

        record = resolve_installed(self.base)
        return {"name": record.name, "sha256": record.sha256}

    def cross_validate(self, texts: list[str], y: np.ndarray, words: list[str],
                       splits: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, float, float]:
        """(out-of-fold probabilities, ms per item answering, s per adapter training)."""
        from ..api import Client
        from ..lora.train import train_adapters

        datasets = [label_examples([texts[i] for i in train], y[train], words) for train, _ in splits]
        found = np.zeros((len(texts), len(words)))
        with tempfile.TemporaryDirectory(prefix="tiankong-decider-lora-") as tmp:
            started = time.perf_counter()
            trained = train_adapters(self.base, datasets, Path(tmp), self.training or settings(), log=self.log)
            train_s = (time.perf_counter() - started) / len(trained)
            files = [t.path for t in trained]
            which = [0] * len(texts)
            for fold, (_, test) in enumerate(splits):
                for i in test:
                    which[int(i)] = fold
            with Client(model=self.base, slots=self.slots, ctx=self.ctx, llama_server=self.llama_server,
                        adapters=[str(f) for f in files]) as client:
                started = time.perf_counter()
                found[:] = client._run(adapter_scores_flow(files, texts, words, which))
                ms = 1000 * (time.perf_counter() - started) / len(texts)
        return found, ms, train_s

    def final(self, name: str, examples_sha256: str, texts: list[str], y: np.ndarray,
              words: list[str]) -> dict[str, Any]:
        """Train on every example and register the adapter; the decider's state names it (and its sha256)."""
        from ..lora.registry import add_adapter
        from ..lora.train import train_adapters, training_record

        with tempfile.TemporaryDirectory(prefix="tiankong-decider-lora-") as tmp:
            (trained,) = train_adapters(self.base, [label_examples(texts, y, words)], Path(tmp),
                                        self.training or settings(), log=self.log)
            record = add_adapter(trained.path, name=adapter_name(name, examples_sha256), base=self.base, force=True,
                                 training=training_record(trained, f"tune:{name}"), source=f"tune:{name}")
        return {"adapter": record.name, "adapter_sha256": record.sha256, "max_chars": LORA_CHARS}
