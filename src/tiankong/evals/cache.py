"""The eval cache: batch-worker output files keyed by (model file sha256, parameters, item request).

Layout under ``<user cache dir>/evals/<model sha256[:16]>-<params hash[:12]>/``:

* ``<group>.jsonl`` (+ ``.errors.jsonl``, ``.job.json``, ``.report.json``) — the batch output of one group of
  items that share a task configuration (same task, labels, schema …; chat items form one OpenAI-batch
  group). The batch record id is the hash of the item's request, so an item is looked up by what it asks,
  not by its id, and the batch worker's exactly-once resume is the cache: a run that was killed continues
  where it stopped, a finished run answers from these files without starting an engine.
* ``<group>.input.jsonl`` — the records of the last run (only the ones that were missing).
* ``stats.json`` — per group: items, seconds, tokens of the engine runs that produced the outputs; the
  engine's peak RSS.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..batch import BatchReport, OutputPaths
from ..errors import ConfigError
from .format import EvalItem, cache_key
from .results import Speed


@dataclass
class Group:
    """Items that run as one batch job (the same task configuration)."""

    key: str
    openai: bool
    job: dict[str, Any]
    records: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass
class Answer:
    output: Any = None
    error: str | None = None
    completion_tokens: int = 0


def item_key(model_sha256: str, params: dict[str, Any], item: EvalItem) -> str:
    return cache_key("item", model_sha256, params, item.request())


def group_for(item: EvalItem, key: str, seed: int) -> tuple[dict[str, Any], bool, dict[str, Any]]:
    """(batch job keys, OpenAI-batch format?, input record) of one item."""
    request = item.request()
    if item.task != "chat":
        job = {name: value for name, value in request.items() if name != "input"}
        if "json_schema" in job:
            job["schema"] = job.pop("json_schema")
        return job, False, {"id": key, "text": request["input"]}
    body: dict[str, Any] = {"messages": item.messages(), "max_tokens": item.max_tokens, "temperature": 0,
                            "seed": seed}
    if item.json_schema is not None:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "answer",
                                                                          "schema": item.json_schema}}
    record = {"custom_id": key, "method": "POST", "url": "/v1/chat/completions", "body": body}
    return {"format": "openai"}, True, record


class ModelCache:
    """The cache directory of one (model, parameters) pair."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def output(self, group: Group) -> Path:
        return self.root / f"{group.key[:20]}.jsonl"

    def input(self, group: Group) -> Path:
        return self.root / f"{group.key[:20]}.input.jsonl"

    def answers(self, group: Group) -> dict[str, Answer]:
        """Finished and failed items of a group by item key (an answer wins over an earlier failure)."""
        paths = OutputPaths(self.output(group))
        found: dict[str, Answer] = {}
        for record in _lines(paths.errors):
            key = str(record.get("custom_id") or record.get("id"))
            error = record.get("error") or {}
            found[key] = Answer(error=str(error.get("message") or error) if isinstance(error, dict) else str(error))
        for record in _lines(paths.output):
            if group.openai:
                found[str(record.get("custom_id"))] = _openai_answer(record)
            else:
                usage = record.get("usage") or {}
                found[str(record.get("id"))] = Answer(record.get("result"),
                                                      completion_tokens=int(usage.get("completion_tokens") or 0))
        return found

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Exclusive use of this cache directory while an engine fills it (a second run is refused)."""
        self.root.mkdir(parents=True, exist_ok=True)
        with (self.root / ".lock").open("a+") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                raise ConfigError(f"another `tiankong eval run` is filling the cache {self.root} right now",
                                  hint="wait for it to finish (then this run is instant), or pass --cache-dir") \
                    from None
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def write_input(self, group: Group, keys: list[str]) -> Path:
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.input(group)
        text = "".join(json.dumps(group.records[key], ensure_ascii=False) + "\n" for key in keys)
        path.write_text(text, encoding="utf-8")
        return path

    # --- stats ------------------------------------------------------------------------------------

    def _stats(self) -> dict[str, Any]:
        try:
            data = json.loads((self.root / "stats.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {"groups": {}}
        return data if isinstance(data, dict) and isinstance(data.get("groups"), dict) else {"groups": {}}

    def add_report(self, group: Group, report: BatchReport) -> None:
        stats = self._stats()
        entry = Speed.model_validate(stats["groups"].get(group.key) or {})
        entry.items += report.processed + report.failed_this_run
        entry.elapsed_s += report.elapsed_s
        entry.completion_tokens += report.tokens.get("completion", 0)
        entry.prompt_tokens += report.tokens.get("prompt", 0)
        stats["groups"][group.key] = entry.model_dump()
        self._save(stats)

    def set_peak_rss(self, value: int | None) -> None:
        if value:
            stats = self._stats()
            stats["peak_rss_bytes"] = value
            self._save(stats)

    def speed(self, groups: list[Group]) -> tuple[Speed, int | None]:
        stats = self._stats()
        total = Speed()
        for group in groups:
            entry = Speed.model_validate(stats["groups"].get(group.key) or {})
            total.items += entry.items
            total.elapsed_s += entry.elapsed_s
            total.completion_tokens += entry.completion_tokens
            total.prompt_tokens += entry.prompt_tokens
        total.elapsed_s = round(total.elapsed_s, 3)
        rss = stats.get("peak_rss_bytes")
        return total, rss if isinstance(rss, int) else None

    def _save(self, stats: dict[str, Any]) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / "stats.json.tmp"
        tmp.write_text(json.dumps(stats, indent=1), encoding="utf-8")
        tmp.replace(self.root / "stats.json")


def _openai_answer(record: dict[str, Any]) -> Answer:
    body = ((record.get("response") or {}).get("body")) or {}
    choices = body.get("choices") or [{}]
    content = (choices[0].get("message") or {}).get("content")
    usage = body.get("usage") or {}
    return Answer(content, completion_tokens=int(usage.get("completion_tokens") or 0))


def _lines(path: Path) -> list[dict[str, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return []
    records = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a torn last line: the next batch run repairs it
        if isinstance(record, dict):
            records.append(record)
    return records
