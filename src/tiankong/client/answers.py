"""Reading a server's answers: JSON that must be JSON, a stream that must end as streams end, and an error answer
as the error class the same failure raises locally (a gateway's typed refusal is a ``ConfigError``, its cut-off
answer a ``TruncatedOutput``; ``errors.REMOTE_TYPES``). Pure, shared by ``Client`` and ``AsyncClient``."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ..errors import REMOTE_TYPES, InputTooLong, ServerError, TransportError, Unreachable
from . import _shared

if TYPE_CHECKING:
    import httpx

    from ._shared import StreamChunk


def json_or_none(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def parse_stream_event(line: str) -> dict[str, Any] | None:
    """One SSE line → the JSON event, ``None`` for keep-alives, comments and ``[DONE]``."""
    if not line.startswith("data:"):
        return None
    payload = line[5:].strip()
    if not payload or payload == "[DONE]":
        return None
    try:
        event = json.loads(payload)
    except ValueError:
        raise TransportError(f"malformed stream event: {payload[:200]}") from None
    if isinstance(event, dict) and "error" in event:
        raise ServerError(500, _error_message(event))
    return event if isinstance(event, dict) else None


def _error_message(data: Any) -> str:
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict):
            return str(err.get("message") or err)
        return str(err)
    return str(data)


def check_response(status: int, text: str) -> None:
    """Raise for an HTTP error answer, with the server's own message: a ``ServerError`` that is also the category
    a 4xx's ``error.type`` names (``errors.REMOTE_TYPES``: a gateway's refusal is a ``ConfigError``, its cut-off
    answer a ``TruncatedOutput``, as the same call on a local engine raises)."""
    if status < 400:
        return
    try:
        data = json.loads(text)
        message = _error_message(data)
    except ValueError:  # a proxy's or another service's error page: one line of it, and what to check
        snippet = " ".join(text.split())[:120]
        page = snippet.startswith("<")  # HTML: not an engine's or a gateway's own words
        data, message = None, (f"a page that is not JSON ({snippet!r}) — is this URL a llama-server or tiankong "
                               "gateway?" if page else snippet) if snippet else "no body"
    if status in (400, 413) and _error_field(data, "type") == InputTooLong.type and " — " in message:
        said, _, hint = message.partition(" — ")  # a gateway's own InputTooLong: its words, not wrapped twice
        raise InputTooLong(said, hint=hint)
    if status in (400, 413) and ("context size" in message or _error_field(data, "type") == InputTooLong.type):
        raise InputTooLong(f"the input is too long for the engine's context ({message})",
                           hint="shorten the text, use the compress task, or give the engine a larger context per "
                                "slot (Client(model=…, ctx=N); a gateway: `tiankong serve --ctx N`, then --url)")
    kind = REMOTE_TYPES.get(str(_error_field(data, "type"))) if status < 500 else None
    param = _error_field(data, "param")
    raise (kind or ServerError)(status, message, body=text, param=param if isinstance(param, str) else None)


def _error_field(data: Any, name: str) -> Any:
    error = data.get("error") if isinstance(data, dict) else None
    return error.get(name) if isinstance(error, dict) else None


def answer_json(response: httpx.Response, url: str) -> Any:
    """A 2xx answer's JSON; a body that is not JSON (a proxy's HTML page, a different service) is a
    ``TransportError`` naming what came back, not a decoder's traceback."""
    try:
        return response.json()
    except ValueError:
        kind = response.headers.get("content-type", "no content type")
        raise TransportError(f"{url} answered HTTP {response.status_code} with a body that is not JSON ({kind}: "
                             f"{response.text[:80]!r})", hint="is this URL a llama-server or tiankong gateway?"
                             ) from None


def answer_field(data: Any, name: str, url: str) -> Any:
    """``data[name]`` of a JSON object answer; anything else is a ``TransportError`` (not a KeyError)."""
    if not isinstance(data, dict) or name not in data:
        raise TransportError(f"{url} answered without {name!r} ({json.dumps(data)[:80]})",
                             hint="is this URL a llama-server or tiankong gateway?")
    return data[name]


class StreamEnd:
    """Whether a stream ended as streams end (a chunk with a ``finish_reason``, or ``data: [DONE]``): one that
    stops before is a ``ServerError``, as the same answer read whole is (``StreamAssembler.result``)."""

    def __init__(self) -> None:
        self.ended = False

    def see(self, line: str, chunk: StreamChunk | None) -> None:
        if line.strip() == "data: [DONE]" or (chunk is not None and chunk.finish_reason is not None):
            self.ended = True

    def check(self) -> None:
        if not self.ended:
            raise ServerError(500, "the engine's stream ended without a final chunk")


def connect_error(url: str, exc: Exception) -> TransportError:
    """A failed exchange, said by where it failed: no connection (is the server running?), no answer in time,
    or a connection the server closed mid-answer (it restarted or crashed)."""
    import httpx

    detail = f"{type(exc).__name__}: {exc}".rstrip(": ")
    if isinstance(exc, httpx.TimeoutException) and not isinstance(exc, httpx.ConnectTimeout):
        return TransportError(f"{url} did not answer in time ({detail})",
                              hint="give the client a larger timeout_s, or ask for less (max_tokens, a shorter "
                                   "input)")
    if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)):
        return TransportError(f"{url} closed the connection before answering ({detail})",
                              hint="the server may have restarted or crashed: see its log, then retry")
    if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout, httpx.ProxyError, httpx.UnsupportedProtocol)):
        return Unreachable(f"cannot reach {url}: {detail}",
                           hint=f"is the server running? start one with `tiankong serve` or {_shared.MANAGE_HINT}")
    # connected, then the exchange failed (an undecodable body, a connection closed oddly): not "is it running?"
    return TransportError(f"the exchange with {url} failed ({detail})",
                          hint="retry; if it keeps failing, see the server's log")


def assembled_error(exc: Exception) -> ServerError:
    """A stream that carried an error event (or ended early) as the ``ServerError`` a plain answer would give."""
    error = getattr(exc, "error", {}) or {}
    code = error.get("code") if isinstance(error, dict) else None
    status = code if isinstance(code, int) and 400 <= code < 600 else 500
    message = str(error.get("message", exc)) if isinstance(error, dict) else str(exc)
    return ServerError(status, message, body=json.dumps({"error": error}))
