"""OpenAI-compatible transport clients over httpx with llama.cpp extensions.

``BaseClient`` (sync) and ``AsyncBaseClient`` speak HTTP; ``tiankong.Client`` / ``tiankong.AsyncClient``
add the structured and task methods on top of them.
"""

from typing import TYPE_CHECKING, Any

from ._shared import ChatResult, StreamChunk, Usage
from .images import InvalidImage, image_part, validate_messages

if TYPE_CHECKING:
    from .aio import AsyncBaseClient
    from .sync import BaseClient

__all__ = [
    "AsyncBaseClient", "BaseClient", "ChatResult", "InvalidImage", "StreamChunk", "Usage", "image_part",
    "validate_messages",
]


def __getattr__(name: str) -> Any:
    """The transports (httpx, the engine layer for embedded engines) load on first use: the flows and the CLI's
    start-up only need the pure helpers."""
    if name == "BaseClient":
        from .sync import BaseClient

        return BaseClient
    if name == "AsyncBaseClient":
        from .aio import AsyncBaseClient

        return AsyncBaseClient
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
