"""What a sweep of ``classify`` found (2026-12-08), each reproduced before the fix: a multi-label answer with no
label over the threshold carried a ``label`` and no ``abstained``; ``--describe`` without ``=`` and a label described
twice were dropped without a word; described labels were not trimmed as labels are; a repeated label was reported
as "at least two distinct" labels missing."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from helpers.scripted import ScriptedEngine, scored
from tiankong import Client
from tiankong.cli import main as cli
from tiankong.errors import ConfigError
from tiankong.tasks.classify import check_labels


def test_a_multi_label_answer_with_no_label_over_the_threshold_abstains() -> None:
    engine = ScriptedEngine().on("/completion", scored({"yes": 0.2, "no": 0.8}))
    with Client("http://engine.test", transport=engine.transport()) as client:
        result = client.classify("A recipe for bread.", ["python library", "legal contract"], multi_label=True)
    assert result.labels == [] and result.abstained
    assert result.to_json()["abstained"] is True


def test_a_multi_label_answer_with_labels_does_not_abstain() -> None:
    engine = ScriptedEngine().on("/completion", scored({"yes": 0.9, "no": 0.1}))
    with Client("http://engine.test", transport=engine.transport()) as client:
        result = client.classify("A Python HTTP library.", ["python library", "legal contract"], multi_label=True)
    assert result.labels and not result.abstained and "abstained" not in result.to_json()


@pytest.mark.parametrize(("describe", "said"), [
    (["afoo"], "give LABEL=words"), (["refund="], "give LABEL=words"), (["=money back"], "give LABEL=words"),
    (["refund=a", "refund=b"], "given twice"),
])
def test_a_describe_option_that_cannot_be_read_is_refused(describe: list[str], said: str) -> None:
    args = ["classify", "--labels", "refund,shipping", "some text"]
    for d in describe:
        args[1:1] = ["--describe", d]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2 and said in result.output, result.output


def test_a_described_label_is_trimmed_as_the_labels_are() -> None:
    # refused before any engine starts when the key does not match, so an unknown label would say so here;
    # matched, the command goes on to the engine: --url at a closed port ends it with a connection error instead
    result = CliRunner().invoke(cli, ["classify", "--labels", "refund, shipping", "--describe", "refund = money back",
                                      "--url", "http://127.0.0.1:9", "some text"])
    assert "unknown label" not in result.output and result.exit_code != 0, result.output


def test_a_repeated_label_is_named() -> None:
    with pytest.raises(ConfigError, match="'refund' is given twice"):
        check_labels(["refund", "refund", "shipping"])
    with pytest.raises(ConfigError, match="equal once trimmed"):
        check_labels(["a", " a "])
    with pytest.raises(ConfigError) as one:
        check_labels(["a"])
    assert "trimmed" not in one.value.message and "twice" not in one.value.message
