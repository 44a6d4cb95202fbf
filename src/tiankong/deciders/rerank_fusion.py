"""Learned rerank fusion at run time: features of a query's candidates → calibrated P(relevant).

A rerank decider (``task: "rerank"``) is a logistic regression over per-candidate features computed within the
query's candidate list: BM25 (as scored, relative to the best, z-scored, whether it matched a query word at all,
how much lexical evidence the list has), and — when the embedding part read the text — its cosine (as scored,
z-scored, distance to the best, spread of the list), and each per-candidate score times the list's lexical
evidence and times its cosine spread. Query-level features let one model learn *which part to trust
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
_PER_CANDIDATE = ("bm25_rel", "bm25_z", "bm25_hit", "cos", "cos_z", "cos_gap")
# the columns of the first weight sets (decider files tuned before 2026-12-06 name these and are still read)
FIRST_WITH_EMBEDDING = ("bm25_rel", "bm25_z", "bm25_hit", "bm25_max_log", "cos", "cos_z", "cos_gap", "cos_spread",
                        "bm25_rel_x_max", "cos_z_x_nolex")
# every per-candidate feature also times the list's lexical evidence and its cosine spread: the weight a part gets
# moves with how much the list says about it (dev CV, benchmarks/results/retrieval/fusion-features-2026-12-06.txt:
# ACLSum 0.747 → 0.787, chatterbot-en 0.882 → 0.879, chatterbot-zh 0.341 → 0.348 nDCG@10)
WITH_EMBEDDING = (*FIRST_WITH_EMBEDDING, *(f"{n}_x_lex" for n in _PER_CANDIDATE),
                  *(f"{n}_x_spread" for n in _PER_CANDIDATE), "bm25_z_x_cos_z")
BM25_ONLY = FIRST_WITH_EMBEDDING[:4]


def _z(x: np.ndarray) -> np.ndarray:
    """z-scores within the list, clipped to ±3: a nearly flat list (a query nothing answers) must not turn float
    noise into a confident probability — an embedding's cosines differ by ~1e-5 from batch to batch, so a spread
    under ``FLAT`` is no spread."""
    import numpy as np

    spread = float(x.std())
    return np.clip((x - x.mean()) / spread, -3.0, 3.0) if spread > FLAT else np.zeros_like(x)


#: a list whose scores spread less than this is flat (``_z``): well above the engine's batch-to-batch float noise
FLAT = 1e-4


def fusion_features(bm25: Sequence[float], cosine: Sequence[float] | None,
                    names: Sequence[str] | None = None) -> np.ndarray:
    """``(n, len(names))``; ``names`` default: ``WITH_EMBEDDING`` with cosines, else ``BM25_ONLY``."""
    import numpy as np

    bm = np.asarray(bm25, dtype=float)
    top = float(bm.max()) if bm.size and bm.max() > 0 else 0.0
    lexical = np.log1p(top)
    col: dict[str, np.ndarray] = {"bm25_rel": bm / top if top else np.zeros_like(bm), "bm25_z": _z(bm),
                                  "bm25_hit": (bm > 0).astype(float), "bm25_max_log": np.full_like(bm, lexical)}
    if cosine is not None:
        cs = np.asarray(cosine, dtype=float)
        spread = float(cs.max() - np.median(cs)) if cs.size else 0.0
        cos_z = _z(cs)
        col |= {"cos": cs, "cos_z": cos_z, "cos_gap": cs - cs.max() if cs.size else cs,
                "cos_spread": np.full_like(cs, spread), "bm25_rel_x_max": col["bm25_rel"] * lexical,
                "cos_z_x_nolex": cos_z / (1.0 + lexical)}
        for n in _PER_CANDIDATE:
            col[f"{n}_x_lex"], col[f"{n}_x_spread"] = col[n] * lexical, col[n] * spread
        col["bm25_z_x_cos_z"] = col["bm25_z"] * col["cos_z"]
    wanted = names if names is not None else (WITH_EMBEDDING if cosine is not None else BM25_ONLY)
    missing = [n for n in wanted if n not in col]
    if missing:
        raise ConfigError(f"unknown rerank features {missing}", hint="tune it again with `tiankong tune rerank`")
    return np.stack([col[n] for n in wanted], axis=1) if bm.size else np.zeros((0, len(wanted)))


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
    return state_probabilities(decider.state, bm25, cosine, part, ref=decider.ref)


def state_probabilities(state: dict[str, Any], bm25: Sequence[float], cosine: Sequence[float] | None,
                        part: str = "", ref: str = "rerank") -> list[float]:
    """The same from a decider's state (``weights_key``'s weight set over the columns the state names)."""
    key = weights_key(state, part, cosine is not None)
    weights: dict[str, Any] = state.get(key) or {}
    if not weights:
        raise ConfigError(f"decider {ref} has no weights for {key.replace('_', ' ')}",
                          hint="tune it again with `tiankong tune rerank`")
    return probabilities(weights, bm25, cosine,
                         state.get("features_with_embedding" if cosine is not None else "features_bm25_only"))


def probabilities(weights: dict[str, Any], bm25: Sequence[float], cosine: Sequence[float] | None,
                  names: Sequence[str] | None = None) -> list[float]:
    """P(relevant) of every candidate under one weight set (``coef``, ``intercept``) over ``fusion_features`` (the
    columns ``names`` it was fitted with; a decider file without names has the first columns)."""
    import numpy as np

    if names is None and cosine is not None and len(weights["coef"]) == len(FIRST_WITH_EMBEDDING):
        names = FIRST_WITH_EMBEDDING
    features = fusion_features(bm25, cosine, names)
    if features.shape[1] != len(weights["coef"]):
        raise ConfigError(f"a rerank weight set has {len(weights['coef'])} weights for {features.shape[1]} features",
                          hint="tune it again with `tiankong tune rerank`")
    logits = features @ np.asarray(weights["coef"], dtype=float) + float(weights["intercept"])
    return [float(p) for p in 1.0 / (1.0 + np.exp(-logits))]


def fit_weights(features: np.ndarray, relevant: np.ndarray, c: float = 1.0) -> dict[str, Any]:
    """Logistic regression weights (scikit-learn, imported here: fitting only)."""
    from sklearn.linear_model import LogisticRegression

    model = LogisticRegression(C=c, max_iter=2000).fit(features, relevant)
    return {"coef": [float(x) for x in model.coef_[0]], "intercept": float(model.intercept_[0])}
