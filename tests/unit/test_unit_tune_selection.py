"""The tune selection rule on hand-made CV score tables (no engine): the one-standard-error rule picks the method
that fits the fewest parameters among those within one standard error of the best, so a small example set does
not pick a method by noise, and a large one lets accuracy decide."""

from __future__ import annotations

import math

import pytest

from tiankong.tuning.classify import MethodScore, choose, standard_error


def row(method: str, accuracy: float, log_loss: float = 0.3, passes: int = 1) -> MethodScore:
    return MethodScore(method, 20, accuracy, accuracy, 0.05, 1.0, passes, log_loss)


def test_standard_error_is_the_binomial_one_agresti_coull_adjusted() -> None:
    p = (0.9 * 20 + 2) / 24
    assert standard_error(0.9, 20) == pytest.approx(math.sqrt(p * (1 - p) / 24))  # 0.0761
    assert standard_error(0.95, 200) == pytest.approx(0.01647, abs=1e-5)
    assert standard_error(1.0, 10) > 0.05  # the plain binomial error is 0 at 1.0: one answer of 24 chose


def test_a_perfect_score_does_not_win_by_one_answer() -> None:
    """tfidf 24/24 against probe-part 23/24 chose tfidf (± 0.000); at 0.970 it chose probe-part."""
    assert choose([row("tfidf", 1.0, passes=0), row("probe-part", 23 / 24)], 24)[0] == \
        choose([row("tfidf", 0.97, passes=0), row("probe-part", 23 / 24)], 24)[0]


def test_twenty_examples_do_not_pick_tfidf_by_noise() -> None:
    rows = [row("tfidf", 0.90, passes=0), row("probe-mean", 0.85), row("zeroshot", 0.60)]
    method, rule = choose(rows, 20)
    assert method == "probe-mean"  # 0.85 is within 0.067 of 0.90 and fits 384 weights a label, not thousands
    assert "one-standard-error" in rule and "0.900" in rule and "0.076" in rule


def test_many_examples_let_accuracy_decide() -> None:
    rows = [row("tfidf", 0.90, passes=0), row("probe-mean", 0.85), row("zeroshot", 0.60)]
    assert choose(rows, 400)[0] == "tfidf"  # ± 0.015: 0.85 is no longer as good


def test_the_choice_follows_the_scores() -> None:
    assert choose([row("tfidf", 0.90, passes=0), row("zeroshot", 0.88)], 20)[0] == "zeroshot"
    assert choose([row("tfidf", 0.90, passes=0), row("zeroshot", 0.80)], 20)[0] == "tfidf"
    # equally simple (both probes fit one weight per dimension and label): the lower CV log-loss
    assert choose([row("probe-mean", 0.9, 0.40), row("probe-last", 0.9, 0.20)], 100)[0] == "probe-last"
    assert choose([row("probe-mean", 0.9, 0.20), row("probe-last", 0.9, 0.40)], 100)[0] == "probe-mean"
