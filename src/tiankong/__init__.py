"""tiankong (填空): make a small local language model a deterministic, constrained part of a pipeline."""

from .api import AsyncClient, Client
from .client import ChatResult, StreamChunk, Usage
from .errors import (
    ConfigError,
    EngineError,
    InvalidSchema,
    OutputError,
    RetriesExhausted,
    SchemaNotSupported,
    TiankongError,
    TransportError,
    TruncatedOutput,
)
from .structured import Decision, Structured

__version__ = "0.1.0"

__all__ = [
    "AsyncClient", "ChatResult", "Client", "ConfigError", "Decision", "EngineError", "InvalidSchema", "OutputError",
    "RetriesExhausted", "SchemaNotSupported", "StreamChunk", "Structured", "TiankongError", "TransportError",
    "TruncatedOutput", "Usage", "__version__",
]
