"""The obvious workflows just work (issue 45): a deterministic gateway by default, one model-name resolution and
embeddings without a model name, and the CLI papercuts (a closed pipe, a mistyped verb, the dead-port hint, `/`,
the serve banner, a near-chance tune, what batch runs)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from test_gateway import Served, start_serve, stop_serve

from conftest import TIANKONG, run_cli, serve_app
from tiankong import Client
from tiankong.batch.job import REGISTERED_TASKS
from tiankong.config import ServerSettings
from tiankong.engine import EngineProcess
from tiankong.errors import ConfigError
from tiankong.gateway import GatewayState
from tiankong.models import TEST_MODEL

ROOT = Path(__file__).parents[2]
PROMPTS = ["Write one sentence about the sea.", "Name three fruits and say why you like them.",
           "Yes or no? Is the sky green?", "Tell me a short story about a cat."]


@pytest.fixture(scope="module")
def gateway(smol_engine: EngineProcess) -> Iterator[str]:
    with serve_app(GatewayState(upstream_url=smol_engine.url, model_name=TEST_MODEL)) as url:
        yield url


@pytest.fixture(scope="module")
def served_embeddings() -> Iterator[Served]:
    served = start_serve("--embeddings", ctx=None)  # the default context, as a user gets it
    try:
        yield served
    finally:
        stop_serve(served)


def chat(url: str, prompt: str, **extra: object) -> str:
    answer = httpx.post(f"{url}/v1/chat/completions", json={
        "messages": [{"role": "user", "content": prompt}], "max_tokens": 24, **extra}, timeout=120)
    assert answer.status_code == 200, answer.text
    return str(answer.json()["choices"][0]["message"]["content"])


def test_a_chat_without_temperature_is_greedy_and_repeatable(gateway: str) -> None:
    for prompt in PROMPTS:
        plain = chat(gateway, prompt)
        assert chat(gateway, prompt) == plain
        assert chat(gateway, prompt, temperature=0) == plain, prompt
    streamed = httpx.post(f"{gateway}/v1/completions", json={"prompt": "The sea is", "max_tokens": 16}, timeout=120)
    greedy = httpx.post(f"{gateway}/v1/completions", json={"prompt": "The sea is", "max_tokens": 16,
                                                           "temperature": 0}, timeout=120)
    assert streamed.json()["choices"][0]["text"] == greedy.json()["choices"][0]["text"]


def test_sampling_is_one_config_switch() -> None:
    assert ServerSettings().sampling == "deterministic"
    assert ServerSettings(sampling="openai").sampling == "openai"
    with pytest.raises(ValueError):
        ServerSettings(sampling="random")  # type: ignore[arg-type]


def test_embeddings_models_and_the_banner_on_a_served_gateway(served_embeddings: Served) -> None:
    url = served_embeddings.url
    banner = next(line for line in served_embeddings.log if "gateway on" in line)
    assert f"{url}/ui" in banner
    with Client(url) as client:
        vectors = client.embed(["x", "a second text"])
    assert len(vectors) == 2 and len(vectors[0]) > 16 and all(isinstance(v, float) for v in vectors[0])
    short = TEST_MODEL.split(":")[0]
    for name in (TEST_MODEL, short):
        card = httpx.get(f"{url}/v1/models/{name}", timeout=30)
        assert card.status_code == 200 and card.json()["id"] == TEST_MODEL, card.text
        assert chat(url, "hi", model=name)
    missing = httpx.get(f"{url}/v1/models/no-such-model", timeout=30)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"
    home = httpx.get(f"{url}/", timeout=30)
    assert home.status_code in (302, 303, 307) and home.headers["location"] == "/ui"


def test_the_default_context_is_sized_by_the_memory_plan(served_embeddings: Served) -> None:
    """Issue 45: `tiankong serve` without --ctx gives each slot the largest context up to 8,192 that the memory
    plan fits (SmolLM2 was trained for 8,192), says so at start-up, and answers a chat whose schema and text make
    about 3,000 tokens — refused by the old 2,048-token slots."""
    from tiankong.models import model_path
    from tiankong.plan.auto import PER_SLOT_FLOOR, auto_ctx

    ready = next(line for line in served_embeddings.log if "engine ready" in line)
    assert "8192 tokens per slot" in ready and "memory plan" in ready, ready
    rows = (ROOT / "tests" / "data" / "jsonschemabench-dev" / "schemas.jsonl").read_text(encoding="utf-8")
    text = "Fill in this JSON Schema for a record:\n" + rows[:9000]
    answer = httpx.post(f"{served_embeddings.url}/v1/chat/completions", timeout=300, json={
        "messages": [{"role": "user", "content": text}], "max_tokens": 2})
    assert answer.status_code == 200, answer.text[:300]
    assert 2048 < answer.json()["usage"]["prompt_tokens"] <= 8192
    smol = model_path(TEST_MODEL)
    assert auto_ctx(smol, 2, available=64 * 2**30).per_slot == 8192  # capped by the model's trained context
    squeezed = auto_ctx(smol, 2, available=600_000_000)  # a plan of half of 600 MB: a smaller slot, still whole
    assert PER_SLOT_FLOOR <= squeezed.per_slot < 8192 and squeezed.planned_bytes <= 300_000_000
    assert squeezed.ctx == 2 * squeezed.per_slot and squeezed.per_slot % 256 == 0
    assert auto_ctx(smol, 2, available=1).per_slot == PER_SLOT_FLOOR  # never below the old default


def test_a_closed_pipe_ends_the_cli_quietly() -> None:
    proc = subprocess.Popen([TIANKONG, "redact", "--no-model", "Call 13800138000 now. " * 2000],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before the first byte is written (`… | head -c 3` that finished)
    err = proc.stderr.read().decode()
    proc.wait(timeout=120)
    assert err == "", err


def test_a_mistyped_verb_gets_a_suggestion() -> None:
    proc = run_cli("clasify", "x")
    assert proc.returncode != 0 and "did you mean classify" in proc.stderr.lower(), proc.stderr


def test_the_dead_port_hint_speaks_cli() -> None:
    proc = run_cli("classify", "x", "--labels", "a,b", "--url", "http://127.0.0.1:9")
    assert proc.returncode == 1 and "--model" in proc.stderr and "model=" not in proc.stderr, proc.stderr


def test_a_tune_near_chance_warns_and_says_what_to_do(tmp_path: Path) -> None:
    proc = run_cli("tune", "classify", "--data", str(ROOT / "examples" / "tickets-labelled.jsonl"), "--name", "near",
                   "--no-engine", "--dry-run", "--json", env={"TIANKONG_DATA_DIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert "near chance" in report["warning"] and "examples" in report["warning"]
    assert proc.stderr.startswith("warning:") and "--model" in proc.stderr


def test_the_readme_names_the_tasks_batch_runs() -> None:
    row = next(line for line in (ROOT / "README.md").read_text().splitlines() if line.startswith("| Batch:"))
    assert "any task" not in row
    assert all(task in row for task in REGISTERED_TASKS)
    assert "order" in (ROOT / "docs" / "batch.md").read_text()


def test_client_without_a_server_says_how_to_start_one() -> None:
    with pytest.raises(ConfigError):
        Client()
