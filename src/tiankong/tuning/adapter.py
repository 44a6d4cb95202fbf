"""Training the ``lora`` decider (``tune``'s ``lora`` candidate; answering with it is ``deciders/adapter.py``).

* Training (the ``[lora]`` extra, ``lora.train``): each example becomes the prompt zero-shot uses (text first,
  then the question: ``label_messages``) with the label's word as the answer; the loss is on the answer tokens
  only, early stopping on a held-out fifth keeps the best weights, and the adapter sits on the top ``LAYERS``
  blocks (no backward pass below them: about 3× faster per step on a CPU than all blocks, measured on
  qwen2.5-0.5B, 2.8 s vs 8 s for a batch of four). It is converted to GGUF and registered in the LoRA registry.
* Cross-validation trains one adapter per fold (the model is loaded into ``transformers`` once), starts one
  engine with every fold's adapter, and scores each test fold with its own adapter. It is scored at the full
  training size only: each learning-curve point would cost another k trainings.
* A fold's adapter is kept in ``<cache>/deciders/lora-folds/`` under a digest of what made it (the base model's
  sha256, the training settings, the fold's rendered examples, the training libraries' versions and
  ``TRAINER_VERSION``): ``tune --dry-run`` and then ``tune`` — the usual
  pair — or a re-run after an interruption trains no fold twice (minutes per fold on a CPU for the 0.5B). The
  folder can be deleted at any time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import shutil
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
#: bumped when training or conversion changes what an adapter holds (the fold cache's key)
TRAINER_VERSION = 1


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
                 training: Any = None, log: Log = lambda _: None, cache_dir: Path | None = None) -> None:
        """``training``: ``lora.train.TrainSettings`` (default: :func:`settings`); ``cache_dir``: where fold
        adapters are kept (default ``<cache>/deciders/lora-folds``)."""
        self.base, self.slots, self.ctx, self.llama_server, self.log = base, slots, ctx, llama_server, log
        self.training = training
        self.cache_dir = cache_dir

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
        training = self.training or settings()
        with tempfile.TemporaryDirectory(prefix="tiankong-decider-lora-") as tmp:
            folds = FoldCache(self.cache_dir, self.base_model()["sha256"], training, datasets)
            missing = folds.missing()
            if len(missing) < len(datasets):
                self.log(f"{len(datasets) - len(missing)} of {len(datasets)} fold adapters read from the cache "
                         f"({folds.root})")
            if missing:
                started = time.perf_counter()
                trained = train_adapters(self.base, [datasets[i] for i in missing], Path(tmp), training,
                                         log=self.log)
                folds.keep(missing, [t.path for t in trained], (time.perf_counter() - started) / len(trained))
            files, train_s = folds.files(), folds.train_s()
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


class FoldCache:
    """Fold adapters on disk under a digest of (base sha256, settings, examples); see the module docstring. A base
    with no registry sha256 (a .gguf path) is not cached: a temporary folder holds its adapters for this run."""

    def __init__(self, root: Path | None, base_sha256: str, training: Any, datasets: list[list[Any]]) -> None:
        from .. import paths

        self.root = root or paths.cache_dir() / "deciders" / "lora-folds"
        self.enabled = bool(base_sha256)
        from ..lora.base import library_versions

        made = {k: v for k, v in dataclasses.asdict(training).items() if k != "threads"}  # threads change no weight
        # the libraries that train and convert, and this trainer's own version: an upgrade trains anew
        libraries = f"{library_versions(('peft',))};trainer={TRAINER_VERSION}"
        self.keys = [hashlib.sha256(json.dumps(
            {"base": base_sha256, "libraries": libraries, "training": made,
             "examples": [[e.messages, e.answer] for e in examples]}, sort_keys=True, default=str).encode()
        ).hexdigest()[:32] for examples in datasets]
        self.paths: dict[int, Path] = {}
        self.seconds: dict[int, float] = {}
        for i, key in enumerate(self.keys):
            adapter, record = self.root / f"{key}.gguf", self.root / f"{key}.json"
            if self.enabled and adapter.is_file() and record.is_file():
                with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
                    self.seconds[i] = float(json.loads(record.read_text(encoding="utf-8"))["train_s"])
                    self.paths[i] = adapter

    def missing(self) -> list[int]:
        return [i for i in range(len(self.keys)) if i not in self.paths]

    def keep(self, folds: list[int], files: list[Path], train_s: float) -> None:
        """The adapters just trained: used from where they are, and copied into the cache (renamed in whole)."""
        for i, file in zip(folds, files, strict=True):
            self.paths[i], self.seconds[i] = file, train_s
            if not self.enabled:
                continue
            try:
                self.root.mkdir(parents=True, exist_ok=True)
                # a name of its own: two tunes of the same data must not write into one part file
                handle, name = tempfile.mkstemp(prefix=f".{self.keys[i]}-", suffix=".part", dir=self.root)
                os.close(handle)
                shutil.copyfile(file, name)
                os.replace(name, self.root / f"{self.keys[i]}.gguf")
                (self.root / f"{self.keys[i]}.json").write_text(json.dumps({"train_s": train_s}), encoding="utf-8")
            except OSError:  # a full disk or a read-only cache: the next run trains it again
                continue

    def files(self) -> list[Path]:
        return [self.paths[i] for i in range(len(self.keys))]

    def train_s(self) -> float:
        """Seconds per adapter's training, as measured when each was trained."""
        return sum(self.seconds.values()) / max(len(self.seconds), 1)
