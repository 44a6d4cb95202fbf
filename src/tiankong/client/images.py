"""Image content parts for chat messages (vision models: an engine started with ``EngineConfig.mmproj``).

An image travels inside a message as an OpenAI content part with a base64 data URL::

    {"role": "user", "content": [
        {"type": "text", "text": "What is in the picture?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0…"}}]}

:func:`image_part` builds one from a file or bytes; :func:`validate_messages` checks every image part
before a request is sent (both clients call it): a ``data:image/…;base64,`` URL whose payload decodes and
is at most ``MAX_IMAGE_BYTES``. Remote ``http(s)://`` and ``file://`` URLs are refused with the fix: the
engine would have to download the image itself, and it reads local files only with ``--media-path``.
"""

from __future__ import annotations

import base64
import binascii
import mimetypes
from pathlib import Path
from typing import Any

from ..errors import ConfigError

MAX_IMAGE_BYTES = 10 * 1024 * 1024  # llama-server's own cap for downloaded images
_SNIFF = ((b"\x89PNG\r\n\x1a\n", "image/png"), (b"\xff\xd8\xff", "image/jpeg"), (b"GIF8", "image/gif"),
          (b"BM", "image/bmp"))


class InvalidImage(ConfigError):
    """An image content part that the engine could not use."""

    type = "invalid_image"


class InvalidMessages(ConfigError):
    """``messages`` is not a list of ``{role, content}`` objects."""

    type = "invalid_messages"
    param = "messages"


def image_part(source: str | Path | bytes, mime: str | None = None, *,
               max_bytes: int = MAX_IMAGE_BYTES) -> dict[str, Any]:
    """``{"type": "image_url", "image_url": {"url": "data:<mime>;base64,…"}}`` from a file path or bytes."""
    if isinstance(source, bytes):
        data, name = source, "the image bytes"
    else:
        path = Path(source)
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise InvalidImage(f"cannot read image {path}: {exc.strerror}", hint="check the path") from None
        name = str(path)
        mime = mime or mimetypes.guess_type(path.name)[0]
    mime = mime or sniff_mime(data)
    if not mime or not mime.startswith("image/"):
        raise InvalidImage(f"{name} is not a recognised image (type {mime or 'unknown'})",
                           hint="pass mime='image/png' (or jpeg, gif, bmp, webp) for bytes without a known header")
    _check_size(len(data), max_bytes, name)
    url = f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"
    return {"type": "image_url", "image_url": {"url": url}}


def sniff_mime(data: bytes) -> str | None:
    """The image type from the first bytes (PNG, JPEG, GIF, BMP, WebP), or None."""
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return next((mime for magic, mime in _SNIFF if data.startswith(magic)), None)


def validate_image_url(url: object, where: str = "image_url.url", *,
                       max_bytes: int = MAX_IMAGE_BYTES) -> tuple[str, int]:
    """``(mime, decoded bytes)`` of a valid image data URL; ``InvalidImage`` naming ``where`` otherwise."""
    fix = "embed the image as a data URL, e.g. tiankong.client.image_part('photo.png')"
    if not isinstance(url, str) or not url:
        raise InvalidImage(f"{where} must be a non-empty string", hint=fix)
    if url.startswith(("http://", "https://")):
        raise InvalidImage(f"{where} is a remote URL; the engine does not download images", hint=fix)
    if url.startswith("file://"):
        raise InvalidImage(f"{where} is a file:// URL; the engine does not read local files", hint=fix)
    head, comma, payload = url.partition(",")
    if not url.startswith("data:") or not comma or not head.endswith(";base64"):
        raise InvalidImage(f"{where} is not a base64 data URL (data:image/<type>;base64,<data>)", hint=fix)
    mime = head[5:].split(";", 1)[0].strip().lower()
    if not mime.startswith("image/") or mime == "image/":
        raise InvalidImage(f"{where} has type {mime or 'none'!r}, not image/*", hint="only images are supported")
    _check_size(len(payload) * 3 // 4, max_bytes, where)  # before decoding a huge payload
    try:
        data = base64.b64decode(payload.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise InvalidImage(f"{where} does not decode as base64", hint=fix) from None
    if not data:
        raise InvalidImage(f"{where} is empty", hint=fix)
    _check_size(len(data), max_bytes, where)
    if sniff_mime(data) is None:  # the bytes decide, not the declared type
        raise InvalidImage(f"{where}: its bytes are not a PNG, JPEG, GIF, BMP or WebP image",
                           hint="send the image file's bytes (tiankong.client.image_part('photo.png'))")
    return mime, len(data)


#: the chat roles OpenAI's API takes (``developer``: its newer name of ``system``; ``function``: the legacy tool
#: role), and Llama 3's tool role ``ipython``
ROLES = ("system", "developer", "user", "assistant", "tool", "function", "ipython")


def validate_messages(messages: Any, *, max_bytes: int = MAX_IMAGE_BYTES) -> None:
    """Check every message is an object with a role, and every ``image_url`` content part of a chat request."""
    if not isinstance(messages, list) or not messages:  # an empty list would generate from an empty prompt
        raise InvalidMessages("messages must be a non-empty list of {role, content} objects",
                              hint='e.g. [{"role": "user", "content": "hi"}]')
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise InvalidMessages(f"messages[{i}] must be an object with a string role, not {str(message)[:40]!r}",
                                  hint='e.g. {"role": "user", "content": "hi"}')
        if message["role"] not in ROLES:  # a template renders an unknown role as text, or drops it
            raise InvalidMessages(f"messages[{i}].role {message['role'][:40]!r} is not a chat role",
                                  hint=f"use one of {', '.join(ROLES)}")
        content = message.get("content")
        if content is None and message["role"] in ("system", "developer", "user"):  # an assistant turn may hold
            raise InvalidMessages(f"messages[{i}] ({message['role']}) has no content",  # tool_calls alone, a tool
                                  hint='give it "content": a string, or a list of content parts')  # result be null
        tool = message["role"] in ("tool", "function", "ipython")  # a tool's result may be an object (read as JSON)
        if content is not None and not isinstance(content, (str, list, dict) if tool else (str, list)):
            raise InvalidMessages(f"messages[{i}].content must be a string or a list of content parts, not "
                                  f"{type(content).__name__}", hint='e.g. {"role": "user", "content": "hi"}')
        if not isinstance(content, list):
            continue
        for j, part in enumerate(content):
            where = f"messages[{i}].content[{j}]"
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                raise InvalidImage(f"{where} must be an object with a 'type'",
                                   hint='use {"type": "text", "text": …} or {"type": "image_url", …}')
            if part["type"] != "image_url":
                continue
            image = part.get("image_url")
            if not isinstance(image, dict):
                raise InvalidImage(f"{where}.image_url must be an object {{\"url\": …}}",
                                   hint="use tiankong.client.image_part(path) to build the part")
            validate_image_url(image.get("url"), f"{where}.image_url.url", max_bytes=max_bytes)


def _check_size(size: int, max_bytes: int, where: str) -> None:
    if size > max_bytes:
        raise InvalidImage(f"{where} is {size / 1048576:.1f} MiB, more than {max_bytes / 1048576:.1f} MiB",
                           hint="downscale or recompress the image")
