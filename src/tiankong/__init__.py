"""tiankong (填空): make a small local language model a deterministic, constrained part of a pipeline."""

from importlib import metadata as _metadata

from .api import AsyncClient, Client
from .batch.tasks import MissingField
from .client import ChatResult, StreamChunk, Usage
from .client.assemble import StreamFailed
from .client.images import InvalidImage, InvalidMessages
from .deciders import (
    Decider,
    DeciderEngineError,
    DeciderModelMismatch,
    DeciderNotFound,
    ExamplesError,
    TuneReport,
    tune_classify,
)
from .deciders.registry import InvalidDecider
from .engine.vocab import VocabMismatch
from .errors import (
    ConfigError,
    EngineBuildError,
    EngineError,
    EngineNotFound,
    EngineStartError,
    FlagError,
    InputTooLong,
    InvalidModelFile,
    InvalidSchema,
    ModelNotFound,
    ModelNotInstalled,
    OutputError,
    PortInUse,
    RetriesExhausted,
    SchemaNotSupported,
    ServerError,
    TiankongError,
    TransportError,
    TruncatedOutput,
)
from .lora.convert import ConversionError
from .lora.meta import InvalidAdapter
from .lora.registry import AdapterNotFound
from .lora.train import MissingTrainingExtra
from .structured import Decision, Structured
from .structured.flow import UnscorableLabels
from .structured.regex_safety import UnsafePattern
from .tasks import (
    Classification,
    Compression,
    Entity,
    EscalationTarget,
    GuardVerdict,
    Ranked,
    Redaction,
    Reranking,
    Rewrite,
    Route,
    RouteDecision,
    Summary,
)
from .tasks.specs import SPECS, TaskSpec

try:
    __version__ = _metadata.version("tiankong")  # one source: pyproject.toml's version
except _metadata.PackageNotFoundError:  # a source tree that is not installed
    __version__ = "0.0.0+unknown"

__all__ = [
    # clients and their answers
    "AsyncClient", "ChatResult", "Client", "Decision", "StreamChunk", "Structured", "Usage",
    # task results and the task registry
    "SPECS", "Classification", "Compression", "Entity", "GuardVerdict", "Ranked", "Redaction", "Reranking",
    "Rewrite", "Route", "RouteDecision", "Summary", "TaskSpec", "EscalationTarget",
    # deciders
    "Decider", "TuneReport", "tune_classify",
    # errors: one root, branches by what the caller can do
    "AdapterNotFound", "ConfigError", "ConversionError", "DeciderEngineError", "DeciderModelMismatch",
    "DeciderNotFound", "EngineBuildError", "EngineError", "EngineNotFound", "EngineStartError", "ExamplesError",
    "FlagError", "InputTooLong", "InvalidAdapter", "InvalidDecider", "InvalidImage", "InvalidMessages",
    "InvalidModelFile", "InvalidSchema", "MissingField", "MissingTrainingExtra", "ModelNotFound",
    "ModelNotInstalled", "OutputError", "PortInUse", "RetriesExhausted", "SchemaNotSupported", "ServerError",
    "StreamFailed", "TiankongError", "TransportError", "TruncatedOutput", "UnsafePattern", "UnscorableLabels",
    "VocabMismatch",
    "__version__",
]
