"""The request side of the draft-then-replace cascade (``cascade.py`` runs it): the ``tiankong`` option of a chat
body read and checked, the cascade's models checked against the pool at start-up."""

from __future__ import annotations

import contextlib
from typing import Any

from starlette.responses import JSONResponse

from ..config import CascadeSettings
from ..engine.pool import EnginePool
from ..errors import ConfigError, TiankongError
from .metrics import RequestRecord
from .responses import error_response


def draft_option(body: dict[str, Any]) -> bool | JSONResponse:
    """Pop the request's ``tiankong`` object; whether it asks for a draft, or the 400 for a malformed one."""
    if "tiankong" not in body:
        return False
    option = body.pop("tiankong")
    if not isinstance(option, dict) or set(option) - {"draft"} or not isinstance(option.get("draft", False), bool):
        return error_response(400, 'tiankong must be an object {"draft": true|false}', "invalid_request_error",
                              "invalid_value", param="tiankong")
    return bool(option.get("draft", False))


def draft_refused(body: dict[str, Any], configured: bool) -> JSONResponse | None:
    """The 400 for a draft the gateway cannot give: none configured, several choices, tools or a schema."""
    def refuse(message: str, param: str) -> JSONResponse:
        return error_response(400, message, "invalid_request_error", "unsupported_field", param=param)

    if not configured:
        return refuse("tiankong.draft: this gateway has no draft model; set [cascade] draft_model and quality_model "
                      "in its config, or leave tiankong.draft out", "tiankong")
    if body.get("n") not in (None, 1):
        return refuse("tiankong.draft gives one draft and one answer: leave n out (or 1)", "n")
    for name in ("tools", "response_format", "json_schema", "grammar", "lora"):
        if body.get(name) not in (None, {"type": "text"}):
            return refuse(f"tiankong.draft is for plain chat: leave {name} out", name)
    return None


def shape_chat(body: dict[str, Any], call: RequestRecord, cascade: CascadeSettings | None,
               pool: EnginePool) -> JSONResponse | None:
    """A chat body before routing: its ``tiankong`` option popped and checked (``call.draft``), and with a
    cascade configured, no model → the quality model. The 400 for a draft that cannot be given."""
    wants = draft_option(body)
    if isinstance(wants, JSONResponse):
        return wants
    if wants and (refused := draft_refused(body, cascade is not None)) is not None:
        return refused
    if cascade is None:
        return None
    model = body.get("model")
    if not model:
        body["model"] = model = cascade.quality_model
    if wants:
        with contextlib.suppress(TiankongError):  # an unknown model: the router's 404
            if pool.resolve(str(model)) is not pool.resolve(cascade.quality_model):
                return error_response(400, f"tiankong.draft answers with the quality model "
                                      f"{cascade.quality_model!r} ([cascade]); leave model out or name it",
                                      "invalid_request_error", "invalid_value", param="model")
        call.draft = True
    return None


def check_cascade(cascade: CascadeSettings | None, pool: EnginePool) -> None:
    """Both cascade models are served by the pool (a ConfigError at start-up otherwise)."""
    if cascade is None:
        return
    for what, name in (("draft_model", cascade.draft_model), ("quality_model", cascade.quality_model)):
        try:
            pool.resolve(name)
        except TiankongError:
            raise ConfigError(f"[cascade] {what} = {name!r} is not a model of the pool; models: "
                              f"{', '.join(pool.names())}", hint="name a [[pool.models]] entry") from None
