"""What a read-only sweep of `eval` and `cascade` found (2026-12-07): a `--write` refused only after both sides ran
(the curve thrown away), reports written over their own inputs, a route command printed for tasks route cannot
run, model options taken and ignored, runs of two versions of a set compared, a baseline picked by file order, a
score drop of exactly 0.1 judged by float noise, an empty run crashing `compare`, `nan%` in a table. No engine:
tfidf deciders on both sides, synthetic runs."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest

from conftest import assert_one_line_error, run_cli
from tiankong.cascade import cascade_eval
from tiankong.cascade.report import markdown_table
from tiankong.errors import ConfigError
from tiankong.evals.compare import classify_item, compare_files
from tiankong.evals.results import EvalRun, ItemResult, ModelInfo, Speed, write_run

sys.path.insert(0, str(Path(__file__).parent))
from test_unit_cascade import HAM, HELD_OUT, SPAM, labelled  # noqa: E402


@pytest.fixture
def spam_decider(tmp_path: Path) -> str:
    """A tfidf decider (no engine) registered as ``spam`` (as test_unit_cascade's)."""
    from tiankong.tuning import tune_classify

    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"text": t, "label": lab}) + "\n"
                            for rows, lab in ((SPAM, "spam"), (HAM, "ham")) for t in rows))
    tune_classify(data, name="spam", methods=["tfidf"], folds=3)
    return "spam"


def test_cascade_write_and_outputs_are_checked_before_either_side_runs(tmp_path: Path, spam_decider: str) -> None:
    data = labelled(tmp_path / "held_out.jsonl", HELD_OUT)
    before = data.read_bytes()
    bad = tmp_path / "bad.toml"
    bad.write_text('[route]\nthreshold = "high"\n', encoding="utf-8")
    both = ("cascade", "eval", "--data", str(data), "--decider", spam_decider, "--large-decider", spam_decider)
    # one line on stderr: no side's progress was logged (no engine started) before the refusal
    model = "smollm2-135m-instruct:q4_0"
    assert_one_line_error(run_cli(*both[:4], "--small", model, "--large", model, "--write", "--config", str(bad)),
                          "route.threshold")
    assert_one_line_error(run_cli(*both, "--markdown", str(data)), "--markdown", "--data")
    assert_one_line_error(run_cli(*both, "--plot", str(tmp_path / "a.png"), "--markdown", str(tmp_path / "a.png")),
                          "--markdown", "--plot")
    assert data.read_bytes() == before and not (tmp_path / "a.png").exists()


def test_a_model_for_an_engine_free_side_is_refused(tmp_path: Path, spam_decider: str) -> None:
    data = labelled(tmp_path / "held_out.jsonl", HELD_OUT)
    with pytest.raises(ConfigError, match="needs no engine"):
        cascade_eval(data, "no-such-model", None, decider=spam_decider, large_decider=spam_decider)
    with pytest.raises(ConfigError, match="needs no engine"):
        cascade_eval(data, None, "no-such-model", decider=spam_decider, large_decider=spam_decider)
    said: list[str] = []
    with pytest.raises(ConfigError, match="cannot reach"):  # before the small side, not after it
        cascade_eval(data, None, "m", decider=spam_decider, large_url="http://127.0.0.1:9", log=said.append)
    assert said == []


def test_guard_and_extract_get_a_threshold_not_a_route_command(tmp_path: Path, spam_decider: str) -> None:
    flipped = [(text, "ham" if label == "spam" else "spam") for text, label in HELD_OUT]  # both sides always wrong
    result = cascade_eval(labelled(tmp_path / "flipped.jsonl", flipped), None, None, decider=spam_decider,
                          large_decider=spam_decider)
    assert result.command is not None and "tiankong route" in result.command
    assert result.curve.always_large == 0.0 and "nan" not in markdown_table(result.curve)
    for task in ("guard", "extract"):
        other = dataclasses.replace(result, task=task)
        assert other.command is None and other.to_json()["route"] is None
        assert other.to_json()["threshold"] == result.route_threshold


def item(id: str, score: float) -> ItemResult:
    return ItemResult(id=id, task="chat", scorer="similarity", text="answer", score=score, correct=score >= 0.1)


def run(name: str, items: list[ItemResult], sha: str = "0" * 64) -> EvalRun:
    return EvalRun(set_path="set.jsonl", set_sha256=sha, params={}, items=items, speed=Speed(items=len(items)),
                   model=ModelInfo(name=name, path="/m.gguf", sha256="1" * 64, bytes=1))


def test_a_drop_of_exactly_the_step_is_degraded_whatever_the_floats() -> None:
    for base, cand in ((0.3, 0.2), (0.5, 0.4), (1.0, 0.9)):
        assert classify_item(item("1", base), item("1", cand))[0] == "degraded", (base, cand)


def test_compare_refuses_what_it_cannot_compare(tmp_path: Path) -> None:
    items = [item("1", 1.0), item("2", 0.5)]
    write_run(run("m-1b:q4_0", items), tmp_path / "a" / "q40.json")
    write_run(run("m-1b:q4_1", items), tmp_path / "a" / "q41.json")
    with pytest.raises(ConfigError, match="names 2 runs"):
        compare_files([str(tmp_path / "a")], baseline="m-1b")  # the first file's quant was taken
    assert compare_files([str(tmp_path / "a")], baseline="m-1b:q4_1").baseline == "m-1b:q4_1"
    write_run(run("m-2b:q4_0", items, sha="f" * 64), tmp_path / "b" / "new.json")
    with pytest.raises(ConfigError, match="different versions"):
        compare_files([str(tmp_path / "a" / "q40.json"), str(tmp_path / "b" / "new.json")])
    write_run(run("m-3b:q4_0", []), tmp_path / "empty.json")
    with pytest.raises(ConfigError, match="no items"):
        compare_files([str(tmp_path / "a" / "q40.json"), str(tmp_path / "empty.json")])
    target = tmp_path / "a" / "q41.json"
    before = target.read_bytes()
    assert_one_line_error(run_cli("eval", "report", str(tmp_path / "a"), "--md", str(target)), "--md", "run file")
    assert target.read_bytes() == before


def test_an_eval_item_key_its_task_does_not_take_is_refused(tmp_path: Path) -> None:
    from tiankong.evals.format import load_set

    path = tmp_path / "set.jsonl"
    path.write_text(json.dumps({"id": "1", "task": "classify", "input": "x", "labels": ["a", "b"], "words": 5,
                                "reference": "a"}) + "\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="line 1: words"):
        load_set(path)
