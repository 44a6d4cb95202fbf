"""What a read-only sweep of `tune` found (2026-12-07): `--labels` naming a label twice registered a decider that
answered the other label, copies of a text in the training folds of their own test fold scored 1.000 on randomly
labelled data, and one text with two labels was taken without a word. Engine-free (tfidf)."""

from __future__ import annotations

import json
import random
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from tiankong import paths
from tiankong.tuning import tune_classify
from tiankong.tuning.classify import cv_splits
from tiankong.tuning.data import ExamplesError, check_examples

WORDS = ["invoice", "crash", "login", "refund", "screen", "password", "export", "email", "payment", "update",
         "printer", "network", "battery", "upload", "calendar"]


def test_a_label_named_twice_is_refused() -> None:
    rows = [{"text": f"text {i}", "label": "spam" if i % 2 else "ham"} for i in range(20)]
    with pytest.raises(ExamplesError, match="'spam' twice"):
        check_examples(rows, labels=["spam", "spam", "ham"])


def test_one_text_with_two_labels_is_refused_naming_both_records() -> None:
    rows = [{"text": f"text {i}", "label": "spam" if i % 2 else "ham"} for i in range(20)]
    rows.append({"text": "text 3 ", "label": "ham"})  # record 4's text (spam), again, as ham
    with pytest.raises(ExamplesError, match="record 21 .* record 4"):
        check_examples(rows)


def test_copies_of_a_text_stay_in_one_fold() -> None:
    texts = [w for w in WORDS for _ in range(4)]
    y = np.asarray([i % 2 for i, _ in enumerate(WORDS) for _ in range(4)])
    for split in cv_splits(texts, y, 5, seed=0, repeats=2):
        for train, test in split:
            assert not {texts[i] for i in train} & {texts[i] for i in test}


def test_random_labels_on_copied_texts_score_near_chance(tmp_path: Path) -> None:
    rng = random.Random(7)
    labels = {word: rng.choice("ab") for word in WORDS}
    data = tmp_path / "copies.jsonl"
    data.write_text("".join(json.dumps({"text": f"the {w} thing", "label": labels[w]}) + "\n"
                            for w in WORDS for _ in range(4)), encoding="utf-8")
    report = tune_classify(data, name="copies", methods=["tfidf"], save=False, folds=3)
    (row,) = [r for r in report.best_rows() if r.method == "tfidf"]
    assert row.accuracy < 0.8, row.accuracy  # 1.000 when each text's copies were in its own training folds


def examples_file(path: Path) -> Path:
    path.write_text("".join(json.dumps({"text": f"the {w} thing number {i}", "label": "spam" if i % 2 else "ham"})
                            + "\n" for i, w in enumerate(WORDS * 2)), encoding="utf-8")
    return path


def test_a_builtin_name_is_taken_only_by_a_decider_that_decides_the_same(tmp_path: Path) -> None:
    """A classify decider tuned as `guard` (or `rerank`) replaced the shipped one for every caller and broke the
    default `tiankong guard` / `tiankong rerank`; refused before the CV."""
    from tiankong.errors import ConfigError

    data = examples_file(tmp_path / "spam.jsonl")
    for name in ("guard", "rerank"):
        with pytest.raises(ConfigError, match="built-in"):
            tune_classify(data, name=name, methods=["tfidf"], save=True)


def test_the_registry_and_rm_say_what_they_do(tmp_path: Path) -> None:
    from tiankong import paths
    from tiankong.deciders.registry import list_deciders, remove_decider
    from tiankong.errors import ConfigError

    tune_classify(examples_file(tmp_path / "spam.jsonl"), name="spam", methods=["tfidf"])
    stray = paths.data_dir() / "deciders" / "Upper"  # a folder made by hand: `deciders list` stopped on it
    stray.mkdir(parents=True)
    (stray / "v1.json").write_text("{}", encoding="utf-8")
    assert "spam" in {d.name for d in list_deciders()}
    with pytest.raises(ConfigError, match="every version"):
        remove_decider("spam@1")  # it suggested `rm spam`, which removes every version


def test_tune_dedupe_reads_the_design_record_form(tmp_path: Path) -> None:
    """DESIGN.md: records {"a", "b", "same"}; `same` was read as no label."""
    from tiankong.tuning.dedupe import pair_rows

    data = tmp_path / "pairs.jsonl"
    data.write_text(json.dumps({"a": "x", "b": "y", "same": True}) + "\n" +
                    json.dumps({"a": "x", "b": "z", "same": 0}) + "\n", encoding="utf-8")
    assert [row["label"] for row in pair_rows(data)] == ["same", "different"]
    data.write_text(json.dumps({"a": "x", "b": "y"}) + "\n", encoding="utf-8")
    with pytest.raises(ExamplesError, match="no label"):
        pair_rows(data)


def test_tune_rerank_checks_its_name_first(tmp_path: Path) -> None:
    from tiankong.errors import ConfigError
    from tiankong.tuning.rerank import tune_rerank

    said: list[str] = []
    with pytest.raises(ConfigError, match="invalid decider name"):
        tune_rerank(tmp_path / "does-not-matter.jsonl", name="../x", log=said.append)
    assert said == []  # before any scoring


def test_tunes_of_one_name_at_once_take_distinct_versions() -> None:
    """Two tunes of one name at the same time took the same number, and the second's file replaced the first's."""
    from tiankong.deciders.registry import Decider, load_decider, save_decider

    start = threading.Barrier(8)

    def save(i: int) -> int:
        decider = Decider(name="mail", method="tfidf", labels=["a", "b"], state={"i": i})
        start.wait()
        save_decider(decider)
        return decider.version

    with ThreadPoolExecutor(8) as pool:
        versions = list(pool.map(save, range(8)))
    assert sorted(versions) == list(range(1, 9))
    # each version holds its own decider, whole; no half-written file is left beside them
    assert sorted(load_decider(f"mail@{v}").state["i"] for v in versions) == list(range(8))
    assert sorted(p.name for p in (paths.data_dir() / "deciders" / "mail").iterdir()) == sorted(
        f"v{v}.json" for v in range(1, 9))
    # readable by a gateway run as another user, as the files written before were
    assert all((paths.data_dir() / "deciders" / "mail" / f"v{v}.json").stat().st_mode & 0o777 == 0o644
               for v in range(1, 9))


def test_a_tfidf_decider_says_when_the_text_is_in_a_script_its_examples_never_had(tmp_path: Path) -> None:
    """An English TF-IDF decider answered Chinese text with its prior and no word of it."""
    from tiankong.structured.drivers import run_sync
    from tiankong.tasks.classify import decide_flow

    english = tune_classify(examples_file(tmp_path / "en.jsonl"), name="en-spam", methods=["tfidf"]).decider
    assert english is not None and english.method == "tfidf"

    def warning(text: str) -> str | None:
        return run_sync(decide_flow(english, text), lambda *a: None).warning

    assert warning("the red thing number 4") is None
    assert warning("12345 !!!") is None  # no letters: nothing to say
    said = warning("我的账户被重复扣费了，请退款。")
    assert said is not None and "Chinese" in said and "en-spam@1" in said
    assert warning("我的账户 the red thing number 4 and more words") is None  # mostly Latin letters: seen
    chinese = tmp_path / "zh.jsonl"
    chinese.write_text("".join(json.dumps({"text": f"第{i}号{w}", "label": "spam" if i % 2 else "ham"},
                                          ensure_ascii=False) + "\n" for i, w in enumerate(["红色", "绿色", "蓝色",
                                                                                            "黄色"] * 5)),
                       encoding="utf-8")
    zh = tune_classify(chinese, name="zh-spam", methods=["tfidf"]).decider
    assert zh is not None
    assert run_sync(decide_flow(zh, "please refund the charge"), lambda *a: None).warning is not None
