"""The embedding part as a decider's feature source (issue 39 item 4): `probe-part` is scored by tune without a chat
engine, registered, and answers classify through the part alone. Real part engine (all-minilm-l6-v2)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tiankong.deciders.registry import load_decider, save_decider
from tiankong.deciders.runtime import engine_needs
from tiankong.engine.parts import stop_parts
from tiankong.structured.drivers import run_sync
from tiankong.tasks.classify import decide_flow
from tiankong.tuning import load_examples, tune

DATA = Path(__file__).parents[1] / "data" / "tickets-labelled.jsonl"  # the 36 shipped tickets, 12 per label


@pytest.fixture(scope="module", autouse=True)
def parts_stopped() -> Iterator[None]:
    yield
    stop_parts()


def no_engine(*_: object) -> object:
    raise AssertionError("a probe-part decider must not ask the chat engine")


def test_probe_part_is_tuned_without_a_chat_engine_and_answers_through_the_part() -> None:
    report = tune(load_examples(DATA), name="tickets-part", methods_wanted=["tfidf", "probe-part"], run=None)
    full = {r.method: r for r in report.best_rows()}
    assert set(full) == {"tfidf", "probe-part"} and full["probe-part"].engine_passes == 0
    assert report.decider is not None and "one-standard-error" in report.rule
    only = tune(load_examples(DATA), name="tickets-part", methods_wanted=["probe-part"], run=None)
    assert only.decider is not None and only.chosen == "probe-part"
    save_decider(only.decider)
    decider = load_decider("tickets-part")
    assert decider.method == "probe-part" and len(decider.state["linear"]["coef"][0]) == 384
    assert not engine_needs(decider).engine
    answer = run_sync(decide_flow(decider, "I was charged twice for one order, please refund me"), no_engine)
    assert answer.label == "billing" and set(answer.scores) == {"billing", "bug", "account"}
    assert sum(answer.scores.values()) == pytest.approx(1.0, abs=2e-6)  # each rounded to 6 decimals
