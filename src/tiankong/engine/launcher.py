"""``launch``: the one way tiankong starts a managed llama-server.

Every place that runs an engine — the gateway's pool, a batch job (local or on a Ray node), the embedded
``Client(model=…)``, evals, benchmarks, ``models verify``, the retrieval parts and the ``spec="auto"``
measurement itself — states it as an ``EngineConfig`` (config keys → :func:`~tiankong.engine.settings.engine_config`)
and hands it here with the supervision it wants (a :class:`~tiankong.engine.supervised.RestartPolicy`). One place
therefore decides what happens before a process exists:

* ``spec="auto"`` is resolved first: the start-up A/B (``spec_auto.resolve_auto_spec``) starts and stops its own
  engines, and the process is then built with the configuration it chose and its decision (which starts the
  run-time acceptance monitor). ``EngineProcess`` itself never measures, so the process module does not depend on
  the measurement; the measurement builds its engines (never ``spec="auto"`` ones) from ``EngineProcess`` directly,
below this module.
* the process is built with the policy, and started unless ``start=False`` (a pool entry starts on demand).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from .build import EngineBinary
from .flags import EngineConfig
from .process import EngineProcess
from .spec_auto import SpecDecision, resolve_auto_spec
from .supervised import NO_RESTARTS as NO_RESTARTS  # re-exported for the tools that launch with it
from .supervised import RestartPolicy


def launch(
    config: EngineConfig,
    binary: EngineBinary | Path | str | None = None,
    *,
    policy: RestartPolicy | None = None,
    start: bool = True,
    startup_timeout_s: float = 180.0,
    stop_grace_s: float = 10.0,
    restart_after_requests: int | None = None,
    on_restart: Callable[[str], None] | None = None,
    on_give_up: Callable[[], None] | None = None,
    log: Callable[[str], None] | None = None,
) -> EngineProcess:
    """Resolve ``spec="auto"`` (measuring), build the supervised ``EngineProcess`` and start it (``start``).

    ``policy``: the restart rule (default ``RestartPolicy()``: 5 crash restarts in 300 s, then retry with a
    backoff up to 60 s); ``log``: progress lines (the A/B's numbers, slow start-ups, crashes)."""
    decision: SpecDecision | None = None
    if config.spec == "auto":
        decision = resolve_auto_spec(config, binary.path if isinstance(binary, EngineBinary) else binary, log=log,
                                     startup_timeout_s=startup_timeout_s)
        assert decision.config is not None
        config = decision.config
    engine = EngineProcess(config, binary, policy=policy or RestartPolicy(), startup_timeout_s=startup_timeout_s,
                           stop_grace_s=stop_grace_s, restart_after_requests=restart_after_requests,
                           on_restart=on_restart, on_give_up=on_give_up, log=log, spec_decision=decision)
    return engine.start() if start else engine
