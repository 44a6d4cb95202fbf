"""The validation every section of the config file shares (``config.py``): unknown keys, infinities, numbers or
switches written as strings, and durations past what a wait can hold are refused."""

from __future__ import annotations

from typing import Any, get_args

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

#: the longest duration a ``*_s`` setting may hold (a year): past ``threading.TIMEOUT_MAX`` (≈ 9.2e9 s) a wait
#: raised OverflowError in the watchdog's thread (``wedge_check_s = 1e10``), past a socket's a probe did; a
#: time-to-live (``*_ttl_s``: no wait, a date) may be a century
MAX_DURATION_S = 365 * 24 * 3600.0
MAX_TTL_S = 100 * MAX_DURATION_S


class Strict(BaseModel):
    # inf and nan are refused everywhere: `wedge_check_s = inf` passed `ge=0` and crashed the watchdog's thread
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_coercion(cls, value: Any, info: ValidationInfo) -> Any:
        """A number or a switch written as a string (`startup_timeout_s = "90"`, `log_prompts = "yes"`) or a switch
        given for a number (`slots = true`) is refused: lax validation read them as 90, True and 1 without a word —
        and `log_prompts = "yes"` turned prompt logging on. (Not ``strict=True``: it also refuses a TOML string for a
        path and a TOML array for a tuple.)"""
        field = cls.model_fields.get(info.field_name or "")
        if field is None:
            return value
        kinds = set(get_args(field.annotation)) or {field.annotation}
        if isinstance(value, str) and str not in kinds and kinds & {bool, int, float}:
            what = "true or false" if bool in kinds else "a number"
            raise ValueError(f"must be {what}, not the string {value!r} (write it without quotes)")
        if isinstance(value, bool) and bool not in kinds and kinds & {int, float}:
            raise ValueError(f"must be a number, not {str(value).lower()}")
        return value

    @field_validator("*")
    @classmethod
    def _duration_bounded(cls, value: Any, info: ValidationInfo) -> Any:
        name = info.field_name or ""
        if name.endswith("_s") and isinstance(value, (int, float)):
            bound, said = (MAX_TTL_S, "a century") if name.endswith("_ttl_s") else (MAX_DURATION_S, "a year")
            if value > bound:
                raise ValueError(f"at most {bound:.0f} s ({said})")
        return value
