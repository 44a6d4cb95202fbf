"""The example of "adding a task": ``sentiment`` is one module (tasks/sentiment.py) and one registry entry
(tasks/specs.py) plus its docs section; from them alone it is a CLI command, ``POST /v1/tasks/sentiment``, an
OpenAPI body, a batch task and an eval task. With the real SmolLM2 engine: its answers have the right shape on
every surface (labels, probabilities summing to 1, polarity = P(positive) − P(negative))."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from tiankong import Client
from tiankong.batch import make_job
from tiankong.batch import run as run_batch
from tiankong.cli import main
from tiankong.engine import EngineProcess
from tiankong.gateway import GatewayState, create_app
from tiankong.gateway.openapi import build_openapi
from tiankong.models import TEST_MODEL

SRC = Path(__file__).parents[2] / "src" / "tiankong"
REVIEW = "I love this phone, the screen is wonderful and the battery lasts two days."


def test_sentiment_is_named_in_its_module_and_its_registry_entry_only() -> None:
    """Adding the task touched tasks/sentiment.py and tasks/specs.py (its `tiankong --help` row is read from the
    registry's source at run time) and docs/tasks.md (its parameter table, written by `make docs`)."""
    found = {str(p.relative_to(SRC)) for p in SRC.rglob("*.py")
             if re.search(r"(?<![-\w])sentiment(?![-\w])", p.read_text(encoding="utf-8"), re.I)}
    assert found == {"tasks/sentiment.py", "tasks/specs.py"}
    assert "<!-- params:sentiment -->" in (SRC.parent.parent / "docs" / "tasks.md").read_text(encoding="utf-8")


def test_sentiment_reaches_the_cli_http_openapi_batch_and_evals() -> None:
    shown = CliRunner().invoke(main, ["sentiment", "--help"])
    assert shown.exit_code == 0 and "--no-neutral" in shown.output and "--aspect" in shown.output
    assert "sentiment" in CliRunner().invoke(main, ["--help"]).output
    body = build_openapi()["paths"]["/v1/tasks/sentiment"]["post"]["requestBody"]["content"]["application/json"]
    assert body["schema"]
    app = create_app(GatewayState(upstream_url="http://127.0.0.1:9", model_name="m"))  # never reached
    with TestClient(app, base_url="http://127.0.0.1") as http:
        error = http.post("/v1/tasks/sentiment", json={"text": "ok", "aspect": ""}).json()["error"]
        assert error["param"] == "aspect" and error["type"] == "invalid_request_error"
    job = make_job(input="in.jsonl", output="out.jsonl", task="sentiment", args={"neutral": False})
    assert job.task_args("fine").neutral is False  # type: ignore[attr-defined]
    from tiankong.evals.format import EvalItem
    from tiankong.evals.scorers import score

    item = EvalItem.model_validate({"id": "1", "task": "sentiment", "input": REVIEW, "reference": "positive"})
    assert item.scorer == "label"
    assert score(item, {"label": "positive", "scores": {}, "polarity": 0.9}) == 1.0
    assert score(item, {"label": "negative", "scores": {}, "polarity": -0.9}) == 0.0


# --- real engine (SmolLM2) -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def client(smol_engine: EngineProcess) -> Iterator[Client]:
    with Client(smol_engine.url, timeout_s=900) as c:
        yield c


def _check(answer: dict, labels: set[str]) -> None:  # type: ignore[type-arg]
    assert answer["label"] in labels and set(answer["scores"]) == labels
    assert sum(answer["scores"].values()) == pytest.approx(1.0, abs=1e-3)  # rounded probabilities
    assert answer["polarity"] == pytest.approx(answer["scores"]["positive"] - answer["scores"]["negative"],
                                               abs=1e-3)
    assert answer["confidence"] == answer["scores"][answer["label"]]


def test_sentiment_answers_on_the_client_the_cli_and_the_gateway(client: Client, smol_engine: EngineProcess) -> None:
    three = {"positive", "negative", "neutral"}
    local = client.task("sentiment", text=REVIEW)
    _check(local.to_json(), three)
    two = client.task("sentiment", text=REVIEW, neutral=False, aspect="battery")
    _check(two.to_json(), {"positive", "negative"})
    assert two.aspect == "battery"
    shown = CliRunner().invoke(main, ["sentiment", REVIEW, "--url", smol_engine.url, "--json"])
    assert shown.exit_code == 0, shown.output
    cli = json.loads(shown.output)
    _check(cli, three)
    # the same flow at temperature 0; the text and its calibration input share llama.cpp batches, whose float sums
    # vary run to run (measured here: 0.018 on P(positive); tests/test_tasks.py saw 0.025 for rerank)
    assert cli["scores"] == pytest.approx(local.scores, abs=0.05)
    line = CliRunner().invoke(main, ["sentiment", REVIEW, "--url", smol_engine.url])
    assert line.exit_code == 0 and line.output.split("\t")[0] in three
    assert float(line.output.split("\t")[1]) == pytest.approx(local.polarity, abs=0.1)  # twice the score spread
    state = GatewayState(upstream_url=smol_engine.url, model_name=TEST_MODEL)
    with TestClient(create_app(state), base_url="http://127.0.0.1") as http:
        answer = http.post("/v1/tasks/sentiment", json={"text": REVIEW})
        assert answer.status_code == 200
        _check(answer.json(), three)


def test_a_batch_job_runs_sentiment_over_every_record(smol_engine: EngineProcess, tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    texts = [REVIEW, "The parcel came broken and nobody answers my e-mails.", "The meeting is at ten."]
    source.write_text("".join(json.dumps({"id": str(i), "text": t}) + "\n" for i, t in enumerate(texts)),
                      encoding="utf-8")
    job = make_job(input=str(source), output=str(tmp_path / "out.jsonl"), task="sentiment", url=[smol_engine.url],
                   args={"neutral": False})
    report = run_batch(job)
    assert report.failed == 0
    lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()]
    assert sorted(line["id"] for line in lines) == ["0", "1", "2"]
    for line in lines:
        _check(line["result"], {"positive", "negative"})
    written = json.loads((tmp_path / "out.jsonl.job.json").read_text(encoding="utf-8"))
    assert written["args"] == {"neutral": False}
