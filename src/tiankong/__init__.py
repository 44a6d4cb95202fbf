"""tiankong (填空): make a small local language model a deterministic, constrained part of a pipeline."""

from importlib import metadata as _metadata

from .api import AsyncClient, Client
from .client import ChatResult, StreamChunk, Usage
from .deciders import (
    Decider,
    DeciderEngineError,
    DeciderModelMismatch,
    DeciderNotFound,
    ExamplesError,
    TuneReport,
    tune_classify,
)
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
from .tasks import Classification, GuardVerdict

try:
    __version__ = _metadata.version("tiankong")  # one source: pyproject.toml's version
except _metadata.PackageNotFoundError:  # a source tree that is not installed
    __version__ = "0.0.0+unknown"

__all__ = [
    "AsyncClient", "ChatResult", "Classification", "Client", "ConfigError", "Decider", "DeciderEngineError",
    "DeciderModelMismatch", "DeciderNotFound", "Decision", "EngineError", "ExamplesError", "GuardVerdict",
    "InvalidSchema", "OutputError", "TuneReport", "tune_classify",
    "RetriesExhausted", "SchemaNotSupported", "StreamChunk", "Structured", "TiankongError", "TransportError",
    "TruncatedOutput", "Usage", "__version__",
]
