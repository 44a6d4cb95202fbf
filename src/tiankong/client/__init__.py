"""OpenAI-compatible clients over httpx with llama.cpp extensions (sync ``Client``, async ``AsyncClient``)."""

from ._shared import ChatResult, StreamChunk, Usage
from .aio import AsyncClient
from .sync import Client

__all__ = ["AsyncClient", "ChatResult", "Client", "StreamChunk", "Usage"]
