"""Decider methods: fit on features of labelled texts, predict label probabilities; state as plain JSON.

scikit-learn does the fitting (TF-IDF, logistic regression, stacking's inner cross-validation). A fitted
state is stored as JSON numbers and vocabularies, never as pickle: a decider file from someone else cannot
run code when it is loaded. Prediction from that state is a few lines of numpy (a linear model's softmax).

Methods (label order is the decider's ``labels``; every ``predict`` returns an ``(n, len(labels))`` array):

* ``tfidf`` – word 1–2-grams plus character 2–4-grams (works for Chinese, which has no spaces), sublinear TF,
  logistic regression. Needs no engine: the classical baseline, and a stacking feature.
* ``tfidf-rules`` – the same plus one column per prompt-injection heuristic (the shipped ``guard``).
* ``probe-mean`` / ``probe-last`` – logistic regression on the engine's pooled embeddings (one forward pass).
* ``zeroshot`` – the model's label probabilities for verbalised labels, divided by the probabilities it gives a
  content-free input (contextual calibration); uses no examples at all.
* ``setfit`` (trained in ``tuning/setfit.py``) – logistic regression on the vectors of the embedding part after a
  SetFit-style contrastive fine-tune on the examples (its own registered model; no chat engine).
* ``stack`` – logistic regression over the out-of-fold log-probabilities of ``tfidf`` and a probe.
* ``fewshot`` (scored in ``tune.py``) – the k most similar examples as earlier turns, then label probabilities.
* ``lora`` (``adapter.py``) – a LoRA fine-tune of the chat model answering with the label's word.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold

from .rules import RULES

#: inverse regularisation strengths, chosen on the development corpora (docs/deciders.md), not on test data
C_TEXT = 20.0
C_PROBE = 4.0
C_META = 1.0
MAX_VOCABULARY = 30000
_WORD = {"analyzer": "word", "ngram_range": (1, 2), "sublinear_tf": True, "min_df": 1,
         "token_pattern": r"(?u)\b\w+\b", "lowercase": True}
_CHAR = {"analyzer": "char_wb", "ngram_range": (2, 4), "sublinear_tf": True, "min_df": 1, "lowercase": True}

LOCAL = ("tfidf", "tfidf-rules")
PROBES = ("probe-mean", "probe-last")
#: a probe on the retrieval part's sentence vectors (``all-minilm-l6-v2``): no chat-engine pass, the part's own engine
PART_PROBE = "probe-part"
#: a probe on how alike the two halves of a dedupe pair text are (``dedupe/pairs.py``): the part's engine only
PAIR_PROBE = "probe-pair"
#: a probe on a fine-tuned copy of the retrieval part (``tuning/setfit.py``): the fine-tuned part's engine only
SETFIT = "setfit"


@dataclass
class FeatureSet:
    """Per-text inputs: the texts, pooled embeddings (``pooling → (n, d)``), zero-shot probabilities."""

    texts: list[str]
    embeddings: dict[str, np.ndarray] = field(default_factory=dict)
    zeroshot: np.ndarray | None = None

    def take(self, rows: np.ndarray | list[int]) -> FeatureSet:
        index = list(rows)
        return FeatureSet([self.texts[i] for i in index], {k: v[index] for k, v in self.embeddings.items()},
                          None if self.zeroshot is None else self.zeroshot[index])


# --- linear models as JSON ----------------------------------------------------------------------------------

def fit_linear(x: Any, y: np.ndarray, n_labels: int, c: float) -> dict[str, Any]:
    model = LogisticRegression(C=c, max_iter=3000)
    model.fit(x, y)
    coef = np.zeros((n_labels, x.shape[1]))
    intercept = np.zeros(n_labels)
    if len(model.classes_) == 2 and n_labels >= 2:  # sklearn keeps one row for two classes: expand to two
        a, b = (int(k) for k in model.classes_)
        coef[b], intercept[b] = model.coef_[0], model.intercept_[0]
        missing = [k for k in range(n_labels) if k not in (a, b)]
    else:
        for row, k in enumerate(model.classes_):
            coef[int(k)], intercept[int(k)] = model.coef_[row], model.intercept_[row]
        missing = [k for k in range(n_labels) if k not in set(int(c) for c in model.classes_)]
    intercept[missing] = -1e4  # a label never seen in training is never predicted
    return {"coef": coef.round(5).tolist(), "intercept": intercept.round(5).tolist()}


def predict_linear(state: dict[str, Any], x: Any) -> np.ndarray:
    coef = np.asarray(state["coef"], dtype=np.float64)
    logits = np.asarray(x @ coef.T) + np.asarray(state["intercept"], dtype=np.float64)
    logits -= logits.max(axis=1, keepdims=True)
    weights = np.exp(logits)
    return weights / weights.sum(axis=1, keepdims=True)  # type: ignore[no-any-return]


# --- tf-idf -------------------------------------------------------------------------------------------------

def _vectorizer_state(vectorizer: TfidfVectorizer) -> dict[str, Any]:
    vocabulary = {str(k): int(v) for k, v in vectorizer.vocabulary_.items()}
    return {"vocabulary": vocabulary, "idf": np.asarray(vectorizer.idf_).round(6).tolist()}


def _vectorizer(params: dict[str, Any], state: dict[str, Any]) -> TfidfVectorizer:
    vectorizer = TfidfVectorizer(vocabulary=state["vocabulary"], **params)
    vectorizer.idf_ = np.asarray(state["idf"], dtype=np.float64)
    return vectorizer


def _script(char: str) -> str | None:
    if "\u4e00" <= char <= "\u9fff" or "\u3400" <= char <= "\u4dbf":
        return "Chinese"
    if char.isascii() and char.isalpha():
        return "Latin"
    return None


def unseen_script(state: dict[str, Any], text: str) -> str | None:
    """The script (Chinese, Latin) most of ``text``'s letters are in when the TF-IDF decider's character
    vocabulary holds none of it: its examples had no such text, so its answer is the prior alone (an English
    decider answered Chinese tickets with its majority label and no word of it)."""
    counts: dict[str, int] = {}
    for char in text:
        if (script := _script(char)) is not None:
            counts[script] = counts.get(script, 0) + 1
    if not counts:
        return None
    script, count = max(counts.items(), key=lambda kv: kv[1])
    if count * 2 <= sum(counts.values()):
        return None
    return None if script in _scripts_of(state["char"]["vocabulary"]) else script


#: the scripts of a vocabulary, by the vocabulary's identity (a 30,000-gram vocabulary took 18 ms a call)
_SCRIPTS: dict[int, tuple[dict[str, int], frozenset[str | None]]] = {}


def _scripts_of(vocabulary: dict[str, int]) -> frozenset[str | None]:
    known = _SCRIPTS.get(id(vocabulary))
    if known is not None and known[0] is vocabulary:
        return known[1]
    scripts = frozenset(_script(c) for gram in vocabulary for c in gram)
    if len(_SCRIPTS) >= 64:
        _SCRIPTS.clear()
    _SCRIPTS[id(vocabulary)] = (vocabulary, scripts)
    return scripts


def rule_columns(texts: list[str]) -> Any:
    """One 0/1 column per injection heuristic (``rules.RULES``)."""
    return sp.csr_matrix([[1.0 if pattern.search(t) else 0.0 for _, _, pattern in RULES] for t in texts])


def tfidf_matrix(state: dict[str, Any], texts: list[str]) -> Any:
    parts = [_vectorizer(_WORD, state["word"]).transform(texts), _vectorizer(_CHAR, state["char"]).transform(texts)]
    if state.get("rules"):
        parts.append(rule_columns(texts))
    return sp.hstack(parts).tocsr()


def fit_tfidf(features: FeatureSet, y: np.ndarray, n_labels: int, rules: bool = False) -> dict[str, Any]:
    word = TfidfVectorizer(max_features=MAX_VOCABULARY, **_WORD).fit(features.texts)
    char = TfidfVectorizer(max_features=MAX_VOCABULARY, **_CHAR).fit(features.texts)
    state: dict[str, Any] = {"word": _vectorizer_state(word), "char": _vectorizer_state(char), "rules": rules}
    state["linear"] = fit_linear(tfidf_matrix(state, features.texts), y, n_labels, C_TEXT)
    return state


# --- the methods --------------------------------------------------------------------------------------------

def fit(method: str, features: FeatureSet, y: np.ndarray, n_labels: int,
        prior: list[float] | None = None) -> dict[str, Any]:
    """Fitted state of ``method`` on ``features`` with label indices ``y``."""
    if method in ("tfidf", "tfidf-rules"):
        return fit_tfidf(features, y, n_labels, rules=method == "tfidf-rules")
    if method == PAIR_PROBE:  # its columns stored: a later version's added column leaves this decider as it was
        from ..dedupe.pairs import COLUMNS, pair_part  # noqa: PLC0415 (loaded only by pair deciders)

        matrix = features.embeddings["pair"]
        # the part its cosines came from, read again at use; None when none answered (not installed): no cosine
        part = pair_part(features.texts) if matrix.size and matrix[:, 0].any() else None
        return {"pooling": "pair", "columns": list(COLUMNS[: matrix.shape[1]]), "part": part,
                "linear": fit_linear(matrix, y, n_labels, C_PROBE)}
    if method in PROBES or method == PART_PROBE:
        pooling = method.split("-", 1)[1]
        return {"pooling": pooling, "linear": fit_linear(features.embeddings[pooling], y, n_labels, C_PROBE)}
    if method == "zeroshot":
        return {"prior": list(prior) if prior is not None else [1.0 / n_labels] * n_labels}
    if method == "stack":
        return _fit_stack(features, y, n_labels)
    raise ValueError(f"unknown method {method!r}")


def predict(method: str, state: dict[str, Any], features: FeatureSet) -> np.ndarray:
    if method in ("tfidf", "tfidf-rules"):
        return predict_linear(state["linear"], tfidf_matrix(state, features.texts))
    if method == PAIR_PROBE:
        from ..dedupe.pairs import select  # noqa: PLC0415

        return predict_linear(state["linear"], select(features.embeddings["pair"], state.get("columns")))
    if method in PROBES or method in (PART_PROBE, SETFIT):
        return predict_linear(state["linear"], features.embeddings[state["pooling"]])
    if method == "zeroshot":
        assert features.zeroshot is not None
        return calibrate(features.zeroshot, np.asarray(state["prior"]))
    if method == "stack":
        return _predict_stack(state, features)
    raise ValueError(f"unknown method {method!r}")


def calibrate(probabilities: np.ndarray, prior: np.ndarray) -> np.ndarray:
    weights = probabilities / np.maximum(prior, 1e-6)
    return weights / weights.sum(axis=1, keepdims=True)  # type: ignore[no-any-return]


def stack_bases(features: FeatureSet) -> list[str]:
    return ["tfidf", *(f"probe-{p}" for p in ("mean",) if p in features.embeddings)]


def _meta_features(state: dict[str, Any], features: FeatureSet) -> np.ndarray:
    parts = [np.log(np.clip(predict(name, base, features), 1e-6, 1.0)) for name, base in state["bases"].items()]
    return np.hstack(parts)


def _predict_stack(state: dict[str, Any], features: FeatureSet) -> np.ndarray:
    if state["meta"] is None:  # too few examples per label for an inner CV: the bases' mean log-probability
        logs = np.mean([np.log(np.clip(predict(n, b, features), 1e-6, 1.0)) for n, b in state["bases"].items()],
                       axis=0)
        weights = np.exp(logs - logs.max(axis=1, keepdims=True))
        return weights / weights.sum(axis=1, keepdims=True)  # type: ignore[no-any-return]
    return predict_linear(state["meta"], _meta_features(state, features))


def _fit_stack(features: FeatureSet, y: np.ndarray, n_labels: int) -> dict[str, Any]:
    bases = stack_bases(features)
    present = np.bincount(y)
    folds = min(5, int(present[present > 0].min()))
    if folds < 2:
        return {"bases": {name: fit(name, features, y, n_labels) for name in bases}, "meta": None}
    out_of_fold = {name: np.zeros((len(y), n_labels)) for name in bases}
    for train, test in StratifiedKFold(folds, shuffle=True, random_state=0).split(np.zeros(len(y)), y):
        inner, rest = features.take(train), features.take(test)
        for name in bases:
            out_of_fold[name][test] = predict(name, fit(name, inner, y[train], n_labels), rest)
    meta_x = np.hstack([np.log(np.clip(out_of_fold[name], 1e-6, 1.0)) for name in bases])
    state = {"bases": {name: fit(name, features, y, n_labels) for name in bases}}
    state["meta"] = fit_linear(meta_x, y, n_labels, C_META)
    return state


def needs_engine(method: str, state: dict[str, Any] | None = None) -> bool:
    return method in ("zeroshot", "fewshot", "lora") or needs_embeddings(method, state)


def needs_embeddings(method: str, state: dict[str, Any] | None = None) -> bool:
    if method in PROBES:
        return True
    if method == "stack":
        return state is None or any(name in PROBES for name in state["bases"])
    return False


# --- few-shot: the most similar examples -------------------------------------------------------------------

def fit_index(features: FeatureSet, y: np.ndarray, words: list[str]) -> dict[str, Any]:
    """The examples and a word TF-IDF over them, to find the most similar ones for a new text."""
    word = TfidfVectorizer(max_features=MAX_VOCABULARY, **_WORD).fit(features.texts)
    return {"texts": [t[:600] for t in features.texts], "answers": [words[int(k)] for k in y],
            "word": _vectorizer_state(word)}


def neighbour_shots(index: dict[str, Any], text: str, k: int) -> list[tuple[str, str]]:
    """The ``k`` most similar examples (cosine of TF-IDF), least similar first so the closest is nearest."""
    vectorizer = _vectorizer(_WORD, index["word"])
    similarity = (vectorizer.transform(index["texts"]) @ vectorizer.transform([text]).T).toarray().ravel()
    order = np.argsort(-similarity, kind="stable")[:k][::-1]
    return [(index["texts"][i], index["answers"][i]) for i in order]
