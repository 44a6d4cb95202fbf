"""OpenAI-compatible transport clients over httpx with llama.cpp extensions.

``BaseClient`` (sync) and ``AsyncBaseClient`` speak HTTP; ``tiankong.Client`` / ``tiankong.AsyncClient``
add the structured and task methods on top of them.
"""

from ._shared import ChatResult, StreamChunk, Usage
from .aio import AsyncBaseClient
from .images import InvalidImage, image_part, validate_messages
from .sync import BaseClient

__all__ = [
    "AsyncBaseClient", "BaseClient", "ChatResult", "InvalidImage", "StreamChunk", "Usage", "image_part",
    "validate_messages",
]
