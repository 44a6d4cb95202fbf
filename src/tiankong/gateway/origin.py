"""Who may send what, before a route runs: DNS rebinding, cross-site requests and non-JSON bodies.

A keyless gateway trusts everyone who can reach its loopback port. A web page in the user's browser can reach it
too: by a "simple" cross-site POST (``Content-Type: text/plain`` or a form, no CORS preflight), or by rebinding its
own domain name to 127.0.0.1 (the request then carries ``Host: attacker.example``). So:

* every POST body must be declared JSON (``application/json`` or ``…+json``): a browser cannot send that
  cross-site without a CORS preflight, and the gateway answers no preflight (no CORS unless configured).
  The one exception is the Batch API's upload (``POST /v1/files``, ``multipart/form-data`` as OpenAI's API
  takes it): a browser sends ``Origin`` with every form POST, and a keyless gateway refuses an upload with any
  ``Origin`` (``null`` from a sandboxed frame included); an uploaded file does nothing until a JSON request
  starts a batch on it;
* without API keys, the ``Host`` must be a loopback name or address, and an ``Origin`` header, when a browser
  sends one, must be loopback too (the gateway's own ``/ui`` page is same-origin).

With keys, a request needs a key whatever its origin, so only the content type is checked. This is a pure ASGI
wrapper (no per-request objects) so it costs nothing measurable on the gateway's hot path.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import urlsplit

from .responses import error_body

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

LOOPBACK_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost")
UPLOAD_PATH = "/v1/files"


def is_loopback_host(host: str) -> bool:
    """``host`` (a Host header's name, without port, or a bare address) is loopback."""
    name = host.strip().lower().rstrip(".")
    if name.startswith("[") and "]" in name:
        name = name[1:name.index("]")]
    if name in LOOPBACK_NAMES or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _host_name(header: str) -> str:
    if header.startswith("["):
        return header[: header.find("]") + 1]
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def _is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


class OriginCheck:
    """Refuses (403/415, OpenAI-shaped) what a keyless loopback gateway must not serve; see the module text."""

    def __init__(self, app: ASGIApp, *, keyless: Callable[[], bool]) -> None:
        self.app, self.keyless = app, keyless

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refused = self._refusal(scope)
            if refused is not None:
                await _answer(send, *refused)
                return
        await self.app(scope, receive, send)

    def _refusal(self, scope: Scope) -> tuple[int, str, str] | None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        if self.keyless():
            host = headers.get("host", "")
            if host and not is_loopback_host(_host_name(host)):
                return 403, (f"Host {host!r} is not this gateway's loopback address: a gateway without API keys "
                             "answers loopback names only (DNS rebinding)"), "host_not_allowed"
            origin = headers.get("origin")
            if origin and scope.get("path") == UPLOAD_PATH and scope.get("method") == "POST":
                return 403, (f"an upload from a web page ({origin}) is refused: this gateway has no API keys "
                             "(upload with a client, which sends no Origin, or configure server.api_keys)"), \
                    "origin_not_allowed"
            if origin and origin != "null" and not is_loopback_host(urlsplit(origin).hostname or ""):
                return 403, (f"cross-site request from {origin} refused: this gateway has no API keys, so only "
                             "pages on loopback may call it (configure server.api_keys to serve others)"), \
                    "origin_not_allowed"
        content_type = headers.get("content-type", "")
        # a cancel takes no body: a bare POST from a client (curl -X POST) is served; one from a page (any Origin,
        # "null" too: a sandboxed frame) still needs the JSON content type, which a cross-site page cannot send
        # without a preflight
        bodyless_cancel = (not content_type and str(scope.get("path", "")).endswith("/cancel") and "origin" not in
                           headers and headers.get("content-length", "0") == "0" and "transfer-encoding" not in headers)
        if scope.get("method") == "POST" and not _is_json(content_type) and not bodyless_cancel and not (
                scope.get("path") == UPLOAD_PATH and content_type.lower().startswith("multipart/form-data")):
            got = headers.get("content-type") or "none"
            if scope.get("path") == UPLOAD_PATH:
                return 415, (f"an upload is multipart/form-data with a 'file' part and purpose=batch (got {got!r}): "
                             "e.g. curl -F purpose=batch -F file=@requests.jsonl"), "unsupported_media_type"
            return 415, f"POST bodies must be JSON with Content-Type: application/json (got {got!r})", \
                "unsupported_media_type"
        return None


async def _answer(send: Send, status: int, message: str, code: str) -> None:
    body = json.dumps(error_body(message, "invalid_request_error", code)).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
