"""The ``setfit`` decider: a SetFit-style contrastive fine-tune of the embedding part, then a probe on its vectors.

SetFit (Tunstall et al., 2022) fine-tunes a sentence-embedding model on pairs of the labelled examples — same label:
cosine 1, different labels: cosine 0 — and fits logistic regression on the fine-tuned vectors; with 8–16 examples
per label it comes near full-data accuracy, where a probe on the frozen vectors (``probe-part``) cannot move the
vectors at all. Here the model is the catalog's embedding part (``all-minilm-l6-v2``, its packaged checkpoint,
``models/pull.checkpoint_folder``) and training needs the ``[retrieval]`` extra (torch, transformers), which
llama.cpp's converter needs too.

* **Training** (``fine_tune``): ``iterations`` rounds of one same-label and one other-label partner per example
  (SetFit's pair sampling), at most ``max_pairs`` pairs, one epoch of cosine-similarity loss (mean squared error of
  the cosine against 1 / 0), AdamW, a linear schedule with 10 % warm-up; mean pooling over the tokens, as the part
  engine pools. Texts are cut to ``train_tokens`` for training only (measured: docs/deciders.md).
* **Serving**: the fine-tuned weights are converted to GGUF by llama.cpp's own converter and registered as a model
  (``setfit-<decider>-<the file's sha256>:f16``; ``tune --dry-run`` registers nothing); the decider's head is
  fitted on the vectors that engine returns for the training texts, so training and serving read the same
  vectors. The decider names the model and its sha256 and refuses another file. No chat engine is needed.
* **Cross-validation** fine-tunes once per fold and scores the held-out fold with the fold's model in torch (the
  converted engine would give the same vectors up to f16 rounding; converting k models would cost minutes).
"""

from __future__ import annotations

import random
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..deciders import methods
from ..errors import ConfigError

Log = Callable[[str], None]
#: tokens of a text the part engine reads (its context, 512 positions, less [CLS] and [SEP])
SERVE_TOKENS = 512


@dataclass(frozen=True)
class SetFitSettings:
    iterations: int = 20
    max_pairs: int = 640
    batch_size: int = 16
    lr: float = 2e-5
    train_tokens: int = 128
    seed: int = 0


def missing_packages() -> list[str]:
    """What training needs that is not installed (the ``[retrieval]`` extra)."""
    from ..models.convert import missing_converter_packages

    return missing_converter_packages()


def pairs(y: np.ndarray, iterations: int, max_pairs: int, seed: int) -> list[tuple[int, int, float]]:
    """SetFit's pairs: per round and example, one partner of its label (target 1) and one of another (target 0)."""
    rng = random.Random(seed)
    by_label = {int(k): [i for i in range(len(y)) if y[i] == k] for k in np.unique(y)}
    others = {k: [j for j in range(len(y)) if y[j] != k] for k in by_label}
    out: list[tuple[int, int, float]] = []
    for _ in range(iterations):
        for i in range(len(y)):
            same = [j for j in by_label[int(y[i])] if j != i]
            other = others[int(y[i])]
            if same:
                out.append((i, rng.choice(same), 1.0))
            if other:
                out.append((i, rng.choice(other), 0.0))
    rng.shuffle(out)
    return out[:max_pairs]


class Encoder:
    """The part's checkpoint in torch: mean-pooled, L2-normalised sentence vectors, and the fine-tune."""

    def __init__(self, folder: Path, settings: SetFitSettings) -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer

        self.folder, self.settings, self.torch = folder, settings, torch
        torch.manual_seed(settings.seed)
        self.tokenizer = AutoTokenizer.from_pretrained(str(folder))
        self.model = AutoModel.from_pretrained(str(folder))

    def _pool(self, texts: list[str], tokens: int) -> Any:
        batch = self.tokenizer(texts, padding=True, truncation=True, max_length=tokens, return_tensors="pt")
        hidden = self.model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        return (hidden * mask).sum(1) / mask.sum(1)

    def vectors(self, texts: list[str], tokens: int = SERVE_TOKENS, batch: int = 16) -> np.ndarray:
        """What the part engine returns for ``texts`` (cut to ``MAX_CHARS`` like ``part_vectors_flow``)."""
        from ..deciders.features import MAX_CHARS

        texts = [t[:MAX_CHARS] for t in texts]
        torch = self.torch
        self.model.eval()
        out = []
        with torch.no_grad():
            for start in range(0, len(texts), batch):
                out.append(torch.nn.functional.normalize(self._pool(texts[start:start + batch], tokens), dim=1))
        return torch.cat(out).numpy().astype(np.float64)  # type: ignore[no-any-return]

    def fine_tune(self, texts: list[str], y: np.ndarray, log: Log = lambda _: None) -> int:
        """One epoch over SetFit's pairs of ``texts``; returns the number of pairs."""
        torch, s = self.torch, self.settings
        torch.manual_seed(s.seed)
        chosen = pairs(y, s.iterations, s.max_pairs, s.seed)
        steps = max(1, (len(chosen) + s.batch_size - 1) // s.batch_size)
        warm = max(1, steps // 10)
        optimiser = torch.optim.AdamW(self.model.parameters(), lr=s.lr)
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimiser, lambda step: min(1.0, (step + 1) / warm) * max(0.0, (steps - step) / steps))
        self.model.train()
        started = time.perf_counter()
        for step, begin in enumerate(range(0, len(chosen), s.batch_size), start=1):
            batch = chosen[begin:begin + s.batch_size]
            left = self._pool([texts[i] for i, _, _ in batch], s.train_tokens)
            right = self._pool([texts[j] for _, j, _ in batch], s.train_tokens)
            cosine = torch.nn.functional.cosine_similarity(left, right)
            loss = torch.nn.functional.mse_loss(cosine, torch.tensor([t for _, _, t in batch], dtype=cosine.dtype))
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            schedule.step()
            if step % 10 == 0 or step == steps:
                spent = time.perf_counter() - started
                log(f"setfit: step {step}/{steps}, loss {float(loss.detach()):.4f}, {spent:.0f}s spent, "
                    f"about {spent / step * (steps - step):.0f}s left")
        self.model.eval()
        return len(chosen)

    def save(self, folder: Path) -> None:
        """The fine-tuned checkpoint: the original folder's files (tokenizer, pooling) with the new weights."""
        shutil.copytree(self.folder, folder, ignore=shutil.ignore_patterns(".complete", "model.safetensors"))
        self.model.save_pretrained(str(folder), safe_serialization=True)


def model_name(decider: str, gguf: Path) -> tuple[str, str, str]:
    """(family, size, quant) of a decider's fine-tuned part in the model registry: named by the converted file's
    own sha256, so a name never stands for two files (a saved decider's part is never replaced by a later tune)."""
    from ..models.registry import _slug, sha256_file

    return f"setfit-{_slug(decider)[:40]}", sha256_file(gguf)[:12], "f16"


class SetFitCandidate:
    """Trains and scores the ``setfit`` candidate for ``tune`` (like ``adapter.AdapterCandidate`` for ``lora``)."""

    def __init__(self, settings: SetFitSettings | None = None, log: Log = lambda _: None) -> None:
        self.settings = settings or SetFitSettings()
        self.log = log

    def _encoder(self) -> Encoder:
        from ..models.catalog import EMBEDDING_MODEL
        from ..models.pull import checkpoint_folder

        missing = missing_packages()
        if missing:
            raise ConfigError(f"the setfit method needs {', '.join(missing)}",
                              hint="pip install 'tiankong[retrieval]'")
        return Encoder(checkpoint_folder(EMBEDDING_MODEL, self.log), self.settings)

    def cross_validate(self, texts: list[str], y: np.ndarray, n_labels: int,
                       splits: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, float, float]:
        """(out-of-fold probabilities, ms per item answering, s per fine-tune)."""
        found = np.zeros((len(texts), n_labels))
        train_s = answer_s = 0.0
        for fold, (train, test) in enumerate(splits, start=1):
            self.log(f"setfit: fold {fold} of {len(splits)}")
            encoder = self._encoder()
            started = time.perf_counter()
            encoder.fine_tune([texts[i] for i in train], y[train], self.log)
            train_s += time.perf_counter() - started
            head = methods.fit_linear(encoder.vectors([texts[i] for i in train]), y[train], n_labels,
                                      methods.C_PROBE)
            started = time.perf_counter()
            found[test] = methods.predict_linear(head, encoder.vectors([texts[i] for i in test]))
            answer_s += time.perf_counter() - started
        return found, 1000 * answer_s / len(texts), train_s / len(splits)

    def final(self, name: str, texts: list[str], y: np.ndarray, n_labels: int) -> dict[str, Any]:
        """Fine-tune on every example, convert, register; the head is fitted on the registered part's vectors."""
        from ..models.convert import convert_checkpoint
        from ..models.registry import MODEL_FILE, add_model, model_dir, resolve

        encoder = self._encoder()
        count = encoder.fine_tune(texts, y, self.log)
        with tempfile.TemporaryDirectory(prefix="tiankong-setfit-") as tmp:
            encoder.save(Path(tmp) / "checkpoint")
            gguf = convert_checkpoint(Path(tmp) / "checkpoint", Path(tmp) / "model.gguf", outtype="f16",
                                      log=self.log)
            family, size, quant = model_name(name, gguf)
            existing = resolve(f"{family}-{size}:{quant}") if (model_dir(family, size, quant) / MODEL_FILE).is_file() \
                else None  # the same weights again: the same file, already registered
            record = existing or add_model(gguf, family=family, size=size, quant=quant)
        vectors = part_matrix(texts, record.name)
        return {"pooling": "part", "part": record.name, "part_sha256": record.sha256,
                "linear": methods.fit_linear(vectors, y, n_labels, methods.C_PROBE),
                "training": {**asdict(self.settings), "pairs": count}}


def part_matrix(texts: list[str], part: str) -> np.ndarray:
    """Sentence vectors of ``texts`` from the engine of the registered model ``part``."""
    from ..deciders.features import part_vectors_flow
    from .passes import without_chat_engine

    return np.asarray(without_chat_engine(part_vectors_flow(texts, part)))
