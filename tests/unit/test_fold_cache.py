"""The LoRA fold adapters' cache key (``tuning/adapter.py`` ``FoldCache``): what changes the trained adapter changes
the key, what does not (the torch thread count) does not. No training here: the training itself is in
tests/engine/test_deciders.py's LoRA test, which reads its second run's folds from this cache."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tiankong.lora.train import TrainSettings
from tiankong.tuning import adapter
from tiankong.tuning.adapter import FoldCache, label_examples

pytestmark = pytest.mark.unit


def keys(tmp_path: Path, *, base: str = "ab" * 32, steps: int = 6, threads: int | None = None,
         texts: tuple[str, ...] = ("spam spam", "hello there")) -> list[str]:
    examples = label_examples(list(texts), np.array([0, 1]), ["spam", "ham"])
    return FoldCache(tmp_path, base, TrainSettings(steps=steps, threads=threads), [examples]).keys


def test_what_makes_the_adapter_makes_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plain = keys(tmp_path)
    assert keys(tmp_path) == plain and keys(tmp_path, threads=4) == plain  # threads change no weight
    assert keys(tmp_path, base="cd" * 32) != plain and keys(tmp_path, steps=7) != plain
    assert keys(tmp_path, texts=("spam spam!", "hello there")) != plain
    monkeypatch.setattr(adapter, "TRAINER_VERSION", adapter.TRAINER_VERSION + 1)
    assert keys(tmp_path) != plain
    monkeypatch.setattr("tiankong.lora.base._version", lambda name: "9.9" if name == "peft" else "1.0")
    assert keys(tmp_path) != plain  # a library upgrade trains anew


def test_a_base_without_a_sha256_is_not_cached(tmp_path: Path) -> None:
    examples = label_examples(["a b", "c d"], np.array([0, 1]), ["spam", "ham"])
    fold = tmp_path / "fold.gguf"
    fold.write_bytes(b"GGUF")
    cache = FoldCache(tmp_path / "cache", "", TrainSettings(), [examples])
    cache.keep([0], [fold], 1.5)
    assert cache.files() == [fold] and not (tmp_path / "cache").exists()
    kept = FoldCache(tmp_path / "cache2", "ab" * 32, TrainSettings(), [examples])
    kept.keep([0], [fold], 1.5)
    again = FoldCache(tmp_path / "cache2", "ab" * 32, TrainSettings(), [examples])
    assert again.missing() == [] and again.train_s() == 1.5 and not list((tmp_path / "cache2").glob(".*"))
