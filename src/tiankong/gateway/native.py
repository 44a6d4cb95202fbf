"""llama.cpp's own endpoints on the gateway: what tiankong's client flows call (``/props``, ``/tokenize``,
``/apply-template``, ``/completion``, …), so ``Client(url=<gateway>)`` and ``tiankong <task> --url <gateway>``
work through a gateway. They go through the same pipeline as every route (``app.py``)."""

from __future__ import annotations

from typing import Any

import httpx
from starlette.responses import JSONResponse

from .responses import error_response

#: llama.cpp's own endpoints, passed through to the engine (auth, admission, deadline, metrics as every route):
#: what tiankong's client flows call, so ``Client(url=<gateway>)`` and ``tiankong <task> --url`` work through a
#: gateway. Not validated beyond what the engine's grammar enforces; a top-level json_schema is refused there.
NATIVE_POST = {"/completion": ("prompt", (str, list)), "/tokenize": ("content", (str,)),
               "/detokenize": ("tokens", (list,)), "/apply-template": ("messages", (list,)),
               "/embeddings": ("content", (str, list))}  # path → the field it needs and its JSON types
NATIVE_GET = ("/props", "/lora-adapters")
#: native paths llama-server answers without a slot (on its HTTP thread): the gateway does not queue them
SLOTLESS = frozenset({"/tokenize", "/detokenize", "/apply-template"})
MAX_DETOKENIZE = 65536  # token ids in one /detokenize
_VOCAB: dict[tuple[str, int | None], int] = {}  # (engine URL, pid) → its vocabulary size


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


async def vocab_size(http: httpx.AsyncClient, url: str, pid: int | None, headers: dict[str, str]) -> int | None:
    """The engine's vocabulary size (its ``/v1/models`` ``meta.n_vocab``), asked once per engine process."""
    if (url, pid) not in _VOCAB:
        try:
            answer = await http.get(url + "/v1/models", headers=headers, timeout=10)
            _VOCAB[(url, pid)] = int(answer.json()["data"][0]["meta"]["n_vocab"])
        except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError):
            return None
    return _VOCAB[(url, pid)]


def detokenize_problem(body: dict[str, Any], n_vocab: int | None) -> JSONResponse | None:
    """A 400 for token ids the engine does not have (llama-server would fail with its C++ message)."""
    tokens = body.get("tokens")
    top = f" below {n_vocab}" if n_vocab else ""
    if isinstance(tokens, list) and len(tokens) <= MAX_DETOKENIZE and all(
            type(t) is int and t >= 0 and (n_vocab is None or t < n_vocab) for t in tokens):
        return None
    return error_response(400, f"/detokenize needs 'tokens' as at most {MAX_DETOKENIZE} token ids (whole numbers "
                          f"from 0{top})", "invalid_request_error", "invalid_value", param="tokens")
