"""Build/locate llama-server, turn a typed config into its argv, supervise its process."""

from .build import EngineBinary, locate_engine
from .flags import EngineConfig, SpecAuto
from .install import install_engine
from .process import EngineProcess, EngineState
from .rpc import RpcWorker, locate_rpc_server
from .spec import SpecMonitor, SpecStats, engine_spec_stats, spec_from_metrics, spec_from_timings
from .spec_auto import SpecDecision, SpecMeasurement, resolve_auto_spec
from .vocab import VocabMismatch, check_draft_compatible

__all__ = [
    "EngineBinary", "EngineConfig", "EngineProcess", "EngineState", "RpcWorker", "SpecAuto", "SpecDecision",
    "SpecMeasurement", "SpecMonitor", "SpecStats", "VocabMismatch", "check_draft_compatible", "engine_spec_stats",
    "install_engine", "locate_engine", "locate_rpc_server", "resolve_auto_spec", "spec_from_metrics",
    "spec_from_timings",
]
