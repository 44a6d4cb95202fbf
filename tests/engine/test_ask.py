"""ask: many questions about one text on SmolLM2 — the text read once, each answer what asking it alone gives."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import jsonschema
import pytest

from conftest import TEST_MODEL, assert_one_line_error, run_cli, serve_app
from tiankong import Answers, Client
from tiankong.engine import EngineBinary, EngineConfig, EngineProcess
from tiankong.errors import ConfigError, InvalidSchema
from tiankong.gateway import GatewayState

TEXT = ("Hello support, this is Maria Gomez from Lyon. I was charged twice for my March subscription "
        "(invoice 4471) and the second charge of 19.90 EUR still shows on my card. I already wrote last week "
        "and nobody answered, which is frustrating. Please refund the duplicate charge and confirm by e-mail.")
PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 40},
                                           "city": {"type": "string", "maxLength": 30}}, "required": ["name", "city"]}
QUESTIONS = [
    {"id": "refund", "type": "yes_no", "question": "Is the customer asking for a refund?"},
    {"id": "angry", "type": "yes_no", "question": "Is the customer frustrated?"},
    {"id": "team", "type": "choice", "question": "Which team should handle this?",
     "labels": ["billing", "technical support", "sales"]},
    {"id": "urgency", "type": "score", "question": "How urgent is this message?"},
    {"id": "who", "type": "extract", "question": "Who wrote the message, and from which city?", "schema": PERSON},
]


@pytest.fixture(scope="module")
def client(engine_binary: EngineBinary, smol_path: Path) -> Iterator[Client]:
    """An engine of the module's own (the shared engine's config): its prompt cache holds only what this module
    asked, so the batch shapes — and the spread BATCH_NOISE bounds — are the ones measured by tools/ask_spread.py.
    On the shared engine they depended on which modules ran before (0.071 once under `pytest -n 2`)."""
    with EngineProcess(EngineConfig(model=smol_path, ctx=4096, slots=2, alias=TEST_MODEL), engine_binary) as engine, \
            Client(engine.url) as c:
        yield c


@pytest.fixture(scope="module")
def together(client: Client) -> Answers:
    return client.ask(TEXT, QUESTIONS)


def test_every_question_gets_its_kind_of_answer_in_order(together: Answers) -> None:
    answers = together.answers
    assert [a.id for a in answers] == [q["id"] for q in QUESTIONS]
    for answer in answers:
        if answer.type == "extract":
            jsonschema.validate(answer.data, PERSON)
            continue
        assert answer.scores is not None and abs(sum(answer.scores.values()) - 1.0) < 1e-6
        assert answer.label == max(answer.scores, key=answer.scores.__getitem__)
    by_id = together.by_id()
    assert set(by_id["refund"].scores or {}) == {"yes", "no"}
    assert by_id["refund"].probability == (by_id["refund"].scores or {})["yes"]
    assert by_id["team"].label in QUESTIONS[2]["labels"]
    assert 1.0 <= (by_id["urgency"].score or 0.0) <= 5.0 and by_id["urgency"].label in "12345"
    body = together.to_json()
    assert [a["id"] for a in body["answers"]] == [q["id"] for q in QUESTIONS]
    assert "data" in body["answers"][4] and "probability" in body["answers"][0]


#: llama.cpp on a CPU is not batch-invariant: the same prompt read in one batch, or from the cache plus a
#: smaller batch, moves a label's probability. Measured on this module's engine config (SmolLM2, 2 slots, 4096 ctx),
#: 4 rounds: |alone - together| at most 0.0222 on the Q4_1 file (2026-12-05), **0.0410** on the Q4_0 file the suite
#: runs since 2026-12-06 (the first round; 0 after), the same with 2 threads and on one pinned core (`make test`'s
#: workers) — benchmarks/results/tolerances/ask-spread-{2-threads,1-core}[-q4_0].txt, `PYTHONPATH=src python
#: tools/ask_spread.py --rounds 4`. Per question: the two yes/no questions moved (0.0410 refund, 0.0379 angry) and are
#: bound at that spread with a margin (~2.2x); `team` and `urgency` did not move (0.0000) and keep the 0.05 that
#: held on the Q4_1 file. (refund and angry are near ties, 0.51 / 0.49 alone: one answered for the other would pass
#: this check — the label check below and test_the_text_is_read_once carry the rest.)
BATCH_NOISE = 0.05
NOISE = {"refund": 0.09, "angry": 0.09}


def test_each_answer_equals_asking_that_question_alone(client: Client, together: Answers) -> None:
    for question in QUESTIONS:
        alone = client.ask(TEXT, [question]).answers[0]
        answer = together.by_id()[question["id"]]
        if question["type"] == "extract":
            assert alone.data.keys() == answer.data.keys()
            continue
        scores, theirs = alone.scores or {}, answer.scores or {}
        ranked = sorted(scores.values(), reverse=True)
        bound = NOISE.get(question["id"], BATCH_NOISE)
        if ranked[0] - ranked[1] > 2 * bound:
            assert alone.label == answer.label, question["id"]
        for label, p in scores.items():
            assert abs(p - theirs[label]) < bound, (question["id"], label)


def test_the_text_is_read_once(client: Client) -> None:
    text = TEXT.replace("Maria Gomez", "Jon Berg")  # a text the engine has not cached yet
    questions = [{"id": f"q{i}", "type": "yes_no", "question": q} for i, q in enumerate(
        ["Is a refund requested?", "Is an invoice number given?", "Is the writer polite?", "Is a city named?"])]
    result = client.ask(text, questions)
    # the text is prefilled for the first question only: later ones evaluate their own few tokens
    assert result.prompt_tokens > 0 and result.evaluated_tokens < result.prompt_tokens / 2


@pytest.mark.parametrize(("questions", "fragment"), [
    ([], "at least 1"),
    ([{"id": "a", "type": "yes_no", "question": "x?"}, {"id": "a", "type": "yes_no", "question": "y?"}], "twice"),
    ([{"id": "a", "type": "choice", "question": "x?", "labels": ["only"]}], "two distinct"),
    ([{"id": "a", "type": "yes_no", "question": "x?", "labels": ["a", "b"]}], "choice question only"),
    ([{"id": "a", "type": "extract", "question": "x?"}], "JSON Schema"),
    ([{"id": "a", "type": "guess", "question": "x?"}], "type"),
    ([{"id": f"q{i}", "type": "yes_no", "question": "x?"} for i in range(33)], "32"),
])
def test_bad_questions_are_refused_before_the_engine_is_asked(client: Client, questions: list, fragment: str) -> None:
    with pytest.raises(ConfigError) as err:
        client.ask(TEXT, questions)
    assert fragment in str(err.value)


def test_ask_over_http_and_the_cli(smol_engine: EngineProcess) -> None:
    with serve_app(GatewayState.for_engine(smol_engine, TEST_MODEL)) as url:
        answer = httpx.post(f"{url}/v1/tasks/ask", json={"text": TEXT, "questions": QUESTIONS[:3]}, timeout=300)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert [a["id"] for a in body["answers"]] == ["refund", "angry", "team"]
        assert body["usage"]["evaluated_prompt_tokens"] < body["usage"]["prompt_tokens"]
        bad = httpx.post(f"{url}/v1/tasks/ask", json={"text": TEXT, "questions": [
            {"id": "x", "type": "maybe", "question": "?"}]}, timeout=60)
        assert bad.status_code == 400 and "questions" in bad.text
    proc = run_cli("ask", "--url", smol_engine.url, "--yes-no", "Is a refund requested?", "--yes-no",
                   "Is the writer happy?", "--json", TEXT)
    assert proc.returncode == 0, proc.stderr
    answers = json.loads(proc.stdout)["answers"]
    assert [a["id"] for a in answers] == ["q1", "q2"] and all(0 <= a["probability"] <= 1 for a in answers)


def test_choice_labels_split_into_byte_pieces_are_asked_by_number(client: Client) -> None:
    """Chinese labels that classify answered (by number) were refused by ask as "split into partial UTF-8 tokens"."""
    labels = ["logistics team", "billing team", "物流部"]
    answer = client.ask(TEXT, [{"id": "team", "type": "choice", "question": "Which team should handle it?",
                                "labels": labels}]).answers[0]
    assert answer.label in labels and set(answer.scores or {}) == set(labels)
    assert abs(sum((answer.scores or {}).values()) - 1) < 1e-6


@pytest.mark.parametrize(("questions", "fragment"), [
    ([{"id": "a", "type": "choice", "question": "x?", "labels": ["a", " a "]}], "two distinct"),
    ([{"id": "a", "type": "yes_no", "question": "x?"},
      {"id": "b", "type": "extract", "question": "y?", "schema": {"type": "objekt"}}], "questions[1]"),
])
def test_question_errors_name_the_question_and_the_field(client: Client, questions: list, fragment: str) -> None:
    """Labels equal once trimmed were two labels; a bad schema in the second question did not say which."""
    with pytest.raises(ConfigError) as err:
        client.ask(TEXT, questions)
    assert fragment in str(err.value) and err.value.param == "questions"
    if "schema" in questions[-1]:  # the schema's own error class (its HTTP type invalid_schema), named
        assert isinstance(err.value, InvalidSchema), type(err.value)


def test_a_questions_file_holding_one_object_is_one_clear_line(tmp_path: Path) -> None:
    """The object's keys were read as three questions ("questions.0: …; questions.1: …")."""
    single = tmp_path / "q.json"
    single.write_text(json.dumps({"id": "a", "type": "yes_no", "question": "q?"}))
    assert_one_line_error(run_cli("ask", "--questions", str(single), "--url", "http://127.0.0.1:9", "some text"),
                          "must hold a JSON list")
