"""Learned rerank fusion at run time: features of a query's candidates → calibrated P(relevant).

A rerank decider (``task: "rerank"``) is a logistic regression over per-candidate features computed within the
query's candidate list: BM25 (as scored, relative to the best, z-scored, whether it matched a query word at all,
how much lexical evidence the list has), and — when the embedding part read the text — its cosine (as scored,
z-scored, distance to the best, spread of the list). Query-level features let one model learn *which part to trust
for this query* (a list in which BM25 finds no query word should be ranked by meaning, a list with strong word
overlap by BM25), which reciprocal-rank fusion cannot. Weight sets are kept with the embedding part and without it
(the part not installed, or not reading the language), and one per part that read enough of the examples
(``with_embedding:<part>``): each part's cosines have their own scale (multilingual-e5's crowd near 0.8–0.95,
MiniLM's spread over 0–0.8), so one weight set over both would misread one of them. Pure numpy: nothing here does
I/O.

Methods a rerank decider may hold: ``lr-fusion`` (the weights), or one of ``bm25``, ``embedding``, ``rrf`` when its
cross-validation chose a single part (the one-standard-error rule picks the simplest method within one standard
error of the best).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from .registry import Decider

if TYPE_CHECKING:  # numpy loads when a rerank runs, not when the CLI starts (tests/engine/test_cli_startup.py)
    import numpy as np

FUSION_METHODS = ("bm25", "embedding", "rrf", "lr-fusion")
WITH_EMBEDDING = ("bm25_rel", "bm25_z", "bm25_hit", "bm25_max_log", "cos", "cos_z", "cos_gap", "cos_spread",
                  "bm25_rel_x_max", "cos_z_x_nolex")
BM25_ONLY = WITH_EMBEDDING[:4]


def _z(x: np.ndarray) -> np.ndarray:
    """z-scores within the list, clipped to ±3: a nearly flat list (a query nothing answers) must not turn float
    noise into a confident probability."""
    import numpy as np

    spread = float(x.std())
    return np.clip((x - x.mean()) / spread, -3.0, 3.0) if spread > 1e-6 else np.zeros_like(x)


def fusion_features(bm25: Sequence[float], cosine: Sequence[float] | None) -> np.ndarray:
    """``(n, len(WITH_EMBEDDING))`` with cosines, else ``(n, len(BM25_ONLY))``."""
    import numpy as np

    bm = np.asarray(bm25, dtype=float)
    top = float(bm.max()) if bm.size and bm.max() > 0 else 0.0
    lexical = np.log1p(top)
    columns = [bm / top if top else np.zeros_like(bm), _z(bm), (bm > 0).astype(float), np.full_like(bm, lexical)]
    if cosine is not None:
        cs = np.asarray(cosine, dtype=float)
        columns += [cs, _z(cs), cs - cs.max(), np.full_like(cs, cs.max() - np.median(cs)),
                    columns[0] * lexical, _z(cs) / (1.0 + lexical)]
    return np.stack(columns, axis=1)


def check_rerank_decider(decider: Decider) -> Decider:
    if decider.task != "rerank" or decider.method not in FUSION_METHODS:
        raise ConfigError(f"decider {decider.ref} is a {decider.task} decider ({decider.method}), not a rerank one",
                          hint="make one with `tiankong tune rerank --data FILE --name NAME`")
    return decider


def weights_key(state: dict[str, Any], part: str, read: bool) -> str:
    """The weight set for cosines of ``part`` (its own when it has one, else the pooled one), or BM25's alone."""
    if not read:
        return "bm25_only"
    own = f"with_embedding:{part}"
    return own if part and own in state else "with_embedding"


def fused_probabilities(decider: Decider, bm25: Sequence[float], cosine: Sequence[float] | None,
                        part: str = "") -> list[float]:
    """P(relevant) of every candidate under an ``lr-fusion`` decider (the weight set that matches the parts;
    ``part``: the embedding part that gave ``cosine``)."""
    key = weights_key(decider.state, part, cosine is not None)
    weights: dict[str, Any] = decider.state.get(key) or {}
    if not weights:
        raise ConfigError(f"decider {decider.ref} has no weights for {key.replace('_', ' ')}",
                          hint="tune it again with `tiankong tune rerank`")
    return probabilities(weights, bm25, cosine)


def probabilities(weights: dict[str, Any], bm25: Sequence[float], cosine: Sequence[float] | None) -> list[float]:
    """P(relevant) of every candidate under one weight set (``coef``, ``intercept``) over ``fusion_features``."""
    import numpy as np

    features = fusion_features(bm25, cosine)
    logits = features @ np.asarray(weights["coef"], dtype=float) + float(weights["intercept"])
    return [float(p) for p in 1.0 / (1.0 + np.exp(-logits))]


def fit_weights(features: np.ndarray, relevant: np.ndarray, c: float = 1.0) -> dict[str, Any]:
    """Logistic regression weights (scikit-learn, imported here: fitting only)."""
    from sklearn.linear_model import LogisticRegression

    model = LogisticRegression(C=c, max_iter=2000).fit(features, relevant)
    return {"coef": [float(x) for x in model.coef_[0]], "intercept": float(model.intercept_[0])}
