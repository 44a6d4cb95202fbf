"""The one configuration file (TOML), validated by Pydantic with ``extra="forbid"``.

Durations are float seconds named ``*_s``. Errors name the key path and what is wrong.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import ConfigError
from .models.catalog import DEFAULT_MODEL


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EngineSettings(_Strict):
    model: str = DEFAULT_MODEL
    ctx: int = Field(4096, ge=64)
    slots: int = Field(2, ge=1, le=256)
    threads: int | None = Field(None, ge=1)
    kv_type: Literal["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"] = "f16"
    cache_ram_mib: int = Field(0, ge=0)
    startup_timeout_s: float = Field(180.0, gt=0)
    restart_after_requests: int | None = Field(None, ge=1)
    wedge_check_s: float = Field(10.0, ge=0, description="probe /slots this often; 0 turns wedge detection off")
    wedge_probe_timeout_s: float = Field(5.0, gt=0)
    wedge_failures: int = Field(3, ge=1, description="consecutive unanswered probes before a restart")
    llama_server: str | None = None
    extra_args: list[str] = Field(default_factory=list)


class ServerSettings(_Strict):
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    api_keys: list[str] = Field(default_factory=list, description="plain keys or 'sha256:<hex>' hashes")
    request_timeout_s: float = Field(600.0, gt=0, description="per-request deadline, queue wait included")
    max_in_flight: int | None = Field(None, ge=1, description="requests sent to the engine at once; default: slots")
    queue_size: int | None = Field(None, ge=0, description="requests waiting for a slot; default: 2 x slots")
    keepalive_s: float = Field(10.0, gt=0, description="SSE comment after this long without data")
    stream_idle_timeout_s: float = Field(120.0, gt=0, description="close a stream idle (either side) this long")
    engine_retry_wait_s: float = Field(30.0, ge=0, description="wait this long for a restarted engine to retry")
    max_body_bytes: int = Field(8 * 1024 * 1024, ge=1024)
    log_prompts: bool = False


class TiankongConfig(_Strict):
    server: ServerSettings = Field(default_factory=lambda: ServerSettings())
    engine: EngineSettings = Field(default_factory=lambda: EngineSettings())


def _format_errors(exc: ValidationError, source: str) -> str:
    problems = []
    for err in exc.errors():
        where = ".".join(str(part) for part in err["loc"]) or "(top level)"
        problems.append(f"{where}: {err['msg']}")
    return f"{source}: " + "; ".join(problems)


def load_config(path: str | Path | None) -> TiankongConfig:
    """Read and validate a config file; ``None`` gives the defaults."""
    if path is None:
        return TiankongConfig()
    file = Path(path)
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read config {file}: {exc.strerror}", hint="check the --config path") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{file} is not valid TOML: {exc}", hint="fix the syntax at the position shown") from None
    try:
        return TiankongConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_errors(exc, str(file)), hint="see docs/config.md for every key") from None
