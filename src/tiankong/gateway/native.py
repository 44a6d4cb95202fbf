"""llama.cpp's own endpoints on the gateway: what tiankong's client flows call (``/props``, ``/tokenize``,
``/apply-template``, ``/completion``, …), so ``Client(url=<gateway>)`` and ``tiankong <task> --url <gateway>``
work through a gateway. They go through the same pipeline as every route (``app.py``)."""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse

from .responses import error_response

#: llama.cpp's own endpoints, passed through to the engine (auth, admission, deadline, metrics as every route):
#: what tiankong's client flows call, so ``Client(url=<gateway>)`` and ``tiankong <task> --url`` work through a
#: gateway. Not validated beyond what the engine's grammar enforces; a top-level json_schema is refused there.
NATIVE_POST = {"/completion": ("prompt", (str, list)), "/tokenize": ("content", (str,)),
               "/detokenize": ("tokens", (list,)), "/apply-template": ("messages", (list,)),
               "/embeddings": ("content", (str, list))}  # path → the field it needs and its JSON types
NATIVE_GET = ("/props", "/lora-adapters")


def native_problem(path: str, body: dict[str, Any]) -> JSONResponse | None:
    """A 400 when the field a native endpoint reads is missing or of the wrong type (llama-server would answer
    an empty 200 for some)."""
    name, types = NATIVE_POST[path]
    if isinstance(body.get(name), types):
        return None
    kinds = " or ".join({"str": "a string", "list": "an array"}[t.__name__] for t in types)
    return error_response(400, f"{path} needs {name!r} as {kinds}", "invalid_request_error", "invalid_value",
                          param=name)


def native_refused(path: str) -> JSONResponse:
    return error_response(400, f"{path} is llama.cpp's own endpoint: this model is a remote OpenAI-compatible "
                          "upstream (use /v1/chat/completions or /v1/tasks/*)", "invalid_request_error",
                          "unsupported_endpoint")
