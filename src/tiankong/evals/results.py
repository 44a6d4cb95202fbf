"""The result of one eval run (one model over one set): per-item outputs and scores, speed, memory.

Written by ``eval run`` as ``OUT/<model>.json``; read by ``eval compare`` and ``eval report``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import ConfigError

KIND = "tiankong.eval.run"


class ItemResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    task: str
    scorer: str
    tags: list[str] = Field(default_factory=list)
    output: Any = None
    text: str = ""
    score: float = 0.0
    correct: bool = False
    error: str | None = None
    completion_tokens: int = 0
    cached: bool = False


class ModelInfo(BaseModel):
    name: str
    path: str
    sha256: str
    bytes: int


class Speed(BaseModel):
    """Engine work that produced the outputs (from the batch reports of the runs that made them)."""

    items: int = 0
    elapsed_s: float = 0.0
    completion_tokens: int = 0
    prompt_tokens: int = 0

    @property
    def items_per_s(self) -> float:
        return self.items / self.elapsed_s if self.elapsed_s else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.completion_tokens / self.elapsed_s if self.elapsed_s else 0.0

    @property
    def seconds_per_item(self) -> float:
        return self.elapsed_s / self.items if self.items else 0.0


class TagScore(BaseModel):
    n: int
    correct: int

    @property
    def accuracy(self) -> float:
        return self.correct / self.n if self.n else 0.0


class EvalRun(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: str = KIND
    set_path: str
    set_sha256: str
    model: ModelInfo
    params: dict[str, Any]
    items: list[ItemResult]
    speed: Speed
    peak_rss_bytes: int | None = None
    created_at: str = ""

    @property
    def accuracy(self) -> float:
        return sum(r.correct for r in self.items) / len(self.items) if self.items else 0.0

    @property
    def mean_score(self) -> float:
        return sum(r.score for r in self.items) / len(self.items) if self.items else 0.0

    @property
    def failed(self) -> int:
        return sum(r.error is not None for r in self.items)

    @property
    def cached(self) -> int:
        return sum(r.cached for r in self.items)

    def per_tag(self) -> dict[str, TagScore]:
        tags: dict[str, TagScore] = {}
        for result in self.items:
            for tag in result.tags or ["(untagged)"]:
                entry = tags.setdefault(tag, TagScore(n=0, correct=0))
                entry.n += 1
                entry.correct += result.correct
        return dict(sorted(tags.items()))

    def summary(self) -> dict[str, Any]:
        return {
            "model": self.model.name, "set": self.set_path, "items": len(self.items),
            "accuracy": round(self.accuracy, 4), "mean_score": round(self.mean_score, 4), "failed": self.failed,
            "cached": self.cached, "items_per_s": round(self.speed.items_per_s, 3),
            "tokens_per_s": round(self.speed.tokens_per_s, 2), "peak_rss_bytes": self.peak_rss_bytes,
            "model_bytes": self.model.bytes,
            "per_tag": {tag: round(s.accuracy, 4) for tag, s in self.per_tag().items()},
        }


def write_run(run: EvalRun, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(run.model_dump(mode="json"), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(path)


def read_run(path: str | Path) -> EvalRun:
    file = Path(path)
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"cannot read the eval run {file}: {exc}",
                          hint="give a file written by `tiankong eval run` (OUT/<model>.json)") from None
    if not isinstance(data, dict) or data.get("kind") != KIND:
        raise ConfigError(f"{file} is not an eval run", hint="give a file written by `tiankong eval run`")
    try:
        run = EvalRun.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"the eval run {file} is damaged: {exc.errors()[0]['msg']}",
                          hint="run `tiankong eval run` again") from None
    if not run.items:  # compare divided by the item count (an internal error)
        raise ConfigError(f"the eval run {file} has no items", hint="run `tiankong eval run` again")
    return run


def read_runs(paths: list[str | Path]) -> list[EvalRun]:
    """Runs from files and folders (a folder: every ``*.json`` run in it, sorted by name)."""
    runs: list[EvalRun] = []
    for path in paths:
        file = Path(path)
        if file.is_dir():
            found = sorted(p for p in file.glob("*.json") if not p.name.endswith(".tmp"))
            if not found:
                raise ConfigError(f"no eval runs in the folder {file}", hint="run `tiankong eval run --out DIR`")
            runs += [read_run(p) for p in found]
        else:
            runs.append(read_run(file))
    return runs
