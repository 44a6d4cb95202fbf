"""``bench spec``: speculative decoding A/B on the user's hardware and prompts.

The target model is measured without speculation, then with the draft model at each ``--n-max`` and (with
``ngram``) with each n-gram mode, one engine at a time with the same pinned ctx/threads/slots and the same
prompts (temperature 0, fixed seed). Speed is end-to-end completion tokens ÷ wall-clock seconds; acceptance
is ``draft_n_accepted / draft_n`` from llama-server's ``timings``. With ``repeats > 1`` the whole sequence
(baseline, candidates; every other repeat in reverse order) is run again and the sums are used, so slow
drift on a noisy machine hits every configuration alike. The report ends with the decision
``spec = "auto"`` would take on these numbers (:func:`tiankong.engine.spec_auto.decide`); the measurement
code is shared with auto mode.
"""

from __future__ import annotations

import csv
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..engine import EngineConfig, SpecAuto
from ..engine.build import locate_engine
from ..engine.flags import NGRAM_SPEC_TYPES, default_threads
from ..engine.settings import model_file
from ..engine.spec import without_spec
from ..engine.spec_auto import DEFAULT_PROMPTS, SpecMeasurement, candidate_configs, decide, measure
from ..engine.vocab import check_draft_compatible
from ..errors import ConfigError
from ..paths import check_folder
from .common import RunFacts

DEFAULT_NGRAM = ("ngram-simple", "ngram-map-k", "ngram-mod")


class SpecBenchConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    target: str
    draft: str | None = None
    n_max: list[int] = Field(default_factory=lambda: [4, 8, 16])
    ngram: bool = False
    ngram_types: list[str] = Field(default_factory=lambda: list(DEFAULT_NGRAM))
    prompts_file: str | None = None
    gen_tokens: int = Field(128, ge=8)
    repeats: int = Field(1, ge=1)
    threads: int | None = Field(None, ge=1)
    ctx: int = Field(4096, ge=256)
    min_speedup: float = Field(1.1, gt=0)
    min_acceptance: float = Field(0.6, ge=0, le=1)
    llama_server: str | None = None


class SpecRow(BaseModel):
    name: str
    spec_type: str | None
    n_max: int | None
    tokens: int
    seconds: float
    tok_s: float
    decode_tok_s: float
    speedup: float | None
    drafted: int
    accepted: int
    acceptance: float | None
    error: str | None = None


class SpecBenchReport(RunFacts):
    kind: str = "spec"
    target: str
    draft: str | None
    threads: int
    prompts: int
    config: SpecBenchConfig
    rows: list[SpecRow] = Field(default_factory=list)
    decision: str = ""
    chosen: str | None = None
    files: list[str] = Field(default_factory=list)


def run_spec_bench(config: SpecBenchConfig, progress: Callable[[str], None] | None = None) -> SpecBenchReport:
    """Measure every configuration; ``progress`` gets one line per measurement."""
    started = time.monotonic()
    say = progress or (lambda _line: None)
    engine_config, target_name, draft_name = _engine_config(config)
    prompts = load_prompts(config.prompts_file)
    binary = locate_engine(config.llama_server)
    candidates = candidate_configs(engine_config)
    totals = [SpecMeasurement("off")] + [m for m, _ in candidates]
    runs = [without_spec(engine_config)] + [c for _, c in candidates]
    for repeat in range(config.repeats):
        pairs = list(zip(totals, runs, strict=True))
        for total, run in pairs if repeat % 2 == 0 else pairs[::-1]:  # alternate the order against drift
            one = measure(run, binary.path, prompts, config.gen_tokens, SpecMeasurement(total.name))
            _accumulate(total, one, repeat)
            say(f"[{repeat + 1}/{config.repeats}] {total.name}: {one.tok_s:.1f} tok/s"
                + (f", acceptance {one.stats.acceptance:.0%}" if one.stats.acceptance is not None else "")
                + (f" ({one.error})" if one.error else ""))
    baseline, measured = totals[0], totals[1:]
    chosen, reason = decide(baseline, measured, config.min_speedup, config.min_acceptance)
    report = SpecBenchReport(target=target_name, draft=draft_name, threads=engine_config.threads,
                             prompts=len(prompts), config=config, decision=reason,
                             chosen=chosen.name if chosen else None,
                             started_at=datetime.now(UTC).isoformat(timespec="seconds"))
    report.rows = [_row(m, baseline) for m in totals]
    report.duration_s = time.monotonic() - started
    return report


def _engine_config(config: SpecBenchConfig) -> tuple[EngineConfig, str, str | None]:
    if not config.draft and not config.ngram:
        raise ConfigError("nothing to compare", hint="pass --draft MODEL and/or --ngram")
    # measured without the mode they shape, and not a word said (a sweep, 2026-12-07)
    if "ngram_types" in config.model_fields_set and not config.ngram:
        raise ConfigError("--ngram-types chooses the modes --ngram tries, and --ngram is off", hint="add --ngram")
    if "n_max" in config.model_fields_set and not config.draft:
        raise ConfigError("--n-max is the draft model's length, and there is no --draft", hint="add --draft MODEL")
    for name in config.ngram_types:
        if name not in NGRAM_SPEC_TYPES:
            raise ConfigError(f"unknown n-gram mode {name!r}", hint=f"use {', '.join(NGRAM_SPEC_TYPES)}")
    target = model_file(config.target)
    draft = model_file(config.draft) if config.draft else None
    if draft is not None:
        check_draft_compatible(target, draft)
    auto = SpecAuto(n_max_values=tuple(config.n_max) if draft else (),
                    ngram_types=tuple(config.ngram_types) if config.ngram else (),
                    gen_tokens=config.gen_tokens, min_speedup=config.min_speedup,
                    min_acceptance=config.min_acceptance)
    engine_config = EngineConfig(model=target, ctx=config.ctx, slots=1, threads=config.threads or default_threads(),
                                 draft_model=draft, spec="auto", spec_auto=auto)
    engine_config.validate()
    return engine_config, config.target, config.draft


def load_prompts(path: str | None) -> list[str]:
    """Prompts from a file: one per line, or JSONL objects with ``prompt`` or ``text``; built-ins without."""
    if path is None:
        return list(DEFAULT_PROMPTS)
    try:
        lines = Path(path).expanduser().read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ConfigError(f"cannot read prompts file {path}: {exc.strerror}", hint="check --prompts") from None
    prompts = [_prompt(line, path, i) for i, line in enumerate(lines, 1) if line.strip()]
    if not prompts:
        raise ConfigError(f"{path} has no prompts", hint="one prompt per line, or JSONL with a 'prompt' field")
    return prompts


def _prompt(line: str, path: str, number: int) -> str:
    text = line.strip()
    if not text.startswith("{"):
        return text
    try:
        data = json.loads(text)
    except ValueError:
        raise ConfigError(f"{path}:{number} is not valid JSON", hint="one JSON object per line") from None
    value = data.get("prompt", data.get("text")) if isinstance(data, dict) else None
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{path}:{number} has no 'prompt' or 'text' string", hint="e.g. {\"prompt\": \"…\"}")
    return value


def _accumulate(total: SpecMeasurement, one: SpecMeasurement, repeat: int) -> None:
    total.tokens += one.tokens
    total.seconds += one.seconds
    total.stats = total.stats + one.stats if one.error is None else total.stats
    total.decode_tok_s = (total.decode_tok_s * repeat + one.decode_tok_s) / (repeat + 1)
    total.error = total.error or one.error


def _row(m: SpecMeasurement, baseline: SpecMeasurement) -> SpecRow:
    rate = m.stats.acceptance
    return SpecRow(name=m.name, spec_type=m.spec_type, n_max=m.n_max, tokens=m.tokens, seconds=round(m.seconds, 3),
                   tok_s=round(m.tok_s, 2), decode_tok_s=round(m.decode_tok_s, 2),
                   speedup=round(m.tok_s / baseline.tok_s, 3) if baseline.tok_s > 0 else None,
                   drafted=m.stats.drafted, accepted=m.stats.accepted,
                   acceptance=None if rate is None else round(rate, 4), error=m.error)


def write_spec_outputs(report: SpecBenchReport, out_dir: str | Path) -> list[Path]:
    """``spec.json`` (everything) and ``spec.csv`` (the table) in ``out_dir``."""
    folder = Path(out_dir).expanduser()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the output folder {folder}: {exc.strerror}", hint="pass another --out") \
            from None
    json_path, csv_path = folder / "spec.json", folder / "spec.csv"
    report.files = [str(json_path), str(csv_path)]
    json_path.write_text(report.model_dump_json(indent=2) + "\n", encoding="utf-8")
    rows: list[dict[str, Any]] = [row.model_dump(mode="json") for row in report.rows]
    with csv_path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(SpecRow.model_fields))
        writer.writeheader()
        writer.writerows(rows)
    return [json_path, csv_path]


def spec_bench(config: SpecBenchConfig, out_dir: str | Path | None = None,
               progress: Callable[[str], None] | None = None) -> SpecBenchReport:
    """Run ``bench spec`` and, with ``out_dir``, write spec.{json,csv} there."""
    if out_dir is not None:
        check_folder(out_dir)  # before the run: a file there failed only when its results were in
    report = run_spec_bench(config, progress)
    if out_dir is not None:
        write_spec_outputs(report, out_dir)
    return report


__all__ = ["SpecBenchConfig", "SpecBenchReport", "SpecRow", "load_prompts", "run_spec_bench", "spec_bench",
           "write_spec_outputs"]
