"""Eval harness: set validation (line-numbered errors before any work), scorers, comparison classes and the
decision rule on synthetic runs, reports; and with the real SmolLM2 engine: a small set through the batch
worker, a second run answered from the cache, a fresh run (and a resumed one) giving identical outputs.

Nothing is timed; model outputs are checked for structure, never for exact prose.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from conftest import assert_one_line_error, run_cli
from tiankong.errors import ConfigError, ModelNotInstalled
from tiankong.evals import (
    EvalItem,
    EvalParams,
    EvalRun,
    ItemResult,
    classify_item,
    compare_runs,
    load_set,
    paired_bootstrap,
    read_run,
    run_eval,
    score,
    to_html,
    to_markdown,
    token_f1,
    write_starter,
)
from tiankong.evals.cache import ModelCache
from tiankong.evals.results import ModelInfo, Speed, write_run
from tiankong.models import TEST_MODEL, list_models

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"]}
SMALL_SET = [
    {"id": "s1", "task": "classify", "input": "I love this phone, it works perfectly!",
     "labels": ["positive", "negative"], "reference": "positive", "tags": ["short-QA"]},
    {"id": "q1", "input": "What is 2 + 3? Answer with the number only.", "reference": "5", "scorer": "label",
     "max_tokens": 12, "tags": ["short-QA"]},
    {"id": "e1", "task": "extract", "input": "John Smith is 42 years old.", "schema": SCHEMA,
     "reference": {"name": "John Smith", "age": 42}, "tags": ["extraction"]},
    {"id": "m1", "input": [{"role": "user", "content": "My name is Alice."},
                           {"role": "assistant", "content": "Nice to meet you, Alice!"},
                           {"role": "user", "content": "What is my name?"}],
     "reference": ["Alice"], "max_tokens": 24, "tags": ["multi-turn"]},
]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def item(**fields: Any) -> EvalItem:
    return EvalItem.model_validate({"id": "x", "input": "hello", **fields})


# --- set format ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("row", "needle"), [
    ({"id": "a", "input": "hi"}, "no reference"),
    ({"id": "a", "input": "hi", "reference": "x", "scorer": "bleu"}, "unknown scorer 'bleu'"),
    ({"id": "a", "task": "classify", "input": "hi", "labels": ["p", "n"], "reference": "q"}, "not one of the labels"),
    ({"id": "a", "task": "classify", "input": "hi", "labels": ["p"], "reference": "p"}, "two distinct labels"),
    ({"id": "a", "task": "extract", "input": "hi", "reference": {"a": 1}}, "needs a schema"),
    ({"id": "a", "input": "hi", "reference": "x", "colour": 1}, "colour: unknown field"),
    ({"id": "a", "input": "hi", "reference": "x", "scorer": "json_fields"}, "JSON object"),
    ({"id": "a", "input": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
      "reference": "x"}, "end with a user message"),
])
def test_bad_items_are_refused_with_their_line(tmp_path: Path, row: dict[str, Any], needle: str) -> None:
    path = write_jsonl(tmp_path / "set.jsonl", [{"id": "ok", "input": "hi", "reference": "x"}, row])
    with pytest.raises(ConfigError) as info:
        load_set(path)
    assert "line 2:" in str(info.value) and needle in str(info.value)


def test_duplicate_ids_and_bad_json_lines(tmp_path: Path) -> None:
    row = {"id": "a", "input": "hi", "reference": "x"}
    with pytest.raises(ConfigError, match=r"line 3: duplicate id 'a' \(first on line 1\)"):
        load_set(write_jsonl(tmp_path / "dup.jsonl", [row, {**row, "id": "b"}, row]))
    (tmp_path / "broken.jsonl").write_text(json.dumps(row) + "\n{\"id\": \n", encoding="utf-8")
    with pytest.raises(ConfigError, match="line 2: not valid JSON"):
        load_set(tmp_path / "broken.jsonl")
    with pytest.raises(ConfigError, match="no items"):
        load_set(write_jsonl(tmp_path / "empty.jsonl", []))


def test_yaml_set_with_defaults_and_line_numbers(tmp_path: Path) -> None:
    path = tmp_path / "set.yaml"
    path.write_text("defaults:\n  task: classify\n  labels: [yes, no]\nitems:\n"
                    "  - id: a\n    input: hi\n    reference: 'yes'\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="line 5: labels.0: .*quote it"):
        load_set(path)
    path.write_text("defaults:\n  task: classify\n  labels: ['yes', 'no']\nitems:\n"
                    "  - id: a\n    input: hi\n    reference: 'yes'\n"
                    "  - id: b\n    input: yo\n    reference: maybe\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="line 8: reference 'maybe' is not one of the labels"):
        load_set(path)
    path.write_text(path.read_text(encoding="utf-8").replace("maybe", "'no'"), encoding="utf-8")
    loaded = load_set(path)
    assert [i.labels for i in loaded.items] == [["yes", "no"], ["yes", "no"]] and loaded.lines == {"a": 5, "b": 8}


def test_request_ignores_reference_scorer_and_id() -> None:
    one = item(reference="x", scorer="exact", tags=["a"])
    other = item(id="y", reference="something else", scorer="similarity")
    assert one.request() == other.request()
    assert item(reference="x", max_tokens=9).request() != one.request()


def test_starter_sets_cover_the_four_kinds(tmp_path: Path) -> None:
    for name in ("starter.yaml", "starter.jsonl"):
        loaded = load_set(write_starter(tmp_path / name))
        assert {"short-QA", "long-summary", "extraction", "multi-turn"} <= set(loaded.tags())
    with pytest.raises(ConfigError, match="already exists"):
        write_starter(tmp_path / "starter.yaml")
    proc = run_cli("eval", "init", str(tmp_path / "cli.yaml"))
    assert proc.returncode == 0 and load_set(tmp_path / "cli.yaml").items, proc.stderr
    assert_one_line_error(run_cli("eval", "init", str(tmp_path / "cli.yaml")), "already exists", "--force")


def test_shipped_example_set() -> None:
    loaded = load_set(ROOT / "evals" / "example.jsonl")
    assert len(loaded.items) >= 50
    assert {"short-QA", "long-summary", "extraction", "multi-turn", "sentiment", "intent", "aclsum"} <= set(
        loaded.tags())


# --- scorers ------------------------------------------------------------------------------------------


def test_scorers() -> None:
    assert score(item(reference="Paris", scorer="exact"), " paris. ") == 1.0
    assert score(item(reference="Paris", scorer="exact"), "It is Paris") == 0.0
    label = item(reference="5", scorer="label", labels=["4", "5", "6"])
    assert score(label, "The answer is 5.") == 1.0
    assert score(label, "5 or 6") == 0.0 and score(label, "15") == 0.0
    fields = item(task="extract", schema=SCHEMA, reference={"name": "John Smith", "age": 42})
    assert score(fields, {"name": "john smith", "age": 42}) == 1.0
    assert score(fields, {"name": "John", "age": 42}) == 0.5
    assert score(fields, {"name": "John Smith"}) == 0.0  # does not validate against the schema
    points = item(reference=["park", ["2 million", "two million"]])
    assert score(points, "A park for two million dollars") == 1.0 and score(points, "a park") == 0.5
    assert token_f1("the cat sat", "the cat sat") == 1.0 and token_f1("a b", "c d") == 0.0
    assert 0 < token_f1("我喜欢猫", "我喜欢狗") < 1  # every CJK character is a token
    assert score(item(reference="x"), None) == 0.0


# --- compare and report (synthetic runs) --------------------------------------------------------------


def result(id: str, correct: bool, score: float = 1.0, text: str = "answer",
           tags: list[str] | None = None) -> ItemResult:
    return ItemResult(id=id, task="chat", scorer="similarity", tags=tags or ["t"], text=text,
                      score=score if correct else 0.0, correct=correct)


def fake_run(name: str, items: list[ItemResult], model_bytes: int, rss: int, seconds: float) -> EvalRun:
    return EvalRun(set_path="set.jsonl", set_sha256="0" * 64,
                   model=ModelInfo(name=name, path="/m.gguf", sha256="1" * 64, bytes=model_bytes),
                   params={}, items=items, speed=Speed(items=len(items), elapsed_s=seconds, completion_tokens=100),
                   peak_rss_bytes=rss)


def test_item_classes() -> None:
    long_text = "a complete answer with many words in it"
    assert classify_item(result("1", True), result("1", False))[0] == "wrong"
    assert classify_item(result("1", False), result("1", True))[0] == "improved"
    assert classify_item(result("1", True, text=long_text), result("1", True, text="a"))[0] == "length_anomaly"
    assert classify_item(result("1", True, 0.9), result("1", True, 0.6))[0] == "degraded"
    assert classify_item(result("1", True, 0.9), result("1", True, 0.85))[0] == "equal"
    assert classify_item(result("1", False), result("1", False))[0] == "equal"


def test_paired_bootstrap_is_seeded_and_brackets_the_mean() -> None:
    diffs = [0] * 40 + [-1] * 6 + [1] * 2
    low, high = paired_bootstrap(diffs)
    assert (low, high) == paired_bootstrap(diffs)
    assert low <= sum(diffs) / len(diffs) <= high and low < 0


def _pair(candidate_correct: int, n: int = 50) -> list[EvalRun]:
    base = [result(str(i), True, tags=["a" if i % 2 else "b"]) for i in range(n)]
    cand = [result(str(i), i < candidate_correct, tags=["a" if i % 2 else "b"]) for i in range(n)]
    return [fake_run("big", base, 500_000_000, 700_000_000, 20.0), fake_run("small", cand, 100_000_000,
                                                                              250_000_000, 5.0)]


def test_decision_rule_prefers_the_smaller_model_within_tolerance() -> None:
    close = compare_runs(_pair(49), tolerance_points=2.0)  # -2 points
    assert close.choice == "small" and "saves 400 MB of model file" in close.decision
    assert close.candidates[0].counts["wrong"] == 1 and close.candidates[0].diff_points == -2.0
    far = compare_runs(_pair(45), tolerance_points=2.0)  # -10 points
    assert far.choice == "big"
    lo, hi = far.candidates[0].ci_points
    assert lo <= -10.0 <= hi
    assert compare_runs(_pair(45), baseline="small").baseline == "small"
    with pytest.raises(ConfigError, match="not among the runs"):
        compare_runs(_pair(45), baseline="nope")
    with pytest.raises(ConfigError, match="at least two runs"):
        compare_runs(_pair(45)[:1])


def test_reports_are_self_contained() -> None:
    comparison = compare_runs(_pair(47))
    page = to_html(comparison)
    assert page.startswith("<!doctype html>") and "<svg" in page and "<script" not in page
    assert "http" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    markdown = to_markdown(comparison)
    assert "**Decision: choose" in markdown and "| candidate |" in markdown


def test_cli_compare_and_report(tmp_path: Path) -> None:
    runs = _pair(49)
    for run in runs:
        write_run(run, tmp_path / "runs" / f"{run.model.name}.json")
    proc = run_cli("eval", "compare", str(tmp_path / "runs"), "--baseline", "big", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["choice"] == "small" and data["baseline"] == "big" and "items" not in data["candidates"][0]
    proc = run_cli("eval", "compare", str(tmp_path / "runs"), "--baseline", "big", "--json", "--items")
    classes = {item["cls"] for item in json.loads(proc.stdout)["candidates"][0]["items"]}
    assert classes == {"equal", "wrong"}
    proc = run_cli("eval", "report", str(tmp_path / "runs"), "--baseline", "big", "--html",
                   str(tmp_path / "r.html"), "--md", str(tmp_path / "r.md"))
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "r.html").read_text(encoding="utf-8").count("<svg") == 1
    assert_one_line_error(run_cli("eval", "compare", str(tmp_path / "runs" / "big.json")), "at least two runs")
    assert_one_line_error(run_cli("eval", "compare", str(tmp_path / "missing.json"), str(tmp_path / "x.json")),
                          "cannot read the eval run")


# --- bad input on the command line, before any work ----------------------------------------------------


def test_cli_refuses_bad_sets_and_models_before_work(tmp_path: Path) -> None:
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"id": "a", "input": "hi", "reference": "x", "scorer": "rouge"}])
    assert_one_line_error(run_cli("eval", "run", str(bad), "--model", TEST_MODEL, "--out", str(tmp_path / "o")),
                          "line 1", "unknown scorer")
    good = write_jsonl(tmp_path / "good.jsonl", SMALL_SET[:1])
    assert_one_line_error(run_cli("eval", "run", str(good), "--model", "no-such-model"), "unknown model")
    missing = next((m.name for m in list_models() if not m.installed), None)
    if missing is not None:
        assert_one_line_error(run_cli("eval", "run", str(good), "--model", TEST_MODEL, "--model", missing),
                              "not installed")
        with pytest.raises(ModelNotInstalled):
            run_eval(good, [TEST_MODEL, missing], out_dir=tmp_path / "o")
    assert not (tmp_path / "o").exists()  # nothing ran


# --- real engine (SmolLM2) -----------------------------------------------------------------------------


def _outputs(run: EvalRun) -> list[tuple[str, Any]]:
    return [(r.id, r.output) for r in run.items]


@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, EvalRun]:
    base = tmp_path_factory.mktemp("evals")
    path = write_jsonl(base / "small.jsonl", SMALL_SET)
    params = EvalParams(threads=2, cache_dir=base / "cache-a")
    (run,) = run_eval(path, [TEST_MODEL], out_dir=base / "out", params=params)
    return base, path, run


def test_run_goes_through_the_batch_worker(first_run: tuple[Path, Path, EvalRun]) -> None:
    base, _, run = first_run
    assert [r.id for r in run.items] == ["s1", "q1", "e1", "m1"] and run.cached == 0
    by_id = {r.id: r for r in run.items}
    assert by_id["s1"].output["label"] in ("positive", "negative")
    assert by_id["e1"].error is None and set(by_id["e1"].output) >= {"name", "age"}
    assert isinstance(by_id["q1"].output, str) and isinstance(by_id["m1"].output, str)
    assert all(0.0 <= r.score <= 1.0 for r in run.items)
    assert run.speed.items == 4 and run.speed.elapsed_s > 0 and run.peak_rss_bytes and run.peak_rss_bytes > 0
    assert read_run(base / "out" / f"{TEST_MODEL.replace(':', '_')}.json").model_dump() == run.model_dump()
    cache_files = list((base / "cache-a").rglob("*.jsonl"))
    assert cache_files and all(f.read_bytes().endswith(b"\n") for f in cache_files)


def test_second_run_is_answered_from_the_cache(first_run: tuple[Path, Path, EvalRun]) -> None:
    base, path, run = first_run
    stamps = {f: (f.stat().st_mtime_ns, f.stat().st_size) for f in (base / "cache-a").rglob("*") if f.is_file()}
    (again,) = run_eval(path, [TEST_MODEL], out_dir=base / "out2", params=EvalParams(threads=2,
                                                                                     cache_dir=base / "cache-a"))
    assert again.cached == len(again.items) and _outputs(again) == _outputs(run)
    assert {f: (f.stat().st_mtime_ns, f.stat().st_size) for f in stamps} == stamps  # no batch job ran
    proc = run_cli("eval", "run", str(path), "--model", TEST_MODEL, "--cache-dir", str(base / "cache-a"),
                   "--out", str(base / "out3"), "--json")
    assert proc.returncode == 0, proc.stderr
    (summary,) = json.loads(proc.stdout)
    assert summary["cached"] == 4 and summary["items"] == 4 and Path(summary["file"]).exists()


def test_a_cache_being_filled_is_not_shared(first_run: tuple[Path, Path, EvalRun]) -> None:
    base, _, _ = first_run
    (root,) = [p for p in (base / "cache-a").iterdir() if p.is_dir()]
    extra = write_jsonl(base / "extra.jsonl", [{**SMALL_SET[1], "input": "What is 7 + 1? Number only."}])
    with ModelCache(root).locked(), pytest.raises(ConfigError, match="another `tiankong eval run`"):
        run_eval(extra, [TEST_MODEL], out_dir=base / "out-x", params=EvalParams(threads=2, cache_dir=base / "cache-a"))


def test_fresh_and_resumed_runs_give_identical_outputs(first_run: tuple[Path, Path, EvalRun]) -> None:
    base, path, run = first_run
    params = EvalParams(threads=2, cache_dir=base / "cache-b")
    (fresh,) = run_eval(path, [TEST_MODEL], out_dir=base / "out-b", params=params)
    assert fresh.cached == 0 and _outputs(fresh) == _outputs(run)
    # drop the last finished line of the chat group (as if the run had been killed there) and resume
    chat = next(f for f in (base / "cache-b").rglob("*.jsonl")
                if not f.name.endswith((".input.jsonl", ".errors.jsonl")) and "custom_id" in f.read_text("utf-8"))
    lines = chat.read_text(encoding="utf-8").splitlines(keepends=True)
    chat.write_text("".join(lines[:-1]), encoding="utf-8")
    (resumed,) = run_eval(path, [TEST_MODEL], out_dir=base / "out-c", params=params)
    assert resumed.cached == len(run.items) - 1 and _outputs(resumed) == _outputs(run)


@pytest.mark.skipif(os.environ.get("TIANKONG_EVAL_EXAMPLE") != "1", reason="set TIANKONG_EVAL_EXAMPLE=1 (slow)")
def test_example_set_runs_on_smollm2(tmp_path: Path) -> None:
    (run,) = run_eval(ROOT / "evals" / "example.jsonl", [TEST_MODEL], out_dir=tmp_path,
                      params=EvalParams(threads=2))
    assert len(run.items) >= 50 and run.failed < len(run.items)
