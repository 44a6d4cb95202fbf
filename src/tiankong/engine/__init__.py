"""Build/locate llama-server, turn a typed config into its argv, supervise its process."""

from .build import EngineBinary, install_engine, locate_engine
from .flags import EngineConfig
from .process import EngineProcess, EngineState

__all__ = ["EngineBinary", "EngineConfig", "EngineProcess", "EngineState", "install_engine", "locate_engine"]
