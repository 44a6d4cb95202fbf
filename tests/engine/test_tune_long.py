"""``tune`` on real-sized data (issue 45): 200 texts of over 1,000 characters through a managed SmolLM2 engine —
engine features read chunk by chunk within the engine's slots, progress reported (stage, done, time left), cached on
disk per model sha256 so a re-run asks the engine for nothing it already has; passing failures are retried."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path

import pytest

from tiankong.errors import ServerError, TransportError
from tiankong.models import TEST_MODEL
from tiankong.structured.drivers import run_sync
from tiankong.structured.flow import Call, Flow
from tiankong.tuning import tune_classify
from tiankong.tuning.passes import FeatureCache, cached_pass, retrying

WORDS = {
    "billing": ["invoice", "refund", "charged twice", "payment", "credit card", "receipt", "subscription fee"],
    "bug": ["crash", "error message", "stack trace", "the app freezes", "button does nothing", "timeout", "exception"],
}
FILLER = ["I have been a customer for a long time and this is the first time I write to support.",
          "Please look into this as soon as you can, it is blocking my work this week.",
          "I tried again this morning after restarting my computer and nothing changed.",
          "My colleague saw the same thing on her account yesterday afternoon.",
          "Thank you in advance for your help, and sorry for the long message."]


def long_examples(path: Path, n: int = 200) -> Path:
    rng = random.Random(45)
    with path.open("w", encoding="utf-8") as handle:
        for i in range(n):
            label = "billing" if i % 2 else "bug"
            parts = [f"Ticket {i}."]
            while sum(len(p) for p in parts) < 1100:
                parts.append(rng.choice(FILLER))
                parts.append(f"It is about the {rng.choice(WORDS[label])}.")
            handle.write(json.dumps({"text": " ".join(parts), "label": label}) + "\n")
    return path


def test_tune_on_200_long_texts_reports_progress_and_resumes_from_its_cache(tmp_path: Path) -> None:
    data = long_examples(tmp_path / "long.jsonl")
    assert all(len(json.loads(line)["text"]) >= 1000 for line in data.read_text().splitlines())
    first: list[str] = []
    report = tune_classify(data, name="long", model=TEST_MODEL, methods=["tfidf", "probe-mean"], save=False,
                           log=first.append, cache_dir=tmp_path / "cache")
    assert {r.method for r in report.best_rows()} == {"tfidf", "probe-mean"}
    assert "left in this stage" in first[0] and first[-1].startswith("embeddings: 200/200 done in "), first
    assert sum(line.startswith("embeddings:") for line in first) >= 200 // 8  # a line per chunk
    cached = list((tmp_path / "cache" / "deciders" / "features").glob("*/embeddings-*.jsonl"))
    assert len(cached) == 1 and len(cached[0].read_text().splitlines()) == 200
    again: list[str] = []
    second = tune_classify(data, name="long", model=TEST_MODEL, methods=["tfidf", "probe-mean"], save=False,
                           log=again.append, cache_dir=tmp_path / "cache")
    assert "embeddings: 200/200 read from the cache" in again, again
    assert not any("done" in line for line in again if line.startswith("embeddings:")), again
    assert [r.accuracy for r in second.rows] == [r.accuracy for r in report.rows]


def test_a_passing_failure_is_retried_and_a_refusal_is_not() -> None:
    failures = [TransportError("ReadTimeout"), ServerError(503, "loading")]
    calls: list[str] = []

    def flaky(method: str, path: str, body: object = None) -> object:
        calls.append(path)
        if failures:
            raise failures.pop(0)
        return {"ok": True}

    assert retrying(flaky, delays=(0.0, 0.0, 0.0))("POST", "/embeddings", {}) == {"ok": True}
    assert len(calls) == 3

    def refused(method: str, path: str, body: object = None) -> object:
        calls.append("refused")
        raise ServerError(400, "bad request")

    with pytest.raises(ServerError):
        retrying(refused, delays=(0.0, 0.0))("POST", "/embeddings", {})
    assert calls.count("refused") == 1


def test_a_torn_cache_line_is_read_again(tmp_path: Path) -> None:
    cache = FeatureCache(tmp_path, "sha")
    cache.append("k", [("a", [1.0]), ("b", [2.0])])
    with cache.path("k").open("a") as handle:
        handle.write('{"key": "c", "val')  # a run killed mid-write
    assert cache.load("k") == {"a": [1.0], "b": [2.0]}
    asked: list[str] = []

    def engine(method: str, path: str, body: dict[str, str] | None = None) -> list[float]:
        asked.append(str((body or {})["content"]))
        return [3.0]

    def one(text: str) -> Callable[[], Flow[list[float]]]:
        def flow() -> Flow[list[float]]:
            (answer,) = yield [Call("POST", "/x", {"content": text})]
            return answer  # type: ignore[no-any-return]
        return flow

    found = cached_pass(lambda flow: run_sync(flow, engine), "test", [(k, one(k)) for k in ("a", "b", "c")],
                        cache=cache, kind="k")
    assert found == [[1.0], [2.0], [3.0]] and asked == ["c"]
    assert cache.load("k")["c"] == [3.0]
