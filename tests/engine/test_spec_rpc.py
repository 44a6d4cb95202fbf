"""Speculative decoding (vocab check, flags, auto mode, monitor), multimodal arguments, rpc-server workers.

Real llama-server with SmolLM2 (threads=1, one engine at a time). A draft/target pair with the same
vocabulary is SmolLM2 with itself; SmolLM2 vs Qwen2.5-Coder-0.5B is a pair with different vocabularies.
No vision model is available offline: image parts are checked for validation and request shaping (the
text-only engine names the missing mmproj).
"""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import TIANKONG, assert_one_line_error, free_port, pid_alive, run_cli, wait_until
from tiankong.client import BaseClient, InvalidImage, image_part, validate_messages
from tiankong.engine import (
    EngineConfig,
    EngineProcess,
    ProcessState,
    RpcWorker,
    SpecAuto,
    SpecMonitor,
    VocabMismatch,
    check_draft_compatible,
    engine_spec_stats,
    launch,
    spec_from_timings,
)
from tiankong.engine.spec import RollingAcceptance, SpecStats
from tiankong.engine.spec_auto import decide
from tiankong.errors import ConfigError, FlagError, ServerError
from tiankong.models import TEST_MODEL

MODEL = Path("/models/m.gguf")
PNG_1X1 = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")


def small(model: Path, **kw: object) -> EngineConfig:
    return EngineConfig(model=model, ctx=1024, slots=1, threads=1, **kw)


def cmdline(pid: int | None) -> list[str]:
    assert pid is not None
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")


# --- vocabulary compatibility ------------------------------------------------------------------------


def test_vocab_mismatch_names_both_models_and_the_difference(smol_path: Path, default_model_path: Path) -> None:
    with pytest.raises(VocabMismatch) as err:
        check_draft_compatible(smol_path, default_model_path)
    message = str(err.value)
    assert str(smol_path) in message and str(default_model_path) in message
    assert "vocabulary size" in message and isinstance(err.value, ConfigError)
    check_draft_compatible(smol_path, smol_path)  # same vocabulary: no error


def test_engine_refuses_incompatible_draft_before_spawning(smol_path: Path, default_model_path: Path) -> None:
    engine = EngineProcess(small(smol_path, draft_model=default_model_path, spec_type="draft-simple"))
    with pytest.raises(VocabMismatch):
        engine.start()
    assert engine.pid is None


# --- flag table --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("kw", "needle"), [
    ({"draft_model": Path("/d.gguf"), "spec_type": "ngram-simple"}, "does not use it"),
    ({"spec_type": "ngram-simple,bogus"}, "unknown spec_type"),
    ({"spec": "auto"}, "nothing to try"),
    ({"spec": "auto", "draft_model": Path("/d.gguf"), "spec_type": "draft-simple"}, "chooses spec_type"),
    ({"spec": "fast"}, "spec must be"),
    ({"spec": "auto", "spec_auto": SpecAuto(ngram_types=("draft-simple",))}, "unknown n-gram type"),
    ({"spec": "auto", "draft_model": Path("/d.gguf"), "spec_auto": SpecAuto(min_acceptance=1.5)}, "min_acceptance"),
    ({"spec_type": "ngram-mod", "spec_draft_n_max": -1}, "spec_draft_n_max"),
    ({"rpc": ["127.0.0.1"]}, "host:port"),
    ({"rpc": ["127.0.0.1:50052,127.0.0.1:50053"]}, "host:port"),
    ({"extra_args": ["--rpc", "h:1"]}, "EngineConfig.rpc"),
    ({"extra_args": ["--mmproj", "p.gguf"]}, "EngineConfig.mmproj"),
])
def test_spec_rpc_mmproj_flags_are_validated(kw: dict[str, object], needle: str) -> None:
    with pytest.raises(FlagError, match=needle):
        EngineConfig(model=MODEL, **kw).to_argv("llama-server")


def test_flags_reach_argv() -> None:
    args = EngineConfig(model=MODEL, draft_model=Path("/d.gguf"), spec_type="draft-simple,ngram-mod",
                        spec_draft_n_max=8, draft_gpu_layers=0, mmproj=Path("/p.gguf"),
                        rpc=["127.0.0.1:50052", "10.0.0.2:50052"]).to_argv("llama-server")
    assert args[args.index("--spec-type") + 1] == "draft-simple,ngram-mod"
    assert args[args.index("-md") + 1] == "/d.gguf" and args[args.index("-ngld") + 1] == "0"
    assert args[args.index("--mmproj") + 1] == "/p.gguf"
    assert args[args.index("--rpc") + 1] == "127.0.0.1:50052,10.0.0.2:50052"
    ngram = EngineConfig(model=MODEL, spec_type="ngram-simple").to_argv("llama-server")
    assert ngram[ngram.index("--spec-type") + 1] == "ngram-simple" and "-md" not in ngram
    auto = EngineConfig(model=MODEL, spec="auto", draft_model=Path("/d.gguf"))
    auto.validate()  # valid, but decided at start-up, never passed as a flag
    with pytest.raises(FlagError, match="start-up"):
        auto.to_argv("llama-server")


def test_engine_settings_map_to_engine_config(smol_path: Path, tmp_path: Path) -> None:
    from tiankong.config import load_config
    from tiankong.engine.settings import speed_kwargs

    toml = tmp_path / "tiankong.toml"
    toml.write_text(f'[engine]\ndraft_model = "{TEST_MODEL}"\nspec = "auto"\nspec_auto_n_max = [2]\n'
                    'spec_auto_ngram = ["ngram-mod"]\nrpc = ["127.0.0.1:50052"]\n', encoding="utf-8")
    settings = load_config(toml).engine
    config = EngineConfig(model=smol_path, **speed_kwargs(settings))
    config.validate()
    assert config.draft_model is not None and config.draft_model.resolve() == smol_path.resolve()  # data dir link
    assert config.spec == "auto" and config.rpc == ["127.0.0.1:50052"]
    assert config.spec_auto.n_max_values == (2,) and config.spec_auto.ngram_types == ("ngram-mod",)
    toml.write_text('[engine]\nspec = "always"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match="engine.spec"):
        load_config(toml)


def test_mmproj_is_checked_before_spawning(smol_path: Path, tmp_path: Path) -> None:
    garbage = tmp_path / "mmproj.gguf"
    garbage.write_bytes(b"not a gguf file")
    for mmproj, needle in ((garbage, "not a GGUF"), (smol_path, "not a multimodal projector"),
                           (tmp_path / "missing.gguf", "cannot be read")):
        engine = EngineProcess(small(smol_path, mmproj=mmproj))
        with pytest.raises(FlagError, match=needle):
            engine.start()
        assert engine.pid is None


# --- counters and the rolling window (pure) ----------------------------------------------------------


def test_rolling_acceptance_window_and_restart() -> None:
    rolling = RollingAcceptance(window_tokens=10)
    rolling.observe(SpecStats(drafted=10, accepted=9))
    assert not rolling.below(0.6)
    rolling.observe(SpecStats(drafted=30, accepted=11))  # last 20 drafted: 2 accepted
    assert rolling.window().drafted == 20 and rolling.below(0.6)
    window = rolling.observe(SpecStats(drafted=12, accepted=12))  # counters went back: engine restarted
    assert window.drafted >= 10 and not rolling.below(0.6)
    assert spec_from_timings({"draft_n": 5, "draft_n_accepted": 4}) == SpecStats(5, 4)
    assert spec_from_timings({"predicted_n": 3}).acceptance is None


# --- speculative decoding on a real engine -----------------------------------------------------------


def test_auto_mode_decides_from_measured_numbers(smol_path: Path) -> None:
    auto = SpecAuto(n_max_values=(4,), gen_tokens=16, prompts=("Count from one to ten in words.",),
                    check_interval_s=3600.0)
    engine = launch(small(smol_path, draft_model=smol_path, spec="auto", spec_auto=auto), start=False)
    with engine:
        decision = engine.spec_decision
        assert decision is not None and decision.baseline.tok_s > 0
        [candidate] = decision.candidates
        assert candidate.error is None and candidate.stats.drafted > 0 and candidate.tok_s > 0
        speedup, rate = decision.speedup(candidate), candidate.stats.acceptance
        assert rate is not None
        assert decision.enabled == (speedup >= 1.1 and rate >= 0.6), decision.reason
        assert ("--spec-type" in cmdline(engine.pid)) == decision.enabled
        assert (engine.spec_monitor is not None) == decision.enabled
    # the same measured numbers on both sides of the rule
    chosen, _ = decide(decision.baseline, decision.candidates, min_speedup=speedup * 0.5, min_acceptance=0.0)
    assert chosen is candidate
    chosen, reason = decide(decision.baseline, decision.candidates, min_speedup=speedup * 2, min_acceptance=0.0)
    assert chosen is None and "off" in reason
    chosen, _ = decide(decision.baseline, decision.candidates, min_speedup=0.0, min_acceptance=min(1.0, rate + 0.01))
    assert (chosen is None) == (rate + 0.01 <= 1.0)


def test_timings_count_drafts_and_monitor_turns_speculation_off(smol_path: Path) -> None:
    config = small(smol_path, draft_model=smol_path, spec_type="draft-simple", spec_draft_n_max=4)
    with EngineProcess(config) as engine:
        with BaseClient(engine.url) as client:
            greedy = client.chat("Name three colours.", max_tokens=16)
            stats = spec_from_timings(greedy.timings)
            assert stats.drafted > 0 and 0 <= stats.accepted <= stats.drafted
            # a hot sampler disagrees with the draft's greedy guesses: acceptance drops
            client.chat("Tell me a story about a cat.", max_tokens=48, temperature=1.5, seed=7,
                        extra={"top_k": 0, "top_p": 1.0, "min_p": 0.0})
        total = engine_spec_stats(engine.url)
        assert total.drafted >= stats.drafted and total.acceptance is not None and total.acceptance < 0.9
        old_pid = engine.pid
        monitor = SpecMonitor(engine, min_acceptance=0.9, window_tokens=16)
        assert monitor.check_once() and monitor.disabled_reason
        assert engine.pid != old_pid and "--spec-type" not in cmdline(engine.pid)
        assert engine.config.draft_model is None
        with BaseClient(engine.url) as client:  # a restart may pick a new port (config.port=0)
            after = client.chat("Name three colours.", max_tokens=8)
        assert after.text and spec_from_timings(after.timings).drafted == 0


def test_gateway_metrics_count_drafted_and_accepted_tokens(smol_path: Path) -> None:
    from starlette.testclient import TestClient

    from tiankong.gateway.app import GatewayState, create_app

    config = small(smol_path, draft_model=smol_path, spec_type="draft-simple", spec_draft_n_max=4, alias="smol")
    with EngineProcess(config) as engine, TestClient(create_app(GatewayState.for_engine(engine, "smol")),
                                                     base_url="http://127.0.0.1") as http:
        body = {"messages": [{"role": "user", "content": "Name three colours."}], "max_tokens": 16, "temperature": 0}
        answer = http.post("/v1/chat/completions", json=body)
        assert answer.status_code == 200
        stats = spec_from_timings(answer.json().get("timings"))
        metrics = http.get("/metrics").text
    assert stats.drafted > 0
    assert f'tiankong_spec_draft_tokens_total{{model="smol"}} {float(stats.drafted)}' in metrics
    assert f'tiankong_spec_accepted_tokens_total{{model="smol"}} {float(stats.accepted)}' in metrics


def test_bench_spec_cli(tmp_path: Path) -> None:
    mismatch = run_cli("bench", "spec", "--target", TEST_MODEL, "--draft",
                       "qwen2.5-coder-0.5b-instruct:q4_k_m", "--out", str(tmp_path))
    assert_one_line_error(mismatch, "vocabulary size", "smollm2", "qwen2.5")
    assert_one_line_error(run_cli("bench", "spec", "--target", TEST_MODEL), "--draft")
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "Count from one to five."}\n', encoding="utf-8")
    proc = run_cli("bench", "spec", "--target", TEST_MODEL, "--draft", TEST_MODEL,
                   "--n-max", "2", "--prompts", str(prompts), "--gen-tokens", "8", "--threads", "1", "--ctx", "512",
                   "--out", str(tmp_path), "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert [row["name"] for row in report["rows"]] == ["off", "draft n_max=2"]
    assert report["rows"][0]["speedup"] == 1.0 and report["rows"][1]["drafted"] > 0
    assert report["decision"] and (tmp_path / "spec.csv").is_file() and (tmp_path / "spec.json").is_file()


# --- multimodal ---------------------------------------------------------------------------------------


def test_image_parts_are_validated(tmp_path: Path) -> None:
    png = tmp_path / "dot.png"
    png.write_bytes(PNG_1X1)
    part = image_part(png)
    assert part["image_url"]["url"].startswith("data:image/png;base64,")
    assert image_part(PNG_1X1) == part
    good = [{"role": "user", "content": [{"type": "text", "text": "what?"}, part]}]
    validate_messages(good)
    bad_urls = {
        "https://example.invalid/cat.png": "remote URL",
        "file:///tmp/cat.png": "file://",
        "data:text/plain;base64,aGVsbG8=": "not image",
        "data:image/png;base64,@@@not-base64@@@": "base64",
        "data:image/png,rawbytes": "base64 data URL",
        "": "non-empty",
    }
    for url, needle in bad_urls.items():
        message = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}]
        with pytest.raises(InvalidImage, match=needle) as err:
            validate_messages(message)
        assert "messages[0].content[0]" in str(err.value)
    with pytest.raises(InvalidImage, match="MiB"):
        validate_messages(good, max_bytes=16)
    with pytest.raises(InvalidImage, match="not a recognised image"):
        image_part(b"plain text")
    with pytest.raises(InvalidImage, match="image_url"):
        validate_messages([{"role": "user", "content": [{"type": "image_url", "image_url": "x"}]}])


def test_image_request_is_shaped_for_the_engine(smol_path: Path) -> None:
    with EngineProcess(small(smol_path)) as engine, BaseClient(engine.url) as client:
        with pytest.raises(InvalidImage):  # refused before anything is sent
            client.chat([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/y"}}]}])
        message = [{"role": "user", "content": [{"type": "text", "text": "Describe it."}, image_part(PNG_1X1)]}]
        with pytest.raises(ServerError) as err:  # a text-only engine reads the part and names the fix
            client.chat(message, max_tokens=8)
        assert "mmproj" in str(err.value)


# --- rpc-server ----------------------------------------------------------------------------------------


def test_rpc_worker_serves_a_generation_on_loopback(smol_path: Path) -> None:
    worker = RpcWorker(threads=1)
    with worker:
        assert worker.pid is not None and pid_alive(worker.pid)
        with EngineProcess(small(smol_path, rpc=[worker.endpoint])) as engine, BaseClient(engine.url) as client:
            assert cmdline(engine.pid)[cmdline(engine.pid).index("--rpc") + 1] == worker.endpoint
            answer = client.chat("Say hello.", max_tokens=8)
            assert answer.text.strip() and answer.usage.completion_tokens > 0
        assert "Accepted client connection" in worker.log_tail(200)
        pid = worker.pid
    assert not pid_alive(pid)


def test_rpc_worker_is_restarted_after_a_crash() -> None:
    with RpcWorker(threads=1) as worker:
        first = worker.pid
        assert first is not None
        os.kill(first, signal.SIGKILL)
        # READY, not just alive: the new process exists before it listens (CI once connected in that gap)
        assert wait_until(lambda: worker.pid != first and worker.state is ProcessState.READY)
        assert worker.restarts == 1
        with socket.create_connection(("127.0.0.1", worker.port), timeout=5):
            pass
        second = worker.pid
    assert second is not None and not pid_alive(second)


def test_rpc_worker_refuses_a_public_bind() -> None:
    with pytest.raises(ConfigError, match="authentication"):
        RpcWorker(host="0.0.0.0")
    assert_one_line_error(run_cli("engine", "rpc-worker", "--host", "0.0.0.0"), "authentication", "--allow-remote")


def test_rpc_worker_cli_runs_until_ctrl_c() -> None:
    port = free_port()
    proc = subprocess.Popen([TIANKONG, "engine", "rpc-worker", "--port", str(port)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert f"127.0.0.1:{port}" in line, line
        worker_pid = int(re.search(r"pid (\d+)", line).group(1))  # type: ignore[union-attr]
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
        assert not pid_alive(worker_pid)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


@pytest.fixture(autouse=True)
def _no_leftover_engines() -> Iterator[None]:
    """Engines this test started are stopped by its end (shared fixtures' engines are not this test's)."""
    from tiankong.engine.process import _LIVE

    before = {id(e) for e in _LIVE if e.alive()}
    yield
    assert not [e for e in _LIVE if e.alive() and id(e) not in before], "a test left an engine running"
