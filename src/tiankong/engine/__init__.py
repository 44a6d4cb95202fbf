"""Build/locate llama-server, turn a typed config into its argv, supervise its process (``launch`` starts one)."""

from .build import EngineBinary, locate_engine
from .flags import EngineConfig, SpecAuto
from .install import install_engine
from .launcher import launch
from .process import EngineProcess, EngineState
from .rpc import RpcWorker, locate_rpc_server
from .spec import SpecMonitor, SpecStats, engine_spec_stats, spec_from_metrics, spec_from_timings
from .spec_auto import SpecDecision, SpecMeasurement, resolve_auto_spec
from .supervised import NO_RESTARTS, ProcessState, RestartPolicy
from .vocab import VocabMismatch, check_draft_compatible

__all__ = [
    "NO_RESTARTS", "EngineBinary", "EngineConfig", "EngineProcess", "EngineState", "ProcessState", "RestartPolicy",
    "RpcWorker", "SpecAuto", "SpecDecision", "SpecMeasurement", "SpecMonitor", "SpecStats", "VocabMismatch",
    "check_draft_compatible", "engine_spec_stats", "install_engine", "launch", "locate_engine",
    "locate_rpc_server", "resolve_auto_spec", "spec_from_metrics", "spec_from_timings",
]
