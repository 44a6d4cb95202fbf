"""tiankong (填空): make a small local language model a deterministic, constrained part of a pipeline."""

from .client import AsyncClient, ChatResult, Client, StreamChunk, Usage
from .errors import (
    ConfigError,
    EngineError,
    OutputError,
    TiankongError,
    TransportError,
)

__version__ = "0.1.0"

__all__ = [
    "AsyncClient", "ChatResult", "Client", "ConfigError", "EngineError", "OutputError", "StreamChunk",
    "TiankongError", "TransportError", "Usage", "__version__",
]
