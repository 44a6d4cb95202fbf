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
    llama_server: str | None = None
    extra_args: list[str] = Field(default_factory=list)


class ServerSettings(_Strict):
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    api_keys: list[str] = Field(default_factory=list, description="plain keys or 'sha256:<hex>' hashes")
    request_timeout_s: float = Field(600.0, gt=0)
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
