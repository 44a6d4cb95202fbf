"""Measure speculative decoding against plain decoding and decide (``EngineConfig(spec="auto")``).

One configuration at a time, an engine is started with the caller's own settings (ctx, slots, threads),
warmed up with one short request, and sent the same prompts one after another (temperature 0, fixed seed,
``max_tokens = gen_tokens``). Speed is end-to-end: completion tokens ÷ wall-clock seconds over all prompts,
so prompt processing in the draft model and HTTP are paid for as a user would pay for them. Acceptance comes
from each answer's ``timings`` (``draft_n_accepted`` / ``draft_n``).

The rule (:func:`decide`): the fastest candidate is enabled only if it is at least ``min_speedup`` times as
fast as no speculation *and* its acceptance is at least ``min_acceptance`` (below that the run-time monitor
would turn it off again at once). Otherwise speculation stays off. Every number comes from the measurement;
nothing is assumed about the hardware.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from ..errors import EngineError, ServerError, TransportError
from .flags import EngineConfig
from .process import EngineProcess
from .spec import SpecStats, spec_from_timings, without_spec
from .supervised import NO_RESTARTS
from .vocab import check_draft_compatible

DEFAULT_PROMPTS = (
    "Write a Python function that returns the n-th Fibonacci number iteratively, with a docstring.",
    "List the planets of the solar system in order from the sun, one per line, with one fact each.",
    "Explain in three sentences what a hash table is and why lookups are fast on average.",
)
Log = Callable[[str], None]


@dataclass
class SpecMeasurement:
    """One configuration measured on the prompts."""

    name: str
    spec_type: str | None = None
    n_max: int | None = None
    tokens: int = 0
    seconds: float = 0.0
    decode_tok_s: float = 0.0  # llama-server's own timings.predicted_per_second, mean over prompts
    stats: SpecStats = field(default_factory=SpecStats)
    error: str | None = None

    @property
    def tok_s(self) -> float:
        """Completion tokens per wall-clock second, end to end."""
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "spec_type": self.spec_type, "n_max": self.n_max, "tokens": self.tokens,
                "seconds": round(self.seconds, 3), "tok_s": round(self.tok_s, 2),
                "decode_tok_s": round(self.decode_tok_s, 2), **self.stats.to_json(), "error": self.error}


@dataclass
class SpecDecision:
    """What auto mode measured and chose; ``config`` is the configuration to run."""

    enabled: bool
    reason: str
    baseline: SpecMeasurement
    candidates: list[SpecMeasurement]
    chosen: SpecMeasurement | None
    min_speedup: float
    min_acceptance: float
    config: EngineConfig | None = None

    def speedup(self, measurement: SpecMeasurement) -> float:
        return measurement.tok_s / self.baseline.tok_s if self.baseline.tok_s > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        rows = [{**m.to_json(), "speedup": round(self.speedup(m), 3)} for m in self.candidates]
        return {"enabled": self.enabled, "reason": self.reason, "min_speedup": self.min_speedup,
                "min_acceptance": self.min_acceptance, "baseline": self.baseline.to_json(), "candidates": rows,
                "chosen": self.chosen.name if self.chosen else None}


def candidate_configs(config: EngineConfig) -> list[tuple[SpecMeasurement, EngineConfig]]:
    """The configurations auto mode tries: one per draft n_max, one per n-gram type."""
    auto, base = config.spec_auto, without_spec(config)
    found: list[tuple[SpecMeasurement, EngineConfig]] = []
    if config.draft_model is not None:
        for n_max in auto.n_max_values:
            n_min = config.spec_draft_n_min if config.spec_draft_n_min is None or config.spec_draft_n_min <= n_max \
                else None
            found.append((SpecMeasurement(f"draft n_max={n_max}", "draft-simple", n_max), dataclasses.replace(
                base, spec_type="draft-simple", draft_model=config.draft_model, spec_draft_n_max=n_max,
                spec_draft_n_min=n_min, spec_draft_p_min=config.spec_draft_p_min,
                draft_gpu_layers=config.draft_gpu_layers)))
    for name in auto.ngram_types:
        found.append((SpecMeasurement(name, name), dataclasses.replace(base, spec_type=name)))
    return found


def measure(config: EngineConfig, binary: Path | str | None, prompts: Sequence[str], gen_tokens: int,
            into: SpecMeasurement, *, startup_timeout_s: float = 180.0) -> SpecMeasurement:
    """Start ``config``, run the prompts one by one, stop it; fills ``into`` (``error`` on failure). The one
    engine not started by ``launch``: ``launch`` calls this module, and ``config`` is never ``spec="auto"``."""
    engine = EngineProcess(dataclasses.replace(config, port=0), binary, policy=NO_RESTARTS,
                           startup_timeout_s=startup_timeout_s)
    try:
        engine.start()
        with httpx.Client(base_url=engine.url, timeout=600.0) as http:
            _ask(http, prompts[0], 4)  # warm-up: page cache, first allocations
            rates: list[float] = []
            for prompt in prompts:
                started = time.perf_counter()
                data = _ask(http, prompt, gen_tokens)
                into.seconds += time.perf_counter() - started
                into.tokens += int((data.get("usage") or {}).get("completion_tokens") or 0)
                timings = data.get("timings") or {}
                into.stats = into.stats + spec_from_timings(timings)
                rates.append(float(timings.get("predicted_per_second") or 0.0))
            into.decode_tok_s = sum(rates) / len(rates)
    except (EngineError, TransportError) as exc:
        into.error = exc.one_line()
    finally:
        engine.stop()
    return into


def _ask(http: httpx.Client, prompt: str, max_tokens: int) -> dict[str, Any]:
    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens, "temperature": 0,
            "seed": 42, "cache_prompt": False}
    try:
        answer = http.post("/v1/chat/completions", json=body)
    except httpx.HTTPError as exc:
        raise TransportError(f"request to {http.base_url} failed: {type(exc).__name__}") from None
    if answer.status_code != 200:
        raise ServerError(answer.status_code, answer.text[:200])
    data = answer.json()
    return data if isinstance(data, dict) else {}


def decide(baseline: SpecMeasurement, candidates: Sequence[SpecMeasurement], min_speedup: float,
           min_acceptance: float) -> tuple[SpecMeasurement | None, str]:
    """The rule: fastest candidate, if ≥ ``min_speedup``× the baseline and acceptance ≥ ``min_acceptance``."""
    if baseline.error or baseline.tok_s <= 0:
        return None, f"the baseline could not be measured ({baseline.error or 'no tokens'}); speculation off"
    usable = [c for c in candidates if not c.error and c.tok_s > 0]
    if not usable:
        return None, "no speculative configuration could be measured; speculation off"
    best = max(usable, key=lambda c: c.tok_s)
    speedup = best.tok_s / baseline.tok_s
    rate = best.stats.acceptance
    numbers = (f"{best.name}: {best.tok_s:.1f} vs {baseline.tok_s:.1f} tok/s = {speedup:.2f}x, acceptance "
               + ("n/a" if rate is None else f"{rate:.0%}"))
    if speedup < min_speedup:
        return None, f"{numbers} < {min_speedup:.2f}x required; speculation off"
    if rate is None:
        return None, f"{numbers}; it drafted nothing, so the difference is noise; speculation off"
    if rate < min_acceptance:
        return None, f"{numbers}; acceptance below {min_acceptance:.0%}; speculation off"
    return best, f"{numbers} ≥ {min_speedup:.2f}x; enabled"


def resolve_auto_spec(config: EngineConfig, binary: Path | str | None = None, *, log: Log | None = None,
                      startup_timeout_s: float = 180.0) -> SpecDecision:
    """Run the start-up A/B for ``config`` (``spec="auto"``) and return the decision and config to run."""
    config.validate()
    auto = config.spec_auto
    if config.draft_model is not None:
        check_draft_compatible(config.model, config.draft_model)
    prompts = list(auto.prompts) or list(DEFAULT_PROMPTS)
    say = log or (lambda _line: None)
    baseline = measure(without_spec(config), binary, prompts, auto.gen_tokens, SpecMeasurement("off"),
                       startup_timeout_s=startup_timeout_s)
    say(f"spec auto: off: {baseline.tok_s:.1f} tok/s")
    measured: list[SpecMeasurement] = []
    configs: dict[str, EngineConfig] = {}
    for into, candidate in candidate_configs(config):
        measured.append(measure(candidate, binary, prompts, auto.gen_tokens, into,
                                startup_timeout_s=startup_timeout_s))
        configs[into.name] = candidate
        rate = into.stats.acceptance
        say(f"spec auto: {into.name}: {into.tok_s:.1f} tok/s, acceptance "
            f"{'n/a' if rate is None else f'{rate:.0%}'}{f' ({into.error})' if into.error else ''}")
    chosen, reason = decide(baseline, measured, auto.min_speedup, auto.min_acceptance)
    say(f"spec auto: {reason}")
    run = configs[chosen.name] if chosen else without_spec(config)
    return SpecDecision(enabled=chosen is not None, reason=reason, baseline=baseline, candidates=measured,
                        chosen=chosen, min_speedup=auto.min_speedup, min_acceptance=auto.min_acceptance,
                        config=dataclasses.replace(run, port=config.port))
