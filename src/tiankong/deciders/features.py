"""What a decider reads from the engine, as sans-I/O flows: embeddings and label probabilities.

* Embeddings come from llama-server's native ``/embeddings`` endpoint on an engine started with
  ``--embeddings --pooling none`` (``EngineConfig(embeddings=True, pooling="none")``): it returns every
  token's final hidden state, and tiankong pools here (``mean`` and ``last``, then L2-normalised), so one
  forward pass gives both poolings and training and serving compute the same vector. An engine that pools
  itself returns one vector and is refused (its pooling cannot be checked).
* Label probabilities reuse ``choose_flow`` (exact constrained-decoding probabilities). The text goes first
  in the prompt, so several questions about one text share the engine's prefix cache.
* The engine's model is identified by ``/props``' ``model_path`` and the registry's sha256, so a decider
  trained on one model is never applied to another.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigError, ServerError, TiankongError
from ..structured.combine import gather
from ..structured.flow import Call, Flow, choose_flow
from ..structured.prompts import language

POOLINGS = ("mean", "last")
#: characters of a text given to the engine for features: within ``EMBEDDING_UBATCH`` tokens even for Chinese
MAX_CHARS = 1800

QUESTION = {
    "en": "Which one of these best describes the text above: {options}? Answer with one of them.",
    "zh": "以上文本属于哪一类：{options}？只回答其中一个。",
}


class DeciderEngineError(ConfigError):
    """The engine cannot give what the decider needs (embeddings off, another model, unverifiable model)."""


def _pool(vectors: list[list[float]]) -> dict[str, list[float]]:
    matrix = np.asarray(vectors, dtype=np.float64)
    pooled = {"mean": matrix.mean(axis=0), "last": matrix[-1]}
    return {name: (v / (np.linalg.norm(v) or 1.0)).tolist() for name, v in pooled.items()}


def _embedding_answer(answer: Any) -> dict[str, list[float]]:
    if isinstance(answer, ServerError) and answer.status in (400, 404, 501):
        raise DeciderEngineError(f"the engine gives no embeddings ({answer.message})",
                                 hint="start it with embeddings on: `tiankong serve --embeddings`, "
                                      "Client(model=…, embeddings=True), or engine.embeddings = true in the config")
    if isinstance(answer, TiankongError):
        raise answer
    rows = answer if isinstance(answer, list) else [answer]
    vectors = rows[0].get("embedding") if rows and isinstance(rows[0], dict) else None
    if not isinstance(vectors, list) or not vectors:
        raise DeciderEngineError("the engine's /embeddings answer has no vectors")
    if not isinstance(vectors[0], list):
        vectors = [vectors]
    if len(vectors) == 1:
        raise DeciderEngineError("the engine pools embeddings itself, so tiankong cannot check the pooling",
                                 hint="start llama-server with --embeddings --pooling none "
                                      "(tiankong's own engines do this when embeddings are on)")
    return _pool(vectors)


def embedding_flow(text: str) -> Flow[dict[str, list[float]]]:
    """Mean- and last-pooled, L2-normalised embedding of ``text`` (one forward pass)."""
    (answer,) = yield [Call("POST", "/embeddings", {"content": text[:MAX_CHARS]})]
    return _embedding_answer(answer)


def embeddings_flow(texts: list[str]) -> Flow[dict[str, np.ndarray]]:
    """``pooling → (n, d)`` embeddings of many texts, sent side by side (the driver spreads them over the slots)."""
    rows = yield from gather([embedding_flow(t) for t in texts])
    return {p: np.asarray([r[p] for r in rows]) for p in POOLINGS}


def label_messages(text: str, words: list[str],
                   shots: list[tuple[str, str]] | None = None) -> list[dict[str, Any]]:
    """Text first, then the question: shots become earlier turns in the same order."""
    lang = language(text)
    question = QUESTION[lang].format(options=", ".join(words))
    turns: list[dict[str, Any]] = []
    for shot_text, shot_word in shots or []:
        turns += [{"role": "user", "content": f"{shot_text[:600]}\n\n{question}"},
                  {"role": "assistant", "content": shot_word}]
    return [*turns, {"role": "user", "content": f"{text[:MAX_CHARS]}\n\n{question}"}]


def label_probability_flow(text: str, words: list[str],
                           shots: list[tuple[str, str]] | None = None) -> Flow[list[float]]:
    """P(word) for each verbalised label (in order) under label-constrained decoding."""
    scores = yield from choose_flow(label_messages(text, words, shots), words)
    return [float(scores[w]) for w in words]


_SHA_CACHE: dict[tuple[str, int, float], str] = {}


def model_sha256(path: str) -> str | None:
    """sha256 of a model file: from the registry's manifest when it is a registered model, else hashed once."""
    from ..models.registry import installed_models, sha256_file

    file = Path(path)
    if not file.is_file():
        return None
    stat = file.stat()
    key = (str(file.resolve()), stat.st_size, stat.st_mtime)
    if key not in _SHA_CACHE:
        known = {str(r.path.resolve()): r.sha256 for r in installed_models() if r.sha256}
        _SHA_CACHE[key] = known.get(key[0]) or sha256_file(file)
    return _SHA_CACHE[key]


def engine_model_flow() -> Flow[tuple[str, str | None]]:
    """(model path, sha256 or None when the file is not on this machine) of the engine behind the client."""
    (props,) = yield [Call("GET", "/props")]
    if isinstance(props, TiankongError):
        raise DeciderEngineError(f"cannot ask the engine which model it runs ({props})",
                                 hint="point the client at llama-server or the gateway's engine")
    path = str(props.get("model_path") or "") if isinstance(props, dict) else ""
    return path, (model_sha256(path) if path and os.path.exists(path) else None)


def part_vector_flow(text: str, part: str | None = None) -> Flow[list[float]]:
    """One text's sentence vector from a retrieval part (``probe-part``; default: the catalog's English one), cut
    to the part's context."""
    matrix = yield from part_vectors_flow([text], part)
    return [float(x) for x in matrix[0]]


def part_vectors_flow(texts: list[str], part: str | None = None) -> Flow[np.ndarray]:
    """``(n, d)`` sentence vectors of many texts from a retrieval part (default: the catalog's embedding model;
    ``setfit`` deciders name their fine-tuned copy)."""
    from ..models.catalog import EMBEDDING_MODEL
    from ..structured.part_flows import part_vectors

    name = part or EMBEDDING_MODEL
    vectors, reason = yield from part_vectors([t[:MAX_CHARS] for t in texts], name)
    if vectors is None:
        hint = f"tiankong models pull {name}" if not name.startswith("setfit-") else \
            "tune the decider again (tiankong tune classify --methods setfit) on this machine"
        raise DeciderEngineError(f"the embedding part gives no vectors ({reason})", hint=hint)
    return np.asarray(vectors)
