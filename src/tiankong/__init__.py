"""tiankong (填空): make a small local language model a deterministic, constrained part of a pipeline.

The public names below are imported on first use (PEP 562): ``import tiankong`` and the CLI's start-up do not
pay for scikit-learn, jsonschema's format checkers or the HTTP stack until something needs them."""

import importlib as _importlib
from importlib import metadata as _metadata
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .api import AsyncClient, Client
    from .batch.batches import BatchNotFound, IllegalBatchTransition
    from .batch.engines import EngineGone
    from .batch.files import FileInUse, FileNotFound, FileTooLarge, InvalidFile, QuotaExceeded
    from .batch.ray_exec import RemoteItemError
    from .batch.store import OutputLocked
    from .batch.tasks import MissingField
    from .client import ChatResult, StreamChunk, Usage
    from .client.assemble import StreamFailed
    from .client.images import InvalidImage, InvalidMessages
    from .deciders import Decider, DeciderEngineError, DeciderModelMismatch, DeciderNotFound
    from .deciders.registry import InvalidDecider, NoSuchDecider
    from .dedupe import Dedupe
    from .engine.parts import PartMissing
    from .engine.pool import PoolFull
    from .engine.supervised import IllegalTransition
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
        RemoteConfigError,
        RemoteOutputError,
        RemoteRetriesExhausted,
        RemoteTruncatedOutput,
        RetriesExhausted,
        SchemaNotSupported,
        ServerError,
        TiankongError,
        TransportError,
        TruncatedOutput,
        Unreachable,
    )
    from .lora.convert import ConversionError
    from .lora.meta import InvalidAdapter
    from .lora.registry import AdapterNotFound
    from .lora.train import MissingTrainingExtra
    from .structured import Decision, Structured
    from .structured.flow import UnscorableLabels
    from .structured.regex_safety import AmbiguousPattern, UnsafePattern
    from .structured.tools import Tool, ToolCall, ToolCalls
    from .tasks import (
        Answer,
        Answers,
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
        SqlQuery,
        Summary,
    )
    from .tasks.specs import SPECS, TaskSpec
    from .tuning import ExamplesError, TuneReport, tune_classify

#: public name → the module that defines it
_EXPORTS = {
    "AdapterNotFound": ".lora.registry",
    "AsyncClient": ".api",
    "BatchNotFound": ".batch.batches",
    "ChatResult": ".client",
    "Answer": ".tasks",
    "Answers": ".tasks",
    "Classification": ".tasks",
    "Client": ".api",
    "Compression": ".tasks",
    "ConfigError": ".errors",
    "ConversionError": ".models.convert",
    "PartMissing": ".engine.parts",
    "Decider": ".deciders",
    "DeciderEngineError": ".deciders",
    "DeciderModelMismatch": ".deciders",
    "DeciderNotFound": ".deciders",
    "Dedupe": ".dedupe",
    "Decision": ".structured",
    "EngineBuildError": ".errors",
    "EngineError": ".errors",
    "EngineGone": ".batch.engines",
    "EngineNotFound": ".errors",
    "EngineStartError": ".errors",
    "Entity": ".tasks",
    "EscalationTarget": ".tasks",
    "ExamplesError": ".tuning",
    "FileNotFound": ".batch.files",
    "FileInUse": ".batch.files",
    "FileTooLarge": ".batch.files",
    "FlagError": ".errors",
    "GuardVerdict": ".tasks",
    "IllegalBatchTransition": ".batch.batches",
    "IllegalTransition": ".engine.supervised",
    "InputTooLong": ".errors",
    "InvalidAdapter": ".lora.meta",
    "InvalidDecider": ".deciders.registry",
    "InvalidFile": ".batch.files",
    "InvalidImage": ".client.images",
    "InvalidMessages": ".client.images",
    "InvalidModelFile": ".errors",
    "InvalidSchema": ".errors",
    "MissingField": ".batch.tasks",
    "NoSuchDecider": ".deciders.registry",
    "OutputLocked": ".batch.store",
    "QuotaExceeded": ".batch.files",
    "MissingTrainingExtra": ".lora.train",
    "ModelNotFound": ".errors",
    "ModelNotInstalled": ".errors",
    "OutputError": ".errors",
    "PoolFull": ".engine.pool",
    "PortInUse": ".errors",
    "Ranked": ".tasks",
    "Redaction": ".tasks",
    "RemoteConfigError": ".errors",
    "RemoteItemError": ".batch.ray_exec",
    "RemoteOutputError": ".errors",
    "RemoteRetriesExhausted": ".errors",
    "RemoteTruncatedOutput": ".errors",
    "Reranking": ".tasks",
    "RetriesExhausted": ".errors",
    "Rewrite": ".tasks",
    "Route": ".tasks",
    "RouteDecision": ".tasks",
    "SPECS": ".tasks.specs",
    "SchemaNotSupported": ".errors",
    "SqlQuery": ".tasks",
    "Tool": ".structured.tools",
    "ToolCall": ".structured.tools",
    "ToolCalls": ".structured.tools",
    "ServerError": ".errors",
    "StreamChunk": ".client",
    "StreamFailed": ".client.assemble",
    "Structured": ".structured",
    "Summary": ".tasks",
    "TaskSpec": ".tasks.specs",
    "TiankongError": ".errors",
    "TransportError": ".errors",
    "Unreachable": ".errors",
    "TruncatedOutput": ".errors",
    "TuneReport": ".tuning",
    "UnsafePattern": ".structured.regex_safety",
    "AmbiguousPattern": ".structured.regex_safety",
    "UnscorableLabels": ".structured.flow",
    "Usage": ".client",
    "VocabMismatch": ".engine.vocab",
    "tune_classify": ".tuning",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tiankong' has no attribute {name!r}")
    value = getattr(_importlib.import_module(module, __name__), name)
    globals()[name] = value  # once: later lookups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


try:
    __version__ = _metadata.version("tiankong")  # one source: pyproject.toml's version
except _metadata.PackageNotFoundError:  # a source tree that is not installed
    __version__ = "0.0.0+unknown"

__all__ = [  # every public name (a test holds it to _EXPORTS)
    "AdapterNotFound", "AmbiguousPattern", "Answer", "Answers", "AsyncClient",
    "BatchNotFound", "ChatResult", "Classification", "Client",
    "Compression",
    "ConfigError", "ConversionError", "PartMissing",
    "Decider", "DeciderEngineError", "DeciderModelMismatch", "DeciderNotFound", "Dedupe",
    "Decision", "EngineBuildError", "EngineError", "EngineGone", "EngineNotFound", "EngineStartError", "Entity",
    "EscalationTarget", "ExamplesError", "FileInUse", "FileNotFound", "FileTooLarge", "FlagError", "GuardVerdict",
    "IllegalBatchTransition", "IllegalTransition", "InputTooLong", "InvalidAdapter", "InvalidDecider",
    "InvalidFile", "InvalidImage", "InvalidMessages", "InvalidModelFile", "InvalidSchema", "MissingField",
    "MissingTrainingExtra", "ModelNotFound", "ModelNotInstalled", "NoSuchDecider", "OutputError", "OutputLocked",
    "PoolFull", "PortInUse", "QuotaExceeded", "Ranked", "Redaction", "RemoteConfigError", "RemoteItemError",
    "RemoteOutputError", "RemoteRetriesExhausted", "RemoteTruncatedOutput", "Reranking",
    "RetriesExhausted", "Rewrite", "Route", "RouteDecision", "SPECS",
    "SchemaNotSupported", "ServerError", "SqlQuery", "StreamChunk", "StreamFailed", "Structured", "Summary", "TaskSpec",
    "TiankongError", "Tool", "ToolCall", "ToolCalls",
    "TransportError", "TruncatedOutput", "TuneReport", "Unreachable", "UnsafePattern", "UnscorableLabels",
    "Usage", "VocabMismatch", "__version__", "tune_classify",
]
