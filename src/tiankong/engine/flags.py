"""One typed flag table: ``EngineConfig`` → llama-server argv, validated.

Every flag tiankong passes to llama-server goes through here. The traps this guards against:

* ``-c``, ``-np``, ``-t`` and ``--cache-ram`` are always pinned: llama.cpp's automatic defaults change
  between builds (``-np`` auto, ``--cache-ram`` 8 GiB default, ``-c`` from the model's trained context).
* a draft model without ``--spec-type`` is loaded and then silently never used;
* ``--draft-max`` / ``--draft-min`` / ``--draft-p-min`` are removed (or deprecated aliases): tiankong
  only speaks the ``--spec-draft-*`` names;
* unknown KV-cache types are refused before a process is started.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import FlagError

KV_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
#: ``--spec-type`` values of the pinned llama-server (``llama-server --help``); a comma-separated list combines them.
SPEC_TYPES = (
    "none", "draft-simple", "draft-eagle3", "draft-mtp", "draft-dflash", "draft-dspark",
    "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache",
)
NGRAM_SPEC_TYPES = tuple(t for t in SPEC_TYPES if t.startswith("ngram-"))

#: Flags that must never appear in ``extra_args`` – mapped to what to use instead.
REMOVED_FLAGS: dict[str, str] = {
    "--draft-max": "--spec-draft-n-max (EngineConfig.spec_draft_n_max)",
    "--draft": "--spec-draft-n-max (EngineConfig.spec_draft_n_max)",
    "--draft-n": "--spec-draft-n-max (EngineConfig.spec_draft_n_max)",
    "--draft-min": "--spec-draft-n-min (EngineConfig.spec_draft_n_min)",
    "--draft-n-min": "--spec-draft-n-min (EngineConfig.spec_draft_n_min)",
    "--draft-p-min": "--spec-draft-p-min (EngineConfig.spec_draft_p_min)",
}

#: Flags owned by typed fields; passing them through ``extra_args`` would fight the table.
OWNED_FLAGS: dict[str, str] = {
    "-m": "model", "--model": "model", "-c": "ctx", "--ctx-size": "ctx",
    "-np": "slots", "--parallel": "slots", "-t": "threads", "--threads": "threads",
    "--cache-ram": "cache_ram_mib", "-cram": "cache_ram_mib", "--host": "host", "--port": "port",
    "-ctk": "kv_type", "--cache-type-k": "kv_type", "-ctv": "kv_type", "--cache-type-v": "kv_type",
    "-md": "draft_model", "--model-draft": "draft_model", "--spec-type": "spec_type",
    "--lora": "lora", "--lora-scaled": "lora", "--lora-init-without-apply": "lora", "--mmproj": "mmproj",
    "--rpc": "rpc",
}

#: tokens of the longest text an embedding engine takes (llama-server embeds a text in one ubatch)
EMBEDDING_UBATCH = 2048


@dataclass
class SpecAuto:
    """How ``EngineConfig(spec="auto")`` decides at start-up and when it turns itself off (docs/speed.md)."""

    n_max_values: tuple[int, ...] = (4, 8)  # draft candidates: one per --spec-draft-n-max
    ngram_types: tuple[str, ...] = ()  # n-gram candidates (no draft model needed)
    prompts: tuple[str, ...] = ()  # A/B prompts; empty: a built-in mix of code and prose
    gen_tokens: int = 64
    min_speedup: float = 1.1  # enable only when at least this much faster than without
    min_acceptance: float = 0.6  # run time: turn off when the rolling acceptance falls below this
    window_tokens: int = 256  # rolling window, in drafted tokens
    check_interval_s: float = 5.0


def default_threads() -> int:
    """Physical-ish core count: all usable CPUs, at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)


@dataclass
class EngineConfig:
    """Everything needed to start one llama-server. Durations are float seconds named ``*_s``."""

    model: Path
    ctx: int = 4096
    slots: int = 2
    threads: int = field(default_factory=default_threads)
    cache_ram_mib: int = 0
    host: str = "127.0.0.1"
    port: int = 0
    kv_type: str = "f16"
    batch: int | None = None
    ubatch: int | None = None
    flash_attn: str = "auto"
    seed: int = 42
    draft_model: Path | None = None
    spec_type: str | None = None
    spec_draft_n_max: int | None = None
    spec_draft_n_min: int | None = None
    spec_draft_p_min: float | None = None
    draft_gpu_layers: int | None = None
    spec: str | None = None  # "auto": measure at start-up, keep the best only if ≥ min_speedup (SpecAuto)
    spec_auto: SpecAuto = field(default_factory=SpecAuto)
    lora: list[Path] = field(default_factory=list)
    mmproj: Path | None = None
    rpc: list[str] = field(default_factory=list)
    alias: str | None = None
    metrics: bool = True
    embeddings: bool = False  # with it, batch/ubatch default to EMBEDDING_UBATCH
    #: with ``embeddings``: how llama-server pools (``none``: every token's vector, pooled by the caller)
    pooling: str = "mean"
    extra_args: list[str] = field(default_factory=list)
    #: a key only the engine's owner knows (``tiankong serve`` draws one per process): given to llama-server in a
    #: 0600 file, never on the command line (other local users can read every process's arguments)
    api_key: str | None = field(default=None, repr=False)

    def auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def validate(self) -> None:
        _check_positive("ctx", self.ctx, minimum=64)
        if self.pooling not in ("mean", "last", "cls", "none"):
            raise FlagError(f"unknown pooling {self.pooling!r}", hint="use mean, last, cls or none")
        _check_positive("slots", self.slots)
        _check_positive("threads", self.threads)
        if self.cache_ram_mib < 0:
            raise FlagError("cache_ram_mib must be ≥ 0", hint="use 0 to disable the prompt cache in RAM")
        if self.ctx % self.slots:
            raise FlagError(
                f"ctx {self.ctx} is not divisible by slots {self.slots}",
                hint="llama-server splits the context evenly between slots; pick ctx = slots × per-slot ctx",
            )
        if self.kv_type not in KV_TYPES:
            raise FlagError(f"unknown KV-cache type {self.kv_type!r}", hint=f"use one of {', '.join(KV_TYPES)}")
        if self.flash_attn not in ("auto", "on", "off"):
            raise FlagError(f"flash_attn must be auto, on or off, not {self.flash_attn!r}")
        self._validate_spec()
        self._validate_rpc()
        self._validate_lora()
        self._validate_extra()

    def _validate_lora(self) -> None:
        """Adapters load with scale 0 (``--lora-scaled FILE:0``), not ``--lora``: llama-server gives a request
        without a ``lora`` field the start-up scales, and ``--lora`` means 1.0 even with
        ``--lora-init-without-apply`` – the adapter would silently apply to every base request."""
        for adapter in self.lora:
            text = str(adapter)
            if "," in text or ":" in text:
                raise FlagError(f"LoRA adapter path {text!r} contains ',' or ':'",
                                hint="llama-server splits --lora-scaled on both; move or rename the file")

    def _validate_rpc(self) -> None:
        for endpoint in self.rpc:
            host, _, port = str(endpoint).rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) < 65536 or "," in endpoint:
                raise FlagError(f"rpc endpoint {endpoint!r} is not host:port",
                                hint="one entry per ggml-rpc-server, e.g. rpc=['127.0.0.1:50052']")

    def spec_types(self) -> list[str]:
        """The ``spec_type`` list (comma-separated in llama-server); empty when off."""
        if self.spec_type is None:
            return []
        return [t.strip() for t in self.spec_type.split(",") if t.strip() not in ("", "none")]

    def _validate_spec(self) -> None:
        if self.spec is not None:
            self._validate_auto()
            return
        types = self.spec_types()
        for name in types:
            if name not in SPEC_TYPES:
                raise FlagError(f"unknown spec_type {name!r}", hint=f"use one of {', '.join(SPEC_TYPES)}")
        uses_draft = any(t.startswith("draft-") for t in types)
        if self.draft_model is not None and not uses_draft:
            raise FlagError(
                "a draft model is set but spec_type is not" if not types else
                f"a draft model is set but spec_type {self.spec_type!r} does not use it",
                hint="llama-server would load the draft and never use it; set spec_type='draft-simple'",
            )
        if "draft-simple" in types and self.draft_model is None:
            raise FlagError("spec_type='draft-simple' needs a draft_model", hint="set draft_model to a GGUF path")
        draft_params = (self.spec_draft_n_max, self.spec_draft_n_min, self.spec_draft_p_min)
        if any(p is not None for p in draft_params) and not types:
            raise FlagError("spec_draft_* parameters are set but speculative decoding is off", hint="set spec_type")
        self._validate_draft_params()

    def _validate_draft_params(self) -> None:
        if self.spec_draft_p_min is not None and not 0.0 <= self.spec_draft_p_min <= 1.0:
            raise FlagError("spec_draft_p_min must be within [0, 1]")
        n_min, n_max = self.spec_draft_n_min, self.spec_draft_n_max
        for name, value in (("spec_draft_n_max", n_max), ("spec_draft_n_min", n_min)):
            if value is not None and (not isinstance(value, int) or value < 0):
                raise FlagError(f"{name} must be an integer ≥ 0, not {value!r}")
        if n_min is not None and n_max is not None and n_min > n_max:
            raise FlagError(f"spec_draft_n_min {n_min} is larger than spec_draft_n_max {n_max}")

    def _validate_auto(self) -> None:
        auto = self.spec_auto
        if self.spec != "auto":
            raise FlagError(f"spec must be 'auto' or unset, not {self.spec!r}",
                            hint="set spec_type for a fixed configuration, spec='auto' to measure and choose")
        if self.spec_type is not None:
            raise FlagError("spec='auto' chooses spec_type itself", hint="drop spec_type (or drop spec='auto')")
        if self.draft_model is None and not auto.ngram_types:
            raise FlagError("spec='auto' has nothing to try",
                            hint="set draft_model (same tokenizer as the model) and/or spec_auto.ngram_types")
        for name in auto.ngram_types:
            if name not in NGRAM_SPEC_TYPES:
                raise FlagError(f"unknown n-gram type {name!r}", hint=f"use one of {', '.join(NGRAM_SPEC_TYPES)}")
        if self.draft_model is not None and (not auto.n_max_values or min(auto.n_max_values) < 1):
            raise FlagError("spec_auto.n_max_values must be positive integers", hint="e.g. (4, 8)")
        if auto.gen_tokens < 8 or auto.min_speedup <= 0 or auto.window_tokens < 1 or auto.check_interval_s <= 0:
            raise FlagError("spec_auto needs gen_tokens ≥ 8, min_speedup > 0, window_tokens ≥ 1, check_interval_s > 0")
        if not 0.0 <= auto.min_acceptance <= 1.0:
            raise FlagError("spec_auto.min_acceptance must be within [0, 1]")
        self._validate_draft_params()

    def _validate_extra(self) -> None:
        for arg in self.extra_args:
            name = arg.split("=", 1)[0]
            if name in REMOVED_FLAGS:
                raise FlagError(f"{name} was removed from llama-server", hint=f"use {REMOVED_FLAGS[name]}")
            if name in OWNED_FLAGS:
                raise FlagError(
                    f"{name} cannot be passed in extra_args",
                    hint=f"set EngineConfig.{OWNED_FLAGS[name]} instead",
                )

    def to_argv(self, binary: Path | str) -> list[str]:
        """The full command line. Raises ``FlagError`` if the configuration is invalid."""
        self.validate()
        argv = [str(binary), "-m", str(self.model)]
        argv += ["-c", str(self.ctx), "-np", str(self.slots), "-t", str(self.threads)]
        argv += ["--cache-ram", str(self.cache_ram_mib)]
        argv += ["--host", self.host, "--port", str(self.port)]
        argv += ["-ctk", self.kv_type, "-ctv", self.kv_type, "-fa", self.flash_attn]
        argv += ["--seed", str(self.seed), "--no-webui", "--jinja"]
        batch, ubatch = self.batch, self.ubatch
        if self.embeddings and ubatch is None:  # an embedding is computed in one ubatch: room for a long text
            batch, ubatch = max(batch or 0, EMBEDDING_UBATCH), EMBEDDING_UBATCH
        argv += _optional("-b", batch) + _optional("-ub", ubatch) + _optional("-a", self.alias)
        if self.metrics:
            argv.append("--metrics")
        if self.embeddings:
            argv += ["--embeddings", "--pooling", self.pooling]
        argv += self._spec_argv()
        for adapter in self.lora:  # scale 0: a request without "lora" runs the base model (see _validate_lora)
            argv += ["--lora-scaled", f"{adapter}:0"]
        if self.lora:
            argv.append("--lora-init-without-apply")
        argv += _optional("--mmproj", self.mmproj)
        if self.rpc:
            argv += ["--rpc", ",".join(self.rpc)]
        return argv + list(self.extra_args)

    def _spec_argv(self) -> list[str]:
        if self.spec == "auto":
            raise FlagError("spec='auto' is decided at start-up, not a llama-server flag",
                            hint="start the config with EngineProcess (it measures first) or resolve_auto_spec()")
        if not self.spec_types():
            return []
        argv = ["--spec-type", str(self.spec_type)] + _optional("-md", self.draft_model)
        argv += _optional("--spec-draft-n-max", self.spec_draft_n_max)
        argv += _optional("--spec-draft-n-min", self.spec_draft_n_min)
        argv += _optional("--spec-draft-p-min", self.spec_draft_p_min)
        return argv + _optional("-ngld", self.draft_gpu_layers)


def _optional(flag: str, value: object) -> list[str]:
    return [] if value is None else [flag, str(value)]


def _check_positive(name: str, value: int, minimum: int = 1) -> None:
    if not isinstance(value, int) or value < minimum:
        raise FlagError(f"{name} must be an integer ≥ {minimum}, not {value!r}")
