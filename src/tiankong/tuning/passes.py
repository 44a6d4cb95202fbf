"""Engine passes of ``tune`` that survive real data: cached on disk, retried, and reported as they go.

* **Cache.** Every engine feature (a text's embeddings, its zero-shot label probabilities, its few-shot
  probabilities with given shots) is appended to ``<cache dir>/deciders/features/<model sha256>/<kind>.jsonl`` as
  soon as its chunk is read, keyed by the sha256 of the text (and of the words and shots that shaped it). A re-run
  on the same model — after a crash, a timeout, or with other methods — reads what is there and asks the engine
  only for the rest. A different model (another sha256) never shares a file.
* **Chunks.** A pass sends ``CHUNK`` texts at a time; the client keeps at most the engine's slots in flight
  (``client/sync.py`` ``_limited``), so no request waits in the engine's queue against its HTTP timeout.
* **Retry.** An engine call that fails for a passing reason (a timeout, a dropped connection, a 5xx) is sent again
  after 2, 4, 8 s (:func:`retrying`); a 4xx is the request's own fault and is not.
* **Progress.** After each chunk: the stage, items done of all, time spent and the time this stage has left (from
  this run's rate); its last chunk says how long the stage took (later stages have their own lines).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import ConfigError, ServerError, TransportError
from ..structured.combine import gather
from ..structured.flow import Flow

CHUNK = 8
RETRY_DELAYS_S = (2.0, 4.0, 8.0)
Runner = Callable[[Flow[Any]], Any]
Log = Callable[[str], None]


def text_key(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()


class FeatureCache:
    """Engine features of one model on disk, one JSONL file per kind, appended chunk by chunk."""

    def __init__(self, root: Path, model_sha256: str) -> None:
        self.dir = root / "deciders" / "features" / model_sha256

    def path(self, kind: str) -> Path:
        return self.dir / f"{kind}.jsonl"

    def load(self, kind: str) -> dict[str, Any]:
        found: dict[str, Any] = {}
        try:
            lines = self.path(kind).read_text(encoding="utf-8").splitlines()
        except OSError:
            return found
        for line in lines:
            try:
                row = json.loads(line)
                found[row["key"]] = row["value"]
            except (ValueError, KeyError, TypeError):
                continue  # a torn last line from a killed run: that item is read again
        return found

    def append(self, kind: str, rows: list[tuple[str, Any]]) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.path(kind)
        torn = path.exists() and path.stat().st_size > 0 and _last_byte(path) != b"\n"
        with path.open("a", encoding="utf-8") as handle:
            handle.write("\n" * torn + "".join(json.dumps({"key": k, "value": v}) + "\n" for k, v in rows))


def _last_byte(path: Path) -> bytes:
    with path.open("rb") as handle:
        handle.seek(-1, 2)
        return handle.read(1)


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def cached_pass(run: Runner, stage: str, items: list[tuple[str, Callable[[], Flow[Any]]]], *,
                cache: FeatureCache | None = None, kind: str = "", log: Log | None = None) -> list[Any]:
    """Each item's answer (``key``, a function making its flow), from the cache or the engine, in item order."""
    found = cache.load(kind) if cache is not None else {}
    missing = list(dict.fromkeys(key for key, _ in items if key not in found))
    makers = dict(items)
    total, cached = len(items), len(items) - sum(1 for key, _ in items if key not in found)
    started = time.monotonic()
    if log is not None and cached:
        log(f"{stage}: {cached}/{total} read from the cache")
    for start in range(0, len(missing), CHUNK):
        part = missing[start:start + CHUNK]
        answers = run(gather([makers[key]() for key in part]))
        for key, answer in zip(part, answers, strict=True):
            found[key] = answer
        if cache is not None:
            cache.append(kind, list(zip(part, answers, strict=True)))
        if log is not None:
            done = start + len(part)
            spent = time.monotonic() - started
            if done == len(missing):  # "about 0s left" read as the whole run's end while later stages remained
                log(f"{stage}: {total}/{total} done in {_duration(spent)}")
                continue
            left = spent / done * (len(missing) - done)
            log(f"{stage}: {cached + done}/{total} done, {_duration(spent)} spent, about {_duration(left)} left in "
                "this stage")
    return [found[key] for key, _ in items]


def passing(exc: Exception) -> bool:
    """A failure another try may not see: no answer at all, or the server's own 5xx."""
    if isinstance(exc, ServerError):
        return exc.status >= 500
    return isinstance(exc, TransportError)


def retrying(request: Callable[..., Any], log: Log | None = None,
             delays: tuple[float, ...] = RETRY_DELAYS_S) -> Callable[..., Any]:
    """``request`` sent again after each of ``delays`` while it fails for a passing reason (:func:`passing`)."""
    def send(method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        for delay in (*delays, None):
            try:
                return request(method, path, body)
            except TransportError as exc:
                if delay is None or not passing(exc):
                    raise
                if log is not None:
                    log(f"engine call {path} failed ({exc.one_line()[:120]}); again in {delay:.0f} s")
                time.sleep(delay)
        raise AssertionError("unreachable")

    return send


def without_chat_engine(flow: Flow[Any]) -> Any:
    """Run a flow that asks only the embedding part's engine (its calls never reach a chat engine: none is given)."""
    from ..structured.drivers import run_sync

    def no_engine(*_: Any) -> Any:
        raise ConfigError("this step reads the embedding part only, and asked a chat engine")

    return run_sync(flow, no_engine)
