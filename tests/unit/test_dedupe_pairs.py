"""``probe-pair``'s comparisons of a pair's halves (``dedupe/pairs.py``): the ``digits`` column, and a decider that
reads exactly the columns it was fitted on (pure functions: no engine)."""

from __future__ import annotations

import numpy as np
import pytest

from tiankong.deciders import methods
from tiankong.dedupe.pairs import COLUMNS, LEGACY_COLUMNS, lexical, select
from tiankong.errors import ConfigError

DIGITS = COLUMNS.index("digits") - 1  # lexical() has every column but the cosine
NUMBERS = COLUMNS.index("numbers") - 1


@pytest.mark.parametrize(("a", "b", "numbers", "digits"), [
    # the same phone and street number; one side adds cross streets: not the same set, every shared digit kept
    ("carnegie deli 854 7th ave. between 54th and 55th sts. new york 212/757-2245",
     "carnegie deli 854 seventh ave. new york city 212-757-2245", 0.0, 1.0),
    # another phone: the street number and the area code are shared (6 of the side with fewer's 13 digits)
    ("uncle nicks 747 9th ave. new york 212/315-1726", "uncle nicks 747 ninth ave. new york city 212-245-7992",
     0.0, 6 / 13),
    ("no numbers here", "none here either", 1.0, 1.0),
    ("room 12", "room twelve", 0.0, 0.0),
])
def test_digits_counts_the_shared_numbers_of_the_side_with_fewer(a: str, b: str, numbers: float,
                                                                   digits: float) -> None:
    row = lexical(a, b)
    assert len(row) == len(COLUMNS) - 1
    assert row[NUMBERS] == numbers
    assert row[DIGITS] == pytest.approx(digits)


def _pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows of every column in which only ``digits`` separates the labels (0: same, 1: different)."""
    rng = np.random.default_rng(0)
    x = rng.uniform(0.4, 0.6, size=(n, len(COLUMNS)))
    y = np.arange(n) % 2
    x[:, COLUMNS.index("digits")] = np.where(y == 0, 0.95, 0.2)
    return x, y


def test_a_pair_decider_stores_its_columns_and_one_saved_before_reads_the_first_six() -> None:
    x, y = _pairs(40)
    state = methods.fit(methods.PAIR_PROBE, methods.FeatureSet([""] * 40, {"pair": x}), y, 2)
    assert state["columns"] == list(COLUMNS)
    fitted = methods.predict(methods.PAIR_PROBE, state, methods.FeatureSet([""] * 40, {"pair": x}))
    assert (fitted.argmax(axis=1) == y).mean() == 1.0  # it reads the digits column
    # a decider saved before `digits` existed: fitted on six columns, no "columns" in its state
    old = methods.fit(methods.PAIR_PROBE, methods.FeatureSet([""] * 40, {"pair": x[:, :6]}), y, 2)
    old.pop("columns")
    now = methods.predict(methods.PAIR_PROBE, old, methods.FeatureSet([""] * 40, {"pair": x}))
    assert now.shape == (40, 2)
    with_six = methods.predict_linear(old["linear"], x[:, : len(LEGACY_COLUMNS)])
    assert np.allclose(now, with_six)


def test_no_rows_select_to_no_rows_of_the_stored_columns() -> None:
    assert select(np.zeros((0,)), None).shape == (0, len(LEGACY_COLUMNS))
    assert select(np.zeros((0, len(COLUMNS))), list(COLUMNS)).shape == (0, len(COLUMNS))


def test_a_column_this_version_does_not_compute_is_one_clear_error() -> None:
    with pytest.raises(ConfigError, match="phonetic"):
        select(np.zeros((1, len(COLUMNS))), [*COLUMNS, "phonetic"])


ZH = ["我的订单还没有发货，请尽快处理。", "我买的东西到现在都没寄出来。"]
EN = ["My order has not shipped yet.", "Where is my parcel?"]
E5, MINILM = "multilingual-e5-small:q4_0", "all-minilm-l6-v2:f16"


def test_the_semantic_stage_reads_the_part_that_reads_the_text_at_that_parts_cosines() -> None:
    """Chinese text gets the multilingual part and its own cosines (e5's crowd near 1: 0.95 merges, CNSD STS-B dev's
    best); English and Latin-letter records keep MiniLM's 0.9 / 0.8; a given threshold wins, the floor kept under it."""
    from tiankong.dedupe import DedupeOptions
    from tiankong.dedupe.core import semantic_setting

    assert semantic_setting(ZH, DedupeOptions()) == (E5, 0.95, 0.9)
    assert semantic_setting(EN, DedupeOptions()) == (MINILM, 0.9, 0.8)
    assert semantic_setting(["carnegie deli 854 7th ave. new york 212/757-2245"], DedupeOptions())[0] == MINILM
    assert semantic_setting(ZH, DedupeOptions(semantic=0.97)) == (E5, 0.97, 0.9)
    assert semantic_setting(ZH, DedupeOptions(semantic=0.85)) == (E5, 0.85, 0.85)
    assert semantic_setting(ZH, DedupeOptions(semantic_low=0.93)) == (E5, 0.95, 0.93)
    assert semantic_setting(ZH, DedupeOptions(part=MINILM)) == (MINILM, 0.9, 0.8)
    with pytest.raises(ConfigError, match="at most semantic"):
        DedupeOptions(semantic=0.8, semantic_low=0.85).check()
    with pytest.raises(ConfigError, match="outside"):
        DedupeOptions(semantic_low=1.5).check()


def test_a_pair_decider_records_the_part_that_reads_its_pairs() -> None:
    from tiankong.dedupe import pair_text

    x, y = _pairs(40)
    for texts, part in ((ZH, E5), (EN, MINILM)):
        pairs = [pair_text(texts[0], texts[1])] * 40
        state = methods.fit(methods.PAIR_PROBE, methods.FeatureSet(pairs, {"pair": x}), y, 2)
        assert state["part"] == part
