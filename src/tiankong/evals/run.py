"""``tiankong.evals.run_eval``: every item of a set through the batch worker, per model, at temperature 0.

Order of work: load and validate the set → resolve every model (installed?) and the engine → per model,
look every item up in the cache (model file sha256, parameters, item request) → start one engine for the
model only if something is missing → one batch job per group of items with the same task configuration
(``tiankong.batch.run``, the production code path: resumable, exactly once) → score → ``OUT/<model>.json``.

Determinism: one slot and one item in flight by default, the server's prompt cache off
(``--no-cache-prompt``), temperature 0 and a fixed seed — see docs/evals.md for why.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .. import paths
from ..batch import ProgressSink, make_job
from ..batch import run as run_batch
from ..engine.build import EngineBinary, locate_engine
from ..engine.flags import default_threads
from ..engine.launcher import launch
from ..engine.process import EngineProcess
from ..engine.settings import engine_config, engine_keys
from ..errors import ConfigError
from ..models import ModelRecord, resolve_installed
from .cache import Answer, Group, ModelCache, group_for, item_key
from .format import EvalItem, EvalSet, cache_key, load_set
from .results import EvalRun, ItemResult, ModelInfo, write_run
from .scorers import output_text, score

#: Bump when a change in tiankong would change outputs for the same model and parameters.
CACHE_VERSION = 1

Log = Callable[[str], None]


@dataclass
class EvalParams:
    """Engine and sampling parameters of a run (everything but ``threads`` and ``timeout_s`` is in the key)."""

    seed: int = 42
    ctx: int = 4096
    slots: int = 1
    threads: int | None = None
    timeout_s: float = 600.0
    llama_server: str | None = None
    cache_dir: Path | None = None
    retry_failed: bool = False

    def key(self, binary: EngineBinary) -> dict[str, Any]:
        return {"seed": self.seed, "ctx": self.ctx, "slots": self.slots, "cache_prompt": False, "temperature": 0,
                "engine": f"{binary.version}-{binary.commit}", "harness": CACHE_VERSION}


def run_eval(set_path: str | Path, models: list[str], *, out_dir: str | Path, params: EvalParams | None = None,
             log: Log | None = None, progress: Callable[[], ProgressSink | None] | None = None) -> list[EvalRun]:
    """Run the set on every model; writes and returns one ``EvalRun`` per model (in the order given)."""
    params = params or EvalParams()
    paths.check_folder(out_dir)  # before any item runs: a file there failed only at the end
    if params.cache_dir is not None:
        paths.check_folder(params.cache_dir, "--cache-dir")
    eval_set = load_set(set_path)
    records = _resolve(models)
    binary = locate_engine(params.llama_server)
    if params.slots < 1 or params.ctx < 64 or params.ctx % params.slots:
        raise ConfigError(f"ctx {params.ctx} must be ≥ 64 and divisible by slots {params.slots}")
    runs = []
    for record in records:
        run = _ModelRun(eval_set, record, binary, params, log or (lambda _: None), progress).go()
        write_run(run, Path(out_dir) / f"{slug(record.name)}.json")
        runs.append(run)
    return runs


def slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)


def _resolve(models: list[str]) -> list[ModelRecord]:
    if not models:
        raise ConfigError("no model given", hint="pass --model NAME (repeat it to compare models)")
    records = [resolve_installed(name) for name in models]  # ModelNotInstalled before any work
    names = [r.name for r in records]
    if len(set(names)) != len(names):
        raise ConfigError(f"a model is given twice: {', '.join(names)}")
    return records


class _ModelRun:
    def __init__(self, eval_set: EvalSet, record: ModelRecord, binary: EngineBinary, params: EvalParams, log: Log,
                 progress: Callable[[], ProgressSink | None] | None) -> None:
        self.set, self.record, self.binary, self.params, self.log = eval_set, record, binary, params, log
        self.progress = progress
        self.key_params = params.key(binary)
        root = (params.cache_dir or paths.cache_dir() / "evals")
        self.cache = ModelCache(root / f"{record.sha256[:16]}-{cache_key(self.key_params)[:12]}")
        self.groups: dict[str, Group] = {}
        self.item_keys: dict[str, tuple[Group, str]] = {}
        for item in eval_set.items:
            self._add(item)

    def _add(self, item: EvalItem) -> None:
        key = item_key(self.record.sha256, self.key_params, item)
        job, openai, record = group_for(item, key, self.params.seed)
        group_key = cache_key("group", job)
        group = self.groups.setdefault(group_key, Group(group_key, openai, job))
        group.records[key] = record
        self.item_keys[item.id] = (group, key)

    def go(self) -> EvalRun:
        answers = {g.key: self.cache.answers(g) for g in self.groups.values()}
        missing = {g.key: [k for k in g.records if self._needs_run(answers[g.key].get(k))]
                   for g in self.groups.values()}
        todo = sum(len(keys) for keys in missing.values())
        self.log(f"{self.record.name}: {len(self.set.items)} item(s), {len(self.set.items) - todo} from the cache")
        if todo:
            with self.cache.locked():
                self._run_engine(missing)
            answers = {g.key: self.cache.answers(g) for g in self.groups.values()}
        items = [self._result(item, answers, missing) for item in self.set.items]
        speed, rss = self.cache.speed(list(self.groups.values()))
        info = ModelInfo(name=self.record.name, path=str(self.record.path), sha256=self.record.sha256,
                         bytes=self.record.bytes)
        return EvalRun(set_path=self.set.path, set_sha256=self.set.sha256, model=info, params=self.key_params,
                       items=items, speed=speed, peak_rss_bytes=rss,
                       created_at=datetime.now(UTC).isoformat(timespec="seconds"))

    def _needs_run(self, answer: Answer | None) -> bool:
        return answer is None or (self.params.retry_failed and answer.error is not None)

    def _run_engine(self, missing: dict[str, list[str]]) -> None:
        params = self.params
        wanted = engine_keys(ctx=params.ctx, slots=params.slots, threads=params.threads or default_threads(),
                             extra_args=["--no-cache-prompt"], embeddings=self._needs_embeddings(), pooling="none",
                             lora=self._adapters())
        config = engine_config(wanted, self.record.path, alias=self.record.name, seed=params.seed)
        engine = launch(config, self.binary, start=False)
        self.log(f"{self.record.name}: starting the engine ({params.slots} slot(s), ctx {params.ctx})")
        engine.start()
        try:
            for group in self.groups.values():
                keys = missing[group.key]
                if keys:
                    self._run_group(group, keys, engine.url)
            self.cache.set_peak_rss(peak_rss(engine))
        finally:
            engine.stop()

    def _decider_needs(self) -> list[Any]:
        from ..deciders import engine_needs, load_decider

        return [engine_needs(load_decider(item.decider)) for item in self.set.items if item.decider]

    def _needs_embeddings(self) -> bool:
        return any(needs.embeddings for needs in self._decider_needs())

    def _adapters(self) -> list[str]:
        """The deciders' adapters (names or paths; ``engine_config`` checks each against the model)."""
        return list(dict.fromkeys(name for needs in self._decider_needs() for name in needs.adapters))

    def _run_group(self, group: Group, keys: list[str], url: str) -> None:
        label = group.job.get("task") or "chat"
        self.log(f"{self.record.name}: {label}: {len(keys)} item(s)")
        job = make_job(input=str(self.cache.write_input(group, keys)), output=str(self.cache.output(group)),
                       **group.job, url=[url], concurrency=self.params.slots, timeout_s=self.params.timeout_s,
                       engine_wait_s=60.0, fsync_every=1, retry_failed=self.params.retry_failed)
        report = run_batch(job, progress=self.progress() if self.progress else None)
        self.cache.add_report(group, report)

    def _result(self, item: EvalItem, answers: dict[str, dict[str, Answer]],
                missing: dict[str, list[str]]) -> ItemResult:
        group, key = self.item_keys[item.id]
        answer = answers[group.key].get(key) or Answer(error="no output (the run stopped before this item)")
        output = answer.output if answer.error is None else None
        if item.task == "chat" and item.json_schema is not None and isinstance(output, str):
            with contextlib.suppress(ValueError):
                output = json.loads(output)
        value = score(item, output)
        return ItemResult(id=item.id, task=item.task, scorer=str(item.scorer), tags=item.tags, output=output,
                          text=output_text(item, output), score=round(value, 4),
                          correct=answer.error is None and value >= item.pass_threshold - 1e-9, error=answer.error,
                          completion_tokens=answer.completion_tokens, cached=key not in missing[group.key])


def peak_rss(engine: EngineProcess) -> int | None:
    """The engine process's peak resident set (``VmHWM``), in bytes; None where /proc is not available."""
    if engine.proc is None:
        return None
    try:
        with open(f"/proc/{engine.proc.pid}/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None
