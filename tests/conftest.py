"""Shared fixtures: the real engine and the real SmolLM2 model (installed by `make test`)."""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import uvicorn
from hypothesis import HealthCheck, settings

from helpers.logs import LogWindow
from tiankong import paths
from tiankong.engine import EngineBinary, EngineConfig, EngineProcess, locate_engine
from tiankong.gateway import GatewayState, create_app
from tiankong.gateway.listen import server_config
from tiankong.models import DEFAULT_MODEL, TEST_MODEL, model_path

# hypothesis' too_slow health check is a wall-clock limit in disguise: on shared cores (an engine busy beside the
# tests) drawing from a regex can take seconds. Property tests keep their example counts; no timing decides them.
settings.register_profile("tiankong", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("tiankong")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "unit: the unit tier (tests/unit/: no engine, a scripted transport)")
    if getattr(config.option, "numprocesses", None):
        # the modules go out in the order pytest_collection_modifyitems gives them (the slowest first), not by count
        config.option.loadscopereorder = False


# --- parallel workers: `make test` runs pytest-xdist on two workers (`-n 2`; TEST_WORKERS in the Makefile) --------
# Each worker takes whole modules (module-scoped engines start once), the Ray modules as one unit (one local Ray
# cluster at a time), the slowest modules first. Each worker owns a disjoint share of the CPUs: llama.cpp sizes its
# threads by the usable CPUs (engine/flags.py) and its threads spin while they wait, so two engines with a thread per
# core each would slow each other down; pinned, they do not. Each worker also logs to a logs dir of its own (an
# engine start prunes the oldest logs, never another worker's live one).

#: modules that start a local Ray cluster: run one after another, on one worker
RAY_MODULES = ("test_batch_ray.py", "test_batch_dedupe.py")
#: seconds each slow module took on its worker (one core each, `-n 2 --durations=0 --junitxml`, 2026-12-07, raw
#: benchmarks/results/ci-time/suite-2026-12-07-after.txt): scheduled first, the longest first, so no worker is left
#: with one long module at the end; the order matters only for the wall time
SLOW_MODULES: dict[str, float] = {
    "test_tune_long.py": 319, "test_batch_ray.py": 204, "test_deciders.py": 183, "test_batch_dedupe.py": 130,
    "test_batch_api.py": 106, "test_client_gateway_busy.py": 99, "test_draft_replace.py": 72, "test_lora.py": 69,
    "test_gateway_fuzz.py": 58, "test_fast_forward.py": 57, "test_batch.py": 53, "test_setfit.py": 53,
    "test_readme.py": 52, "test_tools_template.py": 52, "test_dedupe.py": 44, "test_obvious_workflows.py": 43,
    "test_cascade.py": 43, "test_batch_order.py": 41, "test_cli_verbs_sweep.py": 38, "test_evals.py": 38,
    "test_cli_sweep.py": 37, "test_gateway_admission.py": 36, "test_schema_rewrites.py": 32, "test_cli.py": 32,
}


def _sigterm_as_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


# `timeout`, CI's cancel and `kill` send SIGTERM, which ends a Python process at once: no fixture's teardown ran, and
# every engine or gateway a fixture started in a session of its own (they are, so a test can kill them alone) was
# left running. Read as Ctrl-C instead, it lets pytest tear its fixtures down and stop them (in each xdist worker too).
if threading.current_thread() is threading.main_thread():
    signal.signal(signal.SIGTERM, _sigterm_as_interrupt)


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return "ray" if Path(module).name in RAY_MODULES else module

    return ModuleScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The slowest modules first (stable: every worker must collect the same order); a plain run is unchanged."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        def weight(item: pytest.Item) -> float:
            name = Path(str(item.fspath)).name
            return -max(SLOW_MODULES.get(name, 0.0), sum(SLOW_MODULES.get(m, 0.0) for m in RAY_MODULES)
                        if name in RAY_MODULES else 0.0)
        items.sort(key=weight)


def _own_share_of_the_cpus(worker: str) -> None:
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    cpus = sorted(os.sched_getaffinity(0))
    if count < 2 or len(cpus) < count:
        return
    share = set(cpus[int(worker.removeprefix("gw")) % count::count])
    for task in Path("/proc/self/task").iterdir():  # every thread: the child processes of any of them inherit it
        with contextlib.suppress(OSError):
            os.sched_setaffinity(int(task.name), share)


#: the cache dir's entries a run keeps for the next (engine builds, downloads, feature caches, converters, the LoRA
#: trainings' loaded base model, the demo adapter test_lora.py trains once per machine, the embedding part's
#: checkpoint test_setfit.py fine-tunes): made
#: in the user's cache dir before a worker links to them, so
#: what a worker adds there outlives it; only ``logs`` is the worker's own
SHARED_CACHE_ENTRIES = ("engine", "downloads", "deciders", "lora-convert", "lora-base", "evals", "test-adapters",
                        "checkpoints")


def _own_logs_dir(worker: str) -> None:
    for entry in SHARED_CACHE_ENTRIES:
        (paths.cache_dir() / entry).mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix=f"tiankong-cache-{worker}-"))
    atexit.register(shutil.rmtree, root, True)
    os.environ["TIANKONG_CACHE_DIR"] = str(cache_with_own_logs(root))

HERE = Path(__file__).parent
FAKE_SERVER = HERE / "helpers" / "fake_server.py"
TIANKONG = str(Path(sys.executable).parent / "tiankong")


#: where the installed models are (``make test`` pulls them there); every test module gets a data dir of its own
#: that links to it, so a batch, decider or adapter one module leaves behind is never picked up by another
#: module's gateway (a gateway resumes every unfinished batch in its data dir at start-up), and the user's own
#: data dir is never written by the tests
INSTALLED_DATA_DIR = paths.data_dir()


@pytest.fixture(scope="module", autouse=True)
def module_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("data")
    (root / "models").symlink_to(INSTALLED_DATA_DIR / "models", target_is_directory=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TIANKONG_DATA_DIR", str(root))
        yield root


@pytest.fixture(scope="session")
def engine_binary() -> EngineBinary:
    return locate_engine()


@pytest.fixture(scope="session")
def smol_path() -> Path:
    return model_path(TEST_MODEL)


@pytest.fixture(scope="session")
def default_model_path() -> Path:
    return model_path(DEFAULT_MODEL)


@pytest.fixture(scope="session")
def smol_engine(engine_binary: EngineBinary, smol_path: Path,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineProcess]:
    """One SmolLM2 engine shared by read-only tests (2 slots, 4096 ctx). Its log is in a logs dir of its own
    (the other entries of the cache dir linked), so no other engine's start-up prunes it while tests read it."""
    engine = EngineProcess(EngineConfig(model=smol_path, ctx=4096, slots=2, alias=TEST_MODEL), engine_binary)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TIANKONG_CACHE_DIR", str(cache_with_own_logs(tmp_path_factory.mktemp("smol-cache"))))
        engine.start()
    try:
        yield engine
    finally:
        engine.stop()


def cache_with_own_logs(root: Path) -> Path:
    """A cache dir whose entries link to the user's (engine builds, downloads) but whose ``logs`` is its own."""
    installed = paths.cache_dir()
    for entry in installed.iterdir() if installed.exists() else ():
        if entry.name != "logs":
            (root / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
    (root / "logs").mkdir()
    return root


if _WORKER := os.environ.get("PYTEST_XDIST_WORKER"):
    _own_share_of_the_cpus(_WORKER)
    _own_logs_dir(_WORKER)


@pytest.fixture
def smol_log(smol_engine: EngineProcess) -> LogWindow:
    """What the shared SmolLM2 engine logs during this test only (``.text()``): never another test's lines."""
    return LogWindow(smol_engine)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """Each real-engine test gets its own slice of the shared engine's log, shown with its failure."""
    engine = getattr(item, "funcargs", {}).get("smol_engine")
    window = LogWindow(engine) if isinstance(engine, EngineProcess) else None
    outcome = yield
    if window is not None and outcome.excinfo is not None:
        try:
            text = window.text()
        except AssertionError as exc:
            text = str(exc)
        item.add_report_section("call", "smol_engine log (this test)", "\n".join(text.splitlines()[-80:]))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0); treat it as gone
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 300,
            input: str | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([TIANKONG, *args], capture_output=True, text=True, env=full_env, timeout=timeout,
                          input=input, cwd=cwd)


def assert_one_line_error(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert proc.returncode != 0, proc.stdout
    err = proc.stderr.strip()
    assert "Traceback" not in proc.stderr, proc.stderr
    assert err.startswith("error:") and len(err.splitlines()) == 1, err
    for needle in needles:
        assert needle.lower() in err.lower(), err


def wait_until(predicate: Callable[[], bool], timeout_s: float = 60.0, step_s: float = 0.1) -> bool:
    """Poll ``predicate`` until it is true or ``timeout_s`` passed (a bounded wait, not a timing assertion)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step_s)
    return False


@contextmanager
def serve_app(state: GatewayState, header_timeout_s: float = 10.0) -> Iterator[str]:
    """The gateway app in real uvicorn (a thread) on a free loopback port, stopped on exit."""
    port = free_port()
    server = uvicorn.Server(server_config(create_app(state), "127.0.0.1", port, header_timeout_s=header_timeout_s,
                                          log_level="error", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    assert wait_until(lambda: server.started, 30), "gateway did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
